//===- JsonObject.h - a small JSON file with a fixed set of fields -*- C++ -*-===//
//
// MLIR-free. The shared first step of the little description files
// (topologies/, devices/): parse, require an object, refuse unknown fields,
// read positive numbers — each error naming the file, the field and the fix.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_JSONOBJECT_H
#define LLCDIST_SUPPORT_JSONOBJECT_H

#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist {

/// The first field of the object `obj` that is not in `known`, as an error
/// naming it ("<path>: field '<prefix><key>': unknown field (known: ...)";
/// `prefix` names a nested object, e.g. "reserve.").
inline std::optional<std::string> refuseUnknownFields(const nlohmann::json &obj,
                                                      const std::string &path,
                                                      const std::vector<std::string> &known,
                                                      const std::string &prefix = "") {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    std::string list;
    for (const std::string &k : known) {
      ok |= k == it.key();
      list += (list.empty() ? "" : ", ") + k;
    }
    if (!ok)
      return path + ": field '" + prefix + it.key() + "': unknown field (known: " + list + ")";
  }
  return std::nullopt;
}

/// Parses `text` (the content of `path`) into `out`: a JSON object whose
/// fields are all in `known`.
/// The deepest nesting a JSON input file may have: far above any config,
/// device or plan file (they nest a few levels), low enough that nothing
/// recursive (printing, destroying) can run out of stack.
constexpr int kMaxJsonDepth = 256;

/// Parses `text` strictly into `out`: nesting deeper than kMaxJsonDepth, a
/// key twice in one object (Python's json would silently keep the last) and
/// numbers too large for a double are errors. Returns the error (without the
/// file name: the caller prefixes it) and, for syntax errors, sets `byte`.
inline std::optional<std::string> parseStrictJson(std::string_view text, nlohmann::json &out,
                                                  size_t &byte) {
  using json = nlohmann::json;
  struct Refused {
    std::string message;
  };
  std::vector<std::vector<std::string>> keys; // per open object, its keys so far
  int depth = 0;
  auto cb = [&](int, json::parse_event_t event, json &parsed) {
    switch (event) {
    case json::parse_event_t::object_start:
    case json::parse_event_t::array_start:
      if (++depth > kMaxJsonDepth)
        throw Refused{"nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
      if (event == json::parse_event_t::object_start)
        keys.emplace_back();
      break;
    case json::parse_event_t::object_end:
      --depth;
      keys.pop_back();
      break;
    case json::parse_event_t::array_end:
      --depth;
      break;
    case json::parse_event_t::key: {
      const std::string &k = parsed.get_ref<const std::string &>();
      for (const std::string &seen : keys.back())
        if (seen == k)
          throw Refused{"duplicate key '" + k + "' in one object"};
      keys.back().push_back(k);
      break;
    }
    default:
      break;
    }
    return true;
  };
  byte = 0;
  try {
    out = json::parse(text.begin(), text.end(), cb);
  } catch (const Refused &r) {
    return r.message;
  } catch (const json::parse_error &e) {
    byte = e.byte;
    return std::string(e.what());
  } catch (const json::exception &e) {
    // e.g. a number too large for a double (1e999): out_of_range.406.
    return std::string(e.what());
  }
  return std::nullopt;
}

inline std::optional<std::string> parseJsonObject(const std::string &text,
                                                  const std::string &path,
                                                  const std::vector<std::string> &known,
                                                  nlohmann::json &out) {
  size_t byte = 0;
  if (auto err = parseStrictJson(text, out, byte))
    return path + ": malformed JSON" + (byte ? " (byte " + std::to_string(byte) + ")" : "") +
           ": " + *err;
  if (!out.is_object())
    return path + ": expected a JSON object";
  return refuseUnknownFields(out, path, known);
}

/// Reads `v`, the field that `where` names ("<file>: field '<name>'"), as
/// an integer >= 1 into `dst`.
inline std::optional<std::string> readPositiveInt(const nlohmann::json &v,
                                                  const std::string &where, int64_t &dst) {
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    return where + ": must be a positive integer, got " + v.dump();
  dst = v.get<int64_t>();
  return std::nullopt;
}

/// Reads `v`, the field that `where` names, as a number > 0 into `dst`;
/// `what` says what it is in the error ("positive number of GB/s").
inline std::optional<std::string> readPositiveNumber(const nlohmann::json &v,
                                                     const std::string &where,
                                                     const std::string &what, double &dst) {
  if (!v.is_number() || !(v.get<double>() > 0))
    return where + ": must be a " + what + ", got " + v.dump();
  dst = v.get<double>();
  return std::nullopt;
}

/// One numeric field of a nested object, e.g. the "cost" objects of device
/// and topology files: present, finite and in [lo, hi] (hi exclusive when
/// `hiOpen`); the message names `path`, the dotted field and the range.
inline std::optional<std::string> readBoundedNumber(const nlohmann::json &obj,
                                                    const std::string &path,
                                                    const std::string &prefix,
                                                    const char *key, double lo, double hi,
                                                    const char *unit, double &dst) {
  const std::string where = path + ": field '" + prefix + key + "'";
  if (!obj.contains(key))
    return path + ": missing field '" + prefix + key + "' (" + unit + ")";
  const nlohmann::json &v = obj[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi)
    return where + ": must be " + unit + " in [" + nlohmann::json(lo).dump() + ", " +
           nlohmann::json(hi).dump() + "], got " + v.dump();
  dst = v.get<double>();
  return std::nullopt;
}

/// A required non-empty string field of a nested object (e.g. a "source"
/// citing where a file's figures come from); `what` says what it must hold.
inline std::optional<std::string> readNonEmptyString(const nlohmann::json &obj,
                                                     const std::string &path,
                                                     const std::string &prefix, const char *key,
                                                     const char *what, std::string &dst) {
  if (!obj.contains(key) || !obj[key].is_string() || obj[key].get<std::string>().empty())
    return path + ": field '" + prefix + key + "': must be a non-empty string " + what;
  dst = obj[key].get<std::string>();
  return std::nullopt;
}

} // namespace llcdist

#endif
