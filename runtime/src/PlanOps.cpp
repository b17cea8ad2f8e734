// One op of a program: roles and attrs against PlanSchema, dtypes, element counts implied by the
// attrs, and argument aliasing. See Plan.h for the contract.
#include "PlanOps.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace llcdist::rt {

// ---- Op accessors ----------------------------------------------------------------------------------
int64_t Op::intAttr(const std::string& name, int64_t dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return dflt;
}
double Op::floatAttr(const std::string& name, double dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return double(*v);
  return dflt;
}
bool Op::boolAttr(const std::string& name, bool dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<bool>(&it->second)) return *v;
  return dflt;
}
std::string Op::stringAttr(const std::string& name) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return {};
}
std::vector<int64_t> Op::intListAttr(const std::string& name) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return {};
}
int64_t Op::arg(std::string_view role) const {
  const int i = schema::argIndex(kind, role);
  if (i < 0 || size_t(i) >= args.size() || args[size_t(i)].empty()) return -1;
  return args[size_t(i)][0];
}
const std::vector<int64_t>& Op::argList(std::string_view role) const {
  static const std::vector<int64_t> kEmpty;
  const int i = schema::argIndex(kind, role);
  if (i < 0 || size_t(i) >= args.size()) return kEmpty;
  return args[size_t(i)];
}

schema::ArgAccess Op::access(size_t role) const {
  const schema::ArgAccess a = schema::opSpec(kind).args[role].access;
  if (a == schema::ArgAccess::kReadWrite && attrs.count("accumulate") && !boolAttr("accumulate"))
    return schema::ArgAccess::kWrite;
  return a;
}

namespace planops {
namespace {

using planjson::Doc;
using planjson::index;
using planjson::json;
using planjson::key;
namespace sc = schema;

bool mulOv(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

std::string roleList(const sc::OpSpec& spec) {
  std::string s;
  for (size_t i = 0; i < spec.numArgs; ++i) {
    const sc::ArgSpec& a = spec.args[i];
    s += (i ? ", " : "") + std::string(a.role) +
         (a.arity == sc::ArgArity::kList           ? " (list)"
          : a.arity == sc::ArgArity::kOptionalList ? " (optional list)"
          : a.arity == sc::ArgArity::kOptional     ? " (optional)"
                                                   : "");
  }
  return s;
}

std::string attrList(const sc::OpSpec& spec) {
  std::string s;
  for (size_t i = 0; i < spec.numAttrs; ++i)
    s += (i ? ", " : "") + std::string(spec.attrs[i].name) + (spec.attrs[i].required ? "" : " (optional)");
  return s.empty() ? "none" : s;
}

Status parseId(const Doc& doc, const json& v, const std::string& path, const Program& prog,
               const sc::ArgSpec& spec, int64_t* id) {
  if (!v.is_number_integer()) return doc.error(path, "expected a buffer id (integer), got " + planjson::describe(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return doc.error(path, "buffer id " + v.dump() + " is out of range");
  *id = v.get<int64_t>();
  if (*id < 0 || *id >= int64_t(prog.buffers.size()))
    return doc.error(path, "buffer id " + std::to_string(*id) + " is out of range (the program has " +
                               std::to_string(prog.buffers.size()) + " buffers, ids 0.." +
                               std::to_string(int64_t(prog.buffers.size()) - 1) + ")");
  const BufferDesc& b = prog.buffers[size_t(*id)];
  // Float roles take f32 or bf16 (bf16 storage, fp32 arithmetic); ids and targets i32; `zero` anything.
  const bool ok = spec.type == sc::ArgType::kAny || (spec.type == sc::ArgType::kF32 && sc::isFloatType(b.dtype)) ||
                  (spec.type == sc::ArgType::kI32 && b.dtype == sc::ElemType::kI32);
  if (!ok)
    return doc.error(path, "buffer " + std::to_string(*id) + " (\"" + b.name + "\") is " +
                               std::string(sc::elemTypeName(b.dtype)) + " but role \"" + std::string(spec.role) +
                               "\" needs " + (spec.type == sc::ArgType::kI32 ? "i32" : "f32 or bf16"));
  return Status::ok();
}

Status parseArgs(const Doc& doc, const json& args, const std::string& path, const Program& prog,
                 const sc::OpSpec& spec, Op* out) {
  LLCDIST_RETURN_IF_ERROR(doc.object(args, path));
  for (auto it = args.begin(); it != args.end(); ++it)
    if (sc::argIndex(spec.kind, it.key()) < 0)
      return doc.error(key(path, it.key()), "unknown role for op \"" + std::string(spec.name) +
                                                "\" (expected: " + roleList(spec) + ")");
  out->args.assign(spec.numArgs, {});
  for (size_t i = 0; i < spec.numArgs; ++i) {
    const sc::ArgSpec& a = spec.args[i];
    const std::string role(a.role);
    const std::string p = key(path, role);
    if (!args.contains(role)) {
      if (sc::isOptionalArity(a.arity)) continue;
      return doc.error(p, "missing role \"" + role + "\" of op \"" + std::string(spec.name) + "\" (expected: " +
                              roleList(spec) + ")");
    }
    const json& v = args.at(role);
    if (sc::isListArity(a.arity)) {
      if (!v.is_array() || v.empty()) return doc.error(p, "expected a non-empty array of buffer ids, got " + planjson::describe(v));
      for (size_t k = 0; k < v.size(); ++k) {
        int64_t id = 0;
        LLCDIST_RETURN_IF_ERROR(parseId(doc, v[k], index(p, k), prog, a, &id));
        out->args[i].push_back(id);
      }
    } else {
      int64_t id = 0;
      LLCDIST_RETURN_IF_ERROR(parseId(doc, v, p, prog, a, &id));
      out->args[i].push_back(id);
    }
  }
  return Status::ok();
}

Status parseAttrs(const Doc& doc, const json& attrs, const std::string& path, const sc::OpSpec& spec, Op* out) {
  LLCDIST_RETURN_IF_ERROR(doc.object(attrs, path));
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    const bool known = std::any_of(spec.attrs, spec.attrs + spec.numAttrs,
                                   [&](const sc::AttrSpec& a) { return a.name == it.key(); });
    if (!known)
      return doc.error(key(path, it.key()), "unknown attribute for op \"" + std::string(spec.name) +
                                                "\" (expected: " + attrList(spec) + ")");
  }
  for (size_t i = 0; i < spec.numAttrs; ++i) {
    const sc::AttrSpec& a = spec.attrs[i];
    const std::string name(a.name);
    const std::string p = key(path, name);
    if (!attrs.contains(name)) {
      if (a.required) return doc.error(p, "missing attribute \"" + name + "\" of op \"" + std::string(spec.name) + "\"");
      continue;
    }
    switch (a.type) {
      case sc::AttrType::kInt:
      case sc::AttrType::kIndex: {  // >= 1, or >= 0 for an index (peer, tag)
        int64_t v = 0;
        LLCDIST_RETURN_IF_ERROR(doc.integer(attrs, path, name.c_str(), &v, a.type == sc::AttrType::kInt ? 1 : 0));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kFloat: {
        double v = 0;
        LLCDIST_RETURN_IF_ERROR(doc.number(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kBool: {
        bool v = false;
        LLCDIST_RETURN_IF_ERROR(doc.boolean(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kString: {
        std::string v;
        LLCDIST_RETURN_IF_ERROR(doc.string(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kIntList: {
        std::vector<int64_t> v;
        LLCDIST_RETURN_IF_ERROR(doc.intArray(attrs, path, name.c_str(), &v, 1));
        if (v.empty()) return doc.error(p, "expected a non-empty array");
        out->attrs[name] = v;
        break;
      }
    }
  }
  return Status::ok();
}

// Element-count and attribute-consistency checks, per op.
class Checker {
public:
  Checker(const Doc& doc, const std::string& path, const Program& prog, const Manifest& manifest, const Op& op)
      : doc_(doc), path_(path), prog_(prog), manifest_(manifest), op_(op) {}

  int64_t I(const char* n) const { return op_.intAttr(n); }

  // Every buffer of `role` (skipped when an optional role is absent) has `expected` elements.
  Status count(const char* role, int64_t expected, const std::string& formula) const {
    const std::vector<int64_t>& ids = op_.argList(role);
    for (size_t k = 0; k < ids.size(); ++k) {
      const BufferDesc& b = prog_.buffers[size_t(ids[k])];
      if (b.numel() != expected) {
        const bool list = sc::isListArity(sc::opSpec(op_.kind).args[size_t(sc::argIndex(op_.kind, role))].arity);
        const std::string p = key(key(path_, "args"), role) + (list ? "[" + std::to_string(k) + "]" : "");
        return doc_.error(p, "buffer " + std::to_string(ids[k]) + " (\"" + b.name + "\") has " +
                                 std::to_string(b.numel()) + " elements, expected " + formula + " = " +
                                 (expected < 0 ? std::string("(overflow)") : std::to_string(expected)) +
                                 " from the op's attrs");
      }
    }
    return Status::ok();
  }
  // Product of attrs (-1 on overflow, which then never matches a buffer).
  int64_t prod(std::initializer_list<int64_t> xs) const {
    int64_t r = 1;
    for (int64_t x : xs)
      if (mulOv(r, x, &r)) return -1;
    return r;
  }
  Status attrError(const char* attr, const std::string& msg) const {
    return doc_.error(key(key(path_, "attrs"), attr), msg);
  }
  // All listed roles have the element count of the first.
  Status sameCount(std::initializer_list<const char*> roles) const {
    const char* first = *roles.begin();
    const int64_t n = prog_.buffers[size_t(op_.arg(first))].numel();
    for (const char* r : roles) LLCDIST_RETURN_IF_ERROR(count(r, n, std::string("numel(") + first + ")"));
    return Status::ok();
  }

  // The whole side of all_gather / reduce_scatter / shard_slice: outer×n×inner elements, or with
  // attrs.total (ZeRO's padded blocks) outer×total, total at most n×inner.
  Status wholeSide(const char* role, int64_t n, int64_t outer, int64_t inner) const {
    const std::string nName = "n(" + op_.stringAttr("axis") + ")";
    if (!op_.attrs.count("total")) return count(role, prod({outer, n, inner}), "outer×" + nName + "×inner");
    const int64_t total = I("total"), padded = prod({n, inner});
    if (padded < 0 || total > padded)
      return attrError("total", "total " + std::to_string(total) + " exceeds " + nName + "×inner = " +
                                    std::to_string(n) + "×" + std::to_string(inner) +
                                    " (the padded blocks hold at most that many elements)");
    return count(role, prod({outer, total}), "outer×total");
  }

  // attrs.axis names a mesh axis; *n (when not null) gets its size from the manifest.
  Status axisSize(int64_t* n) const {
    const std::string axis = op_.stringAttr("axis");
    auto a = parseMeshAxis(axis);
    if (!a) return attrError("axis", "unknown mesh axis \"" + axis + "\" (expected \"dp\", \"tp\" or \"pp\")");
    if (n) *n = manifest_.mesh().axisSize(*a);
    return Status::ok();
  }

  // attrs.shard_axis, when present, names a mesh axis (any size: an axis of size 1 makes the op the
  // unsharded one). Vocabulary-parallel embedding / cross entropy, sequence-parallel position embedding.
  Status shardAxis() const {
    const std::string attr(sc::kShardAxisAttr);
    if (!op_.attrs.count(attr)) return Status::ok();
    const std::string axis = op_.stringAttr(attr);
    if (!parseMeshAxis(axis))
      return attrError(attr.c_str(), "unknown mesh axis \"" + axis + "\" (expected \"dp\", \"tp\" or \"pp\")");
    return Status::ok();
  }

  // attrs.real_vocab, when present (vocabulary padding): only with the feature, equal to
  // model.vocab_size, and within the op's global columns (V, times the shard_axis size).
  Status realVocab() const {
    const std::string attr(sc::kRealVocabAttr);
    if (!op_.attrs.count(attr)) return Status::ok();
    if (!manifest_.hasFeature(sc::kVocabPaddingFeature))
      return attrError(attr.c_str(), "needs the feature \"vocab_padding\" in manifest.json \"features\"");
    const int64_t real = op_.intAttr(attr);
    if (real != manifest_.vocabSize)
      return attrError(attr.c_str(), "expected model.vocab_size = " + std::to_string(manifest_.vocabSize) + ", got " +
                                         std::to_string(real));
    int64_t columns = I("V");
    if (op_.attrs.count(std::string(sc::kShardAxisAttr)))
      if (auto a = parseMeshAxis(op_.stringAttr(std::string(sc::kShardAxisAttr))))
        columns *= manifest_.mesh().axisSize(*a);
    if (real > columns)
      return attrError(attr.c_str(), "the real vocabulary " + std::to_string(real) + " exceeds the logits' " +
                                         std::to_string(columns) + " global columns");
    return Status::ok();
  }

  Status check() const;

private:
  const Doc& doc_;
  const std::string& path_;
  const Program& prog_;
  const Manifest& manifest_;
  const Op& op_;
};

Status Checker::check() const {
  using K = sc::OpKind;
  const int64_t M = I("M"), H = I("H"), V = I("V"), K_ = I("K"), N = I("N"), B = I("B"), S = I("S"), n = I("n");
  switch (op_.kind) {
    case K::kLoadMicrobatch:
      if (B != manifest_.microBatch) return attrError("B", "expected batch.micro_batch = " + std::to_string(manifest_.microBatch));
      if (S != manifest_.seqLen) return attrError("S", "expected batch.seq_len = " + std::to_string(manifest_.seqLen));
      LLCDIST_RETURN_IF_ERROR(count("ids", prod({B, S}), "B×S"));
      return count("targets", prod({B, S}), "B×S");
    case K::kZero:
      return Status::ok();
    case K::kEmbeddingFwd:
      LLCDIST_RETURN_IF_ERROR(shardAxis());
      LLCDIST_RETURN_IF_ERROR(count("ids", M, "M"));
      LLCDIST_RETURN_IF_ERROR(count("table", prod({V, H}), "V×H"));
      return count("out", prod({M, H}), "M×H");
    case K::kEmbeddingBwdWeight:
      LLCDIST_RETURN_IF_ERROR(shardAxis());
      LLCDIST_RETURN_IF_ERROR(count("ids", M, "M"));
      LLCDIST_RETURN_IF_ERROR(count("dout", prod({M, H}), "M×H"));
      return count("dtable", prod({V, H}), "V×H");
    case K::kPosEmbeddingFwd:
    case K::kPosEmbeddingBwdWeight: {
      const int64_t P = I("P");
      if (S > P) return attrError("S", "S = " + std::to_string(S) + " exceeds the position table size P = " + std::to_string(P));
      LLCDIST_RETURN_IF_ERROR(shardAxis());
      if (op_.attrs.count(std::string(sc::kShardAxisAttr))) {
        // Sequence-parallel: the last member holds positions [(n-1)·S, n·S), which must fit in P.
        const std::string axis = op_.stringAttr(std::string(sc::kShardAxisAttr));
        const int64_t n = manifest_.mesh().axisSize(*parseMeshAxis(axis));
        const int64_t global = prod({S, n});
        if (global < 0 || global > P)
          return attrError("S", "S = " + std::to_string(S) + " positions on each of the " + std::to_string(n) +
                                    " members of shard_axis \"" + axis + "\" need S·n = " +
                                    (global < 0 ? std::string("(overflow)") : std::to_string(global)) +
                                    " positions, more than the position table size P = " + std::to_string(P));
      }
      const bool fwd = op_.kind == K::kPosEmbeddingFwd;
      LLCDIST_RETURN_IF_ERROR(count(fwd ? "x" : "dy", prod({B, S, H}), "B×S×H"));
      if (fwd) LLCDIST_RETURN_IF_ERROR(count("y", prod({B, S, H}), "B×S×H"));
      return count(fwd ? "wpe" : "dwpe", prod({P, H}), "P×H");
    }
    case K::kLayerNormFwd:
    case K::kLayerNormBwdInput:
    case K::kLayerNormBwdWeight:
    case K::kRmsNormFwd:
    case K::kRmsNormBwdInput:
    case K::kRmsNormBwdWeight:
      for (const char* r : {"x", "y", "dy", "dx"}) LLCDIST_RETURN_IF_ERROR(count(r, prod({M, H}), "M×H"));
      for (const char* r : {"mean", "rstd"}) LLCDIST_RETURN_IF_ERROR(count(r, M, "M"));
      for (const char* r : {"gamma", "beta", "weight", "dgamma", "dbeta", "dweight"})
        LLCDIST_RETURN_IF_ERROR(count(r, H, "H"));
      return Status::ok();
    case K::kLinearFwd:
    case K::kLinearBwdInput:
    case K::kLinearBwdWeight: {
      const std::string layout = op_.stringAttr("layout");
      if (layout != "out_in" && layout != "in_out")
        return attrError("layout", "expected \"out_in\" (W is [N,K]) or \"in_out\" (W is [K,N]), got \"" + layout + "\"");
      LLCDIST_RETURN_IF_ERROR(count("x", prod({M, K_}), "M×K"));
      LLCDIST_RETURN_IF_ERROR(count("dx", prod({M, K_}), "M×K"));
      LLCDIST_RETURN_IF_ERROR(count("w", prod({K_, N}), "K×N"));
      LLCDIST_RETURN_IF_ERROR(count("dw", prod({K_, N}), "K×N"));
      LLCDIST_RETURN_IF_ERROR(count("bias", N, "N"));
      LLCDIST_RETURN_IF_ERROR(count("y", prod({M, N}), "M×N"));
      return count("dy", prod({M, N}), "M×N");
    }
    case K::kLinearBwdBias:
      LLCDIST_RETURN_IF_ERROR(count("dy", prod({M, N}), "M×N"));
      return count("db", N, "N");
    case K::kBiasAdd:
      LLCDIST_RETURN_IF_ERROR(count("y", prod({M, N}), "M×N"));
      return count("bias", N, "N");
    case K::kSplitFwd:
    case K::kSplitBwd: {
      const std::vector<int64_t> sizes = op_.intListAttr("sizes");
      const int64_t rows = I("rows");
      const bool fwd = op_.kind == K::kSplitFwd;
      const std::vector<int64_t>& parts = op_.argList(fwd ? "outs" : "douts");
      if (parts.size() != sizes.size())
        return attrError("sizes", "has " + std::to_string(sizes.size()) + " entries but args." +
                                      (fwd ? "outs" : "douts") + " has " + std::to_string(parts.size()) + " buffers");
      int64_t total = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        if (__builtin_add_overflow(total, sizes[k], &total)) return attrError("sizes", "sum overflows");
        const BufferDesc& b = prog_.buffers[size_t(parts[k])];
        if (b.numel() != prod({rows, sizes[k]}))
          return doc_.error(index(key(key(path_, "args"), fwd ? "outs" : "douts"), k),
                            "buffer " + std::to_string(parts[k]) + " (\"" + b.name + "\") has " + std::to_string(b.numel()) +
                                " elements, expected rows×sizes[" + std::to_string(k) + "] = " +
                                std::to_string(prod({rows, sizes[k]})));
      }
      return count(fwd ? "x" : "dx", prod({rows, total}), "rows×Σsizes");
    }
    case K::kRopeFwd:
    case K::kRopeBwd: {
      const int64_t hd = I("hd");
      if (hd % 2 != 0) return attrError("hd", "the head dimension must be even, got " + std::to_string(hd));
      const bool llama3 = op_.boolAttr("llama3");
      for (const char* a : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
        const bool has = op_.attrs.count(a) != 0;
        if (llama3 && !has) return attrError(a, "required when llama3 is true");
        if (!llama3 && has) return attrError(a, "only allowed when llama3 is true");
      }
      const int64_t e = prod({B, S, n, hd});
      for (const char* r : {"x", "y", "dy", "dx"}) LLCDIST_RETURN_IF_ERROR(count(r, e, "B×S×n×hd"));
      return Status::ok();
    }
    case K::kAttentionFwd:
    case K::kAttentionBwd: {
      const int64_t nh = I("nh"), nkv = I("nkv"), hd = I("hd");
      if (nh % nkv != 0) return attrError("nkv", "nh = " + std::to_string(nh) + " is not a multiple of nkv = " + std::to_string(nkv));
      for (const char* r : {"q", "out", "dout", "dq"}) LLCDIST_RETURN_IF_ERROR(count(r, prod({B, S, nh, hd}), "B×S×nh×hd"));
      for (const char* r : {"k", "v", "dk", "dv"}) LLCDIST_RETURN_IF_ERROR(count(r, prod({B, S, nkv, hd}), "B×S×nkv×hd"));
      return count("lse", prod({B, nh, S}), "B×nh×S");
    }
    case K::kGeluTanhFwd:
    case K::kGeluTanhBwd:
    case K::kSwigluFwd:
    case K::kSwigluBwd:
    case K::kAdd:
    case K::kAccumulate:
    case K::kCopy:
    case K::kCast:
      for (size_t i = 0; i < sc::opSpec(op_.kind).numArgs; ++i)
        LLCDIST_RETURN_IF_ERROR(count(std::string(sc::opSpec(op_.kind).args[i].role).c_str(), n, "n"));
      return Status::ok();
    case K::kCrossEntropyFwd:
    case K::kCrossEntropyBwd:
      LLCDIST_RETURN_IF_ERROR(shardAxis());
      LLCDIST_RETURN_IF_ERROR(realVocab());
      LLCDIST_RETURN_IF_ERROR(count("logits", prod({M, V}), "M×V"));
      LLCDIST_RETURN_IF_ERROR(count("dlogits", prod({M, V}), "M×V"));
      LLCDIST_RETURN_IF_ERROR(count("targets", M, "M"));
      return count("loss", 1, "1");
    case K::kGradNorm: {
      const bool replicaShards = !op_.argList("replica_shards").empty();
      const bool hasReplicas = op_.attrs.count("replicas") != 0;
      if (replicaShards != hasReplicas)
        return replicaShards ? attrError("replicas", "required when args.replica_shards is present (how many "
                                                     "consecutive members of `axis` hold each shard)")
                             : attrError("replicas", "only allowed together with args.replica_shards");
      const bool sharded = !op_.argList("sharded").empty() || replicaShards;
      const bool hasAxis = op_.attrs.count("axis") != 0;
      const std::string stageAttr(sc::kStageAxisAttr);
      const bool hasStage = op_.attrs.count(stageAttr) != 0;
      if (sharded && !hasAxis)
        return attrError("axis", "required when args.sharded is present (the axis the sharded gradients' squared "
                                 "norms are all-reduced over)");
      if (!sharded && hasAxis) return attrError("axis", "only allowed together with args.sharded");
      if (hasAxis) {
        int64_t n = 0;
        LLCDIST_RETURN_IF_ERROR(axisSize(&n));
        if (hasReplicas && n % I("replicas") != 0)
          return attrError("replicas", std::to_string(I("replicas")) + " does not divide the size " +
                                           std::to_string(n) + " of axis \"" + op_.stringAttr("axis") + "\"");
      }
      if (hasStage && !parseMeshAxisList(op_.stringAttr(stageAttr)))  // one axis or a list ("dp,pp")
        return attrError(stageAttr.c_str(), "unknown mesh axis \"" + op_.stringAttr(stageAttr) +
                                                "\" (expected \"dp\", \"tp\" or \"pp\", or a comma-separated list of them)");
      if (op_.argList("grads").empty() && !sharded && !hasStage)
        return doc_.error(key(key(path_, "args"), "grads"),
                          "missing role \"grads\" of op \"grad_norm\" (it may be absent only with args.sharded or "
                          "attrs.stage_axis)");
      return count("norm", 1, "1");
    }
    case K::kSend:
    case K::kRecv: {
      int64_t n = 0;
      LLCDIST_RETURN_IF_ERROR(axisSize(&n));
      const int64_t peer = I("peer");
      if (peer >= n)
        return attrError("peer", "peer " + std::to_string(peer) + " is out of range: axis \"" + op_.stringAttr("axis") +
                                     "\" has size " + std::to_string(n) + " (coordinates 0.." + std::to_string(n - 1) + ")");
      return Status::ok();
    }
    case K::kAllReduce: {
      int64_t n = 0;
      LLCDIST_RETURN_IF_ERROR(axisSize(&n));
      if (op_.attrs.count("group_size") && n % I("group_size") != 0)
        return attrError("group_size", "sub-groups of " + std::to_string(I("group_size")) +
                                           " members do not divide axis \"" + op_.stringAttr("axis") +
                                           "\" of size " + std::to_string(n));
      const std::string rop = op_.stringAttr("op");
      if (std::find(sc::kReduceOpNames.begin(), sc::kReduceOpNames.end(), rop) == sc::kReduceOpNames.end())
        return attrError("op", "unknown reduction \"" + rop + "\" (expected \"sum\", \"avg\" or \"max\")");
      return Status::ok();
    }
    case K::kAllGather:
    case K::kReduceScatter: {
      int64_t n = 0;
      LLCDIST_RETURN_IF_ERROR(axisSize(&n));
      const int64_t outer = I("outer"), inner = I("inner");
      const bool gather = op_.kind == K::kAllGather;
      if (!gather && op_.stringAttr("op") != "sum")
        return attrError("op", "reduce_scatter supports only \"sum\" in this version, got \"" +
                                   op_.stringAttr("op") + "\"");
      LLCDIST_RETURN_IF_ERROR(count(gather ? "x" : "y", prod({outer, inner}), "outer×inner"));
      return wholeSide(gather ? "y" : "x", n, outer, inner);
    }
    case K::kShardSlice: {
      // ZeRO: this rank's block out of a replicated buffer; x [outer, n·inner], y [outer, inner].
      int64_t n = 0;
      LLCDIST_RETURN_IF_ERROR(axisSize(&n));
      const int64_t outer = I("outer"), inner = I("inner");
      LLCDIST_RETURN_IF_ERROR(count("y", prod({outer, inner}), "outer×inner"));
      return wholeSide("x", n, outer, inner);
    }
    case K::kAdamW:
    case K::kSgd: {
      const bool adam = op_.kind == K::kAdamW;
      if (adam != (manifest_.optimizer.kind == OptimizerDesc::Kind::kAdamW))
        return doc_.error(key(path_, "op"), "op \"" + std::string(sc::opName(op_.kind)) +
                                                "\" does not match the manifest's optimizer.kind");
      if (!adam && op_.floatAttr("momentum") != 0.0 && op_.arg("momentum_buf") < 0)
        return doc_.error(key(key(path_, "args"), "momentum_buf"), "required when attrs.momentum != 0");
      if (adam) return sameCount({"param", "grad", "m", "v"});
      LLCDIST_RETURN_IF_ERROR(sameCount({"param", "grad"}));
      return count("momentum_buf", prog_.buffers[size_t(op_.arg("param"))].numel(), "numel(param)");
    }
  }
  return Status::ok();
}

bool aliasAllowed(const sc::ArgSpec& written, std::string_view other) {
  std::string_view list = written.mayAlias;
  while (!list.empty()) {
    const size_t bar = list.find('|');
    if (list.substr(0, bar) == other) return true;
    if (bar == std::string_view::npos) break;
    list.remove_prefix(bar + 1);
  }
  return false;
}

// Two arguments may overlap only if neither is written, or they are the exact same range and the
// schema allows that alias.
Status checkAliasing(const Doc& doc, const std::string& path, const Program& prog, const Op& op) {
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  struct Use {
    size_t role;
    size_t k;
    int64_t id;
  };
  std::vector<Use> uses;
  for (size_t i = 0; i < spec.numArgs; ++i)
    for (size_t k = 0; k < op.args[i].size(); ++k) uses.push_back({i, k, op.args[i][k]});
  auto where = [&](const Use& u) {
    const sc::ArgSpec& a = spec.args[u.role];
    return key(key(path, "args"), std::string(a.role)) +
           (sc::isListArity(a.arity) ? "[" + std::to_string(u.k) + "]" : "");
  };
  // Only pairs whose bytes overlap can break the rule: sweep the uses in
  // offset order (an op's list args grow with the layers, e.g. grad_norm
  // over every gradient, so all pairs would be quadratic). The error names
  // the first offending pair in argument order, as a pairwise scan would.
  std::vector<size_t> byOffset;
  for (size_t u = 0; u < uses.size(); ++u)
    if (prog.buffers[size_t(uses[u].id)].bytes > 0) byOffset.push_back(u);
  std::sort(byOffset.begin(), byOffset.end(), [&](size_t a, size_t b) {
    return prog.buffers[size_t(uses[a].id)].offset < prog.buffers[size_t(uses[b].id)].offset;
  });
  std::optional<std::pair<size_t, size_t>> bad;
  std::vector<size_t> open;  // uses whose bytes reach past the current offset
  for (size_t u : byOffset) {
    const BufferDesc& bu = prog.buffers[size_t(uses[u].id)];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](size_t o) {
                                const BufferDesc& bo = prog.buffers[size_t(uses[o].id)];
                                return bo.offset + bo.bytes <= bu.offset;
                              }),
               open.end());
    for (size_t o : open) {
      size_t x = std::min(o, u), y = std::max(o, u);
      const sc::ArgSpec& ax = spec.args[uses[x].role];
      const sc::ArgSpec& ay = spec.args[uses[y].role];
      if (ax.access == sc::ArgAccess::kRead && ay.access == sc::ArgAccess::kRead) continue;
      const BufferDesc& bx = prog.buffers[size_t(uses[x].id)];
      const BufferDesc& by = prog.buffers[size_t(uses[y].id)];
      const bool exact = bx.offset == by.offset && bx.bytes == by.bytes;
      if (exact && ((ax.access != sc::ArgAccess::kRead && aliasAllowed(ax, ay.role)) ||
                    (ay.access != sc::ArgAccess::kRead && aliasAllowed(ay, ax.role))))
        continue;
      if (!bad || std::make_pair(x, y) < *bad) bad = std::make_pair(x, y);
    }
    open.push_back(u);
  }
  if (bad) {
    const Use &ux = uses[bad->first], &uy = uses[bad->second];
    const BufferDesc& bx = prog.buffers[size_t(ux.id)];
    const BufferDesc& by = prog.buffers[size_t(uy.id)];
    return doc.error(where(uy), "buffer " + std::to_string(uy.id) + " (\"" + by.name + "\") overlaps " + where(ux) +
                                    " (buffer " + std::to_string(ux.id) + ", \"" + bx.name +
                                    "\") in the arena, and op \"" + std::string(spec.name) +
                                    "\" does not allow that alias");
  }
  return Status::ok();
}

}  // namespace

Status parseOp(const Doc& doc, const json& j, const std::string& path, const Program& prog, const Manifest& manifest,
               Op* out) {
  LLCDIST_RETURN_IF_ERROR(doc.keys(j, path, {"op", "args"}, {"attrs", "loc"}));
  std::string name;
  LLCDIST_RETURN_IF_ERROR(doc.string(j, path, "op", &name));
  auto kind = sc::parseOpKind(name);
  if (!kind) return doc.error(key(path, "op"), "unknown op \"" + name + "\" (the ops of version 1 are listed in docs/plan-format.md)");
  out->kind = *kind;
  const sc::OpSpec& spec = sc::opSpec(*kind);
  if (j.contains("loc")) LLCDIST_RETURN_IF_ERROR(doc.string(j, path, "loc", &out->loc));
  LLCDIST_RETURN_IF_ERROR(parseArgs(doc, j.at("args"), key(path, "args"), prog, spec, out));
  static const json kEmpty = json::object();
  LLCDIST_RETURN_IF_ERROR(parseAttrs(doc, j.contains("attrs") ? j.at("attrs") : kEmpty, key(path, "attrs"), spec, out));
  LLCDIST_RETURN_IF_ERROR(Checker(doc, path, prog, manifest, *out).check());
  return checkAliasing(doc, path, prog, *out);
}

}  // namespace planops
}  // namespace llcdist::rt
