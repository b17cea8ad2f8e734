// Private helpers for reading validated JSON with errors that name the file and the JSON path.
// Every accessor returns a Status; nothing here throws.
#pragma once

#include "llcdist/runtime/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
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
  Status integer(const json& o, const std::string& path, const char* k, int64_t* out,
                 int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
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

}  // namespace llcdist::rt::planjson
