// Private helpers for reading validated JSON with errors that name the file and the JSON path.
// Every accessor returns a Status; nothing here throws.
#pragma once

#include "llcdist/runtime/Status.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt::planjson {

using json = nlohmann::ordered_json;  // the compiler's type: the verifier hands its trees over without a copy

inline std::string key(const std::string& path, const std::string& k) { return path.empty() ? k : path + "." + k; }
inline std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

class Doc {
 public:
  explicit Doc(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // "<file>: <path>: <msg>" (path "(top level)" when empty).
  Status error(const std::string& path, const std::string& msg) const {
    return Status::invalidArgument(file_ + ": " + (path.empty() ? std::string("(top level)") : path) + ": " + msg);
  }

  // Parses text into an object; malformed or truncated JSON is a DataLoss error with the parser's
  // byte position, JSON nested deeper than kMaxJsonDepth an InvalidArgument naming the byte.
  static constexpr int kMaxJsonDepth = 64;
  Status parse(const std::string& text, json* out) const;

  // o must be an object holding every `required` key and no key outside required ∪ optional.
  Status keys(const json& o, const std::string& path, std::initializer_list<const char*> required,
              std::initializer_list<const char*> optional = {}) const;
  Status object(const json& v, const std::string& path) const;
  Status array(const json& v, const std::string& path) const;

  // Field readers: path is the object's path, k the field; the field must exist (checked by keys()).
  Status integer(const json& o, const std::string& path, const char* k, int64_t* out, int64_t min = INT64_MIN,
                 int64_t max = INT64_MAX) const;
  Status number(const json& o, const std::string& path, const char* k, double* out) const;
  Status string(const json& o, const std::string& path, const char* k, std::string* out) const;
  Status boolean(const json& o, const std::string& path, const char* k, bool* out) const;
  // An array of integers each in [min, max].
  Status intArray(const json& o, const std::string& path, const char* k, std::vector<int64_t>* out,
                  int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;

  // Value-level versions (v at `path`).
  Status integerValue(const json& v, const std::string& path, int64_t* out, int64_t min = INT64_MIN,
                      int64_t max = INT64_MAX) const;
  Status numberValue(const json& v, const std::string& path, double* out) const;

 private:
  std::string file_;
};

// The accepting halves of integerValue / numberValue, with no path or message: true (and *out set)
// when v is an integer in [min, max] / a finite number.
bool integerIn(const json& v, int64_t min, int64_t max, int64_t* out);
bool finiteNumber(const json& v, double* out);

// "string \"abc\"", "number 1.5", "array", ... for messages.
std::string describe(const json& v);

// What the manifest's and the programs' loaders share (PlanJson.cpp).
// "format" and "version" first, so a newer plan gets a version error rather than field errors.
Status checkHeader(const Doc& doc, const json& root, std::string_view format, int64_t* version);
// o.shape: a non-empty array of integers >= 1.
Status readShape(const Doc& doc, const json& o, const std::string& path, std::vector<int64_t>* shape);
// *n = the product of shape; an error at path.shape when it overflows int64.
Status numelOf(const Doc& doc, const std::string& path, const std::vector<int64_t>& shape, int64_t* n);

template <size_t N>
bool oneOf(const std::string& s, const std::array<std::string_view, N>& names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}
template <size_t N>
std::string listNames(const std::array<std::string_view, N>& names) {
  std::string s;
  for (auto n : names) s += (s.empty() ? "\"" : ", \"") + std::string(n) + "\"";
  return s;
}

// a·b, false; true (and *out unspecified) when it overflows int64.
inline bool mulOverflow(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }
// "[2, 3, 4]".
inline std::string shapeString(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + "]";
}

}  // namespace llcdist::rt::planjson
