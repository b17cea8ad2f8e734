//===- JsonText.cpp - plan JSON as text, streamed --------------------------===//
#include "llcdist/Target/Plan/JsonText.h"

#include <charconv>
#include <cstring>

using json = nlohmann::ordered_json;

namespace {

/// A string dump copies verbatim: printable ASCII other than '"' and '\'
/// (dump escapes those two and control characters, and checks UTF-8).
bool isPlain(const std::string &s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
      return false;
  return true;
}

void writeString(llvm::raw_ostream &os, const std::string &s) {
  if (isPlain(s))
    os << '"' << s << '"';
  else
    os << json(s).dump();
}

template <typename Int> void writeInt(llvm::raw_ostream &os, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  os.write(buf, size_t(end - buf));
}

/// The elements of a non-empty array of integers (shapes, ranks and
/// slot_offsets, the bulk of a plan's lines), formatted in a local buffer:
/// a stream write per element would cost more than its digits. False (and
/// nothing written) when an element is not an integer.
bool writeIntElements(llvm::raw_ostream &os, const json::array_t &a, unsigned indent) {
  for (const json &e : a)
    if (!e.is_number_integer())
      return false;
  char buf[4096];
  const size_t line = indent + 1 + 24; // the longest: indent, 20 digits and a sign, ",\n"
  if (line > sizeof(buf))
    return false;
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (n + line > sizeof(buf)) {
      os.write(buf, n);
      n = 0;
    }
    std::memset(buf + n, ' ', indent + 1);
    n += indent + 1;
    char *end = a[i].is_number_unsigned()
                    ? std::to_chars(buf + n, buf + sizeof(buf), a[i].get<uint64_t>()).ptr
                    : std::to_chars(buf + n, buf + sizeof(buf), a[i].get<int64_t>()).ptr;
    n = size_t(end - buf);
    if (i + 1 < a.size())
      buf[n++] = ',';
    buf[n++] = '\n';
  }
  os.write(buf, n);
  return true;
}

/// dump(1)'s layout: a non-empty container opens its line, puts each
/// element on a line of its own indented one more than `indent`, and
/// closes on a line indented `indent`.
void write(llvm::raw_ostream &os, const json &j, unsigned indent) {
  switch (j.type()) {
  case json::value_t::object: {
    const json::object_t &o = j.get_ref<const json::object_t &>();
    if (o.empty()) {
      os << "{}";
      return;
    }
    os << "{\n";
    size_t left = o.size();
    for (const auto &[key, value] : o) {
      os.indent(indent + 1);
      writeString(os, key);
      os << ": ";
      write(os, value, indent + 1);
      os << (--left ? ",\n" : "\n");
    }
    os.indent(indent) << '}';
    return;
  }
  case json::value_t::array: {
    const json::array_t &a = j.get_ref<const json::array_t &>();
    if (a.empty()) {
      os << "[]";
      return;
    }
    os << "[\n";
    if (writeIntElements(os, a, indent)) {
      os.indent(indent) << ']';
      return;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      os.indent(indent + 1);
      write(os, a[i], indent + 1);
      os << (i + 1 < a.size() ? ",\n" : "\n");
    }
    os.indent(indent) << ']';
    return;
  }
  case json::value_t::string:
    writeString(os, j.get_ref<const std::string &>());
    return;
  case json::value_t::number_integer:
    writeInt(os, j.get<int64_t>());
    return;
  case json::value_t::number_unsigned:
    writeInt(os, j.get<uint64_t>());
    return;
  default: // floats, booleans, null, binary: nlohmann's own text
    os << j.dump(1);
    return;
  }
}

} // namespace

void llcdist::writeJsonText(llvm::raw_ostream &os, const json &j) { write(os, j, 0); }
