// JSON field readers with file + path errors. See PlanJson.h.
#include "PlanJson.h"

#include "llcdist/runtime/PlanSchema.h"

#include <algorithm>
#include <cmath>

namespace llcdist::rt::planjson {

std::string describe(const json& v) {
  std::string d = v.type_name();
  if (v.is_primitive() && !v.is_null()) {
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    d += " " + s;
  }
  return d;
}

namespace {
// The byte offset where `text`'s arrays and objects first nest deeper than `limit`, or npos. Brackets
// inside strings (escapes included) do not count; malformed text is left to the parser.
size_t tooDeepAt(const std::string& text, int limit) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}
}  // namespace

Status Doc::parse(const std::string& text, json* out) const {
  // A plan, manifest or checkpoint file nests a few levels; a value nested thousands deep would only
  // exhaust the stack of whatever copies it, so it is refused before the parse.
  if (const size_t at = tooDeepAt(text, kMaxJsonDepth); at != std::string::npos)
    return Status::invalidArgument(file_ + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                   " levels (arrays and objects) at byte " + std::to_string(at) +
                                   "; no field of this format nests that deep");
  try {
    *out = json::parse(text);
  } catch (const json::exception& e) {
    return Status::dataLoss(file_ + ": malformed or truncated JSON: " + e.what());
  }
  if (!out->is_object()) return error("", "expected a JSON object, got " + describe(*out));
  return Status::ok();
}

Status Doc::object(const json& v, const std::string& path) const {
  return v.is_object() ? Status::ok() : error(path, "expected an object, got " + describe(v));
}

Status Doc::array(const json& v, const std::string& path) const {
  return v.is_array() ? Status::ok() : error(path, "expected an array, got " + describe(v));
}

Status Doc::keys(const json& o, const std::string& path, std::initializer_list<const char*> required,
                 std::initializer_list<const char*> optional) const {
  LLCDIST_RETURN_IF_ERROR(object(o, path));
  for (const char* k : required)
    if (!o.contains(k)) return error(key(path, k), "missing required field");
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    auto same = [&](const char* c) { return k == c; };
    if (std::any_of(required.begin(), required.end(), same) || std::any_of(optional.begin(), optional.end(), same))
      continue;
    std::string expected;
    for (const char* c : required) expected += std::string(expected.empty() ? "" : ", ") + c;
    for (const char* c : optional) expected += std::string(expected.empty() ? "" : ", ") + c + " (optional)";
    return error(key(path, k), "unknown field (expected: " + (expected.empty() ? "none" : expected) + ")");
  }
  return Status::ok();
}

bool integerIn(const json& v, int64_t min, int64_t max, int64_t* out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) return false;
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) return false;
  *out = x;
  return true;
}

Status Doc::integerValue(const json& v, const std::string& path, int64_t* out, int64_t min, int64_t max) const {
  if (integerIn(v, min, max, out)) return Status::ok();
  if (!v.is_number_integer()) return error(path, "expected an integer, got " + describe(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return error(path, "integer " + v.dump() + " is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) {
    std::string range = min == INT64_MIN   ? "<= " + std::to_string(max)
                        : max == INT64_MAX ? ">= " + std::to_string(min)
                                           : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return error(path, "expected an integer " + range + ", got " + std::to_string(x));
  }
  *out = x;
  return Status::ok();
}

bool finiteNumber(const json& v, double* out) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  if (!std::isfinite(x)) return false;
  *out = x;
  return true;
}

Status Doc::numberValue(const json& v, const std::string& path, double* out) const {
  if (finiteNumber(v, out)) return Status::ok();
  if (!v.is_number()) return error(path, "expected a number, got " + describe(v));
  *out = v.get<double>();
  if (!std::isfinite(*out)) return error(path, "expected a finite number");
  return Status::ok();
}

// The field readers below build the field's path only for an error: a plan's arrays grow with the
// microbatch count (slot_offsets), and a path string per element would cost more than the check.
Status Doc::integer(const json& o, const std::string& path, const char* k, int64_t* out, int64_t min,
                    int64_t max) const {
  const json& v = o.at(k);
  if (integerIn(v, min, max, out)) return Status::ok();
  return integerValue(v, key(path, k), out, min, max);
}

Status Doc::number(const json& o, const std::string& path, const char* k, double* out) const {
  const json& v = o.at(k);
  if (finiteNumber(v, out)) return Status::ok();
  return numberValue(v, key(path, k), out);
}

Status Doc::string(const json& o, const std::string& path, const char* k, std::string* out) const {
  const json& v = o.at(k);
  if (!v.is_string()) return error(key(path, k), "expected a string, got " + describe(v));
  *out = v.get_ref<const std::string&>();
  return Status::ok();
}

Status Doc::boolean(const json& o, const std::string& path, const char* k, bool* out) const {
  const json& v = o.at(k);
  if (!v.is_boolean()) return error(key(path, k), "expected true or false, got " + describe(v));
  *out = v.get<bool>();
  return Status::ok();
}

Status Doc::intArray(const json& o, const std::string& path, const char* k, std::vector<int64_t>* out, int64_t min,
                     int64_t max) const {
  const json& v = o.at(k);
  if (!v.is_array()) return array(v, key(path, k));
  out->clear();
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    if (!integerIn(v[i], min, max, &x)) return integerValue(v[i], index(key(path, k), i), &x, min, max);
    out->push_back(x);
  }
  return Status::ok();
}

namespace sc = schema;

namespace {

std::string supportedVersions() {
  std::string s;
  for (int64_t v = sc::kMinSupportedVersion; v <= sc::kPlanVersion; ++v)
    s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

}  // namespace

Status checkHeader(const Doc& doc, const json& root, std::string_view format, int64_t* version) {
  if (!root.contains("format"))
    return doc.error("format", "missing required field (expected \"" + std::string(format) + "\")");
  std::string f;
  LLCDIST_RETURN_IF_ERROR(doc.string(root, "", "format", &f));
  if (f != format)
    return doc.error("format", "expected \"" + std::string(format) + "\", got \"" + f + "\"" +
                                   (f == sc::kPlanFormat || f == sc::kProgramFormat ? " (wrong file?)" : ""));
  if (!root.contains("version")) return doc.error("version", "missing required field");
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "version", version));
  if (*version < sc::kMinSupportedVersion || *version > sc::kPlanVersion)
    return doc.error("version", "unsupported version " + std::to_string(*version) + " (this runtime supports version " +
                                    supportedVersions() + "; recompile the plan with a matching llc-dist)");
  return Status::ok();
}

Status readShape(const Doc& doc, const json& o, const std::string& path, std::vector<int64_t>* shape) {
  return doc.intArray(o, path, "shape", shape, 1);
}

Status numelOf(const Doc& doc, const std::string& path, const std::vector<int64_t>& shape, int64_t* n) {
  *n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(*n, d, n)) return doc.error(key(path, "shape"), "element count overflows int64");
  return Status::ok();
}

}  // namespace llcdist::rt::planjson
