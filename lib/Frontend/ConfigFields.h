//===- ConfigFields.h - reading a Hugging Face config.json's fields -*- C++ -*-===//
//
// Internal to lib/Frontend: the FieldReader every family's reader
// (ModelFamilies.cpp) reads its fields with, remembering which it used so
// that anything left over is reported as an unknown field; errors name the
// file, the line and column of the field and what to do.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_FRONTEND_CONFIGFIELDS_H
#define LLCDIST_LIB_FRONTEND_CONFIGFIELDS_H

#include "llcdist/Frontend/ModelConfig.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace llcdist::config {
using json = nlohmann::json;

/// Thrown inside the config readers; converted to ConfigError at the API.
struct Failure {
  std::string message;
};

inline std::pair<unsigned, unsigned> lineColOf(std::string_view text, size_t offset) {
  unsigned line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

inline std::string lineCol(std::string_view text, size_t offset) {
  auto [line, col] = lineColOf(text, offset);
  return std::to_string(line) + ":" + std::to_string(col);
}

/// The offset of `key`'s first occurrence as an object key, or npos.
inline size_t keyOffset(std::string_view text, const std::string &key) {
  std::string quoted = "\"" + key + "\"";
  for (size_t pos = text.find(quoted); pos != std::string_view::npos; pos = text.find(quoted, pos + 1)) {
    size_t after = pos + quoted.size();
    while (after < text.size() && isspace((unsigned char)text[after]))
      ++after;
    if (after < text.size() && text[after] == ':')
      return pos;
  }
  return std::string_view::npos;
}

/// Reads the fields of one JSON object, remembering which were used, so
/// that anything left over is reported as an unknown field.
class FieldReader {
public:
  FieldReader(const json &obj, std::string_view text, std::string path) : obj(obj), text(text), path(std::move(path)) {}

  [[noreturn]] void fail(const std::string &key, const std::string &why) const {
    throw Failure{where(key) + "field '" + key + "': " + why};
  }

  bool has(const std::string &key) const { return obj.contains(key) && !obj.at(key).is_null(); }

  const json &get(const std::string &key) {
    used.insert(key);
    if (!has(key))
      throw Failure{path + ": missing field '" + key + "'"};
    return obj.at(key);
  }

  int64_t positiveInt(const std::string &key, std::optional<int64_t> dflt = std::nullopt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key + "' (a positive integer)"};
    }
    const json &v = obj.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(key, "must be a positive integer, got " + v.dump());
    int64_t x = v.get<int64_t>();
    // Sanity bounds far above every published model (405B: 126 layers,
    // hidden 16,384, vocabulary 128,256): a typo stops here, before counts
    // overflow or a graph of millions of layers is built.
    int64_t bound = maxFor(key);
    if (x > bound)
      fail(key, "must be at most " + std::to_string(bound) +
                    " (a sanity bound far above any "
                    "published model), got " +
                    v.dump());
    return x;
  }

  static int64_t maxFor(const std::string &key) {
    static const std::map<std::string, int64_t> bounds = {{"n_layer", 1 << 16},
                                                          {"num_hidden_layers", 1 << 16},
                                                          {"num_layers", 1 << 16},
                                                          {"num_heads", 1 << 14},
                                                          {"n_embd", 1 << 18},
                                                          {"hidden_size", 1 << 18},
                                                          {"n_inner", 1 << 20},
                                                          {"ffn_dim", 1 << 20},
                                                          {"intermediate_size", 1 << 20},
                                                          {"n_head", 1 << 14},
                                                          {"num_attention_heads", 1 << 14},
                                                          {"num_key_value_heads", 1 << 14},
                                                          {"head_dim", 1 << 14},
                                                          {"vocab_size", 1 << 27},
                                                          {"n_positions", 1 << 24},
                                                          {"max_position_embeddings", 1 << 24},
                                                          {"num_local_experts", 1 << 16},
                                                          {"num_experts", 1 << 16},
                                                          {"num_experts_per_tok", 1 << 16},
                                                          {"moe_intermediate_size", 1 << 20},
                                                          {"shared_expert_intermediate_size", 1 << 20},
                                                          {"decoder_sparse_step", 1 << 16}};
    auto it = bounds.find(key);
    return it == bounds.end() ? (int64_t(1) << 40) : it->second;
  }

  double positiveFloat(const std::string &key, std::optional<double> dflt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key + "' (a positive number)"};
    }
    const json &v = obj.at(key);
    if (!v.is_number() || !(v.get<double>() > 0))
      fail(key, "must be a positive number, got " + v.dump());
    return v.get<double>();
  }

  bool boolean(const std::string &key, bool dflt) {
    used.insert(key);
    if (!has(key))
      return dflt;
    const json &v = obj.at(key);
    if (!v.is_boolean())
      fail(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  std::string string(const std::string &key, std::optional<std::string> dflt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key + "' (a string)"};
    }
    const json &v = obj.at(key);
    if (!v.is_string())
      fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

  /// A reader of the JSON object at `key` (MPT's attn_config), whose fields
  /// are blamed in the same file; absent or null reads as {}. The object
  /// must outlive the reader.
  FieldReader object(const std::string &key) {
    static const json kEmpty = json::object();
    used.insert(key);
    if (!has(key))
      return FieldReader(kEmpty, text, path);
    const json &v = obj.at(key);
    if (!v.is_object())
      fail(key, "must be a JSON object, got " + v.dump());
    return FieldReader(v, text, path);
  }

  /// Fields that do not change the training graph (metadata, dropout, ...).
  void ignore(std::initializer_list<const char *> keys) {
    for (const char *k : keys)
      used.insert(k);
  }

  void rejectUnknown(const std::string &arch) const {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!used.count(it.key()))
        fail(it.key(), "unknown field for " + arch +
                           "; remove it, or check its spelling against the "
                           "Hugging Face config of " +
                           arch);
  }

  /// "FILE:LINE:COL: " of the key's first occurrence, or "FILE: ".
  std::string where(const std::string &key) const {
    size_t pos = keyOffset(text, key);
    return pos == std::string_view::npos ? path + ": " : path + ":" + lineCol(text, pos) + ": ";
  }

private:
  const json &obj;
  std::string_view text;
  std::string path;
  std::set<std::string> used;
};

/// head_dim = hidden / heads (a family whose config has no head_dim field),
/// which the heads must divide; the keys are the family's names of the two.
inline void headDimOfHidden(FieldReader &r, ModelConfig &c, const char *headsKey = "num_attention_heads",
                            const char *hiddenKey = "hidden_size") {
  if (c.hidden % c.heads != 0)
    r.fail(headsKey, std::string(headsKey) + "=" + std::to_string(c.heads) + " does not divide " + hiddenKey + "=" +
                         std::to_string(c.hidden));
  c.headDim = c.hidden / c.heads;
}

/// The config class's attribute_map (names transformers also takes) refused,
/// naming the field to write instead.
inline void refuseAliases(FieldReader &r, const char *cls,
                          std::initializer_list<std::pair<const char *, const char *>> aliases) {
  for (auto [alias, key] : aliases)
    if (r.has(alias))
      r.fail(alias, std::string("is ") + cls + "'s alias of " + key + "; write " + key);
}

/// The families' readers (ModelFamilies.cpp, GptFamilies.cpp): each fills `c` from the
/// config's fields of its transformers class.
void parseGPT2(FieldReader &r, ModelConfig &c, const json &);
void parseLlama(FieldReader &r, ModelConfig &c, const json &obj);
void parsePhi(FieldReader &r, ModelConfig &c, const json &obj);
void parseStableLm(FieldReader &r, ModelConfig &c, const json &obj);
void parseOlmo(FieldReader &r, ModelConfig &c, const json &obj);
void parseGptNeoX(FieldReader &r, ModelConfig &c, const json &obj);
void parseFalcon(FieldReader &r, ModelConfig &c, const json &obj);
void parseBloom(FieldReader &r, ModelConfig &c, const json &);
void parseGptBigCode(FieldReader &r, ModelConfig &c, const json &);
void parseMpt(FieldReader &r, ModelConfig &c, const json &);
void parseGptJ(FieldReader &r, ModelConfig &c, const json &);
void parseOpt(FieldReader &r, ModelConfig &c, const json &);
void parseCohere(FieldReader &r, ModelConfig &c, const json &obj);
void parseStarcoder2(FieldReader &r, ModelConfig &c, const json &obj);
void parseGptNeo(FieldReader &r, ModelConfig &c, const json &);
void parseBioGpt(FieldReader &r, ModelConfig &c, const json &);
void parseCodeGen(FieldReader &r, ModelConfig &c, const json &);
} // namespace llcdist::config

#endif // LLCDIST_LIB_FRONTEND_CONFIGFIELDS_H
