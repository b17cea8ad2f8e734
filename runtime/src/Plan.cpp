// Plan directory loading: manifest.json and program-N.json into structs, validated. See Plan.h and
// docs/plan-format.md; ops are checked in PlanOps.cpp, their element counts by their families'
// checkers (src/ops/).
#include "llcdist/runtime/Plan.h"

#include "PlanJson.h"
#include "PlanOps.h"
#include "ops/OpDefs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace llcdist::rt {
namespace {

namespace fs = std::filesystem;
using planjson::Doc;
using planjson::index;
using planjson::json;
using planjson::key;
namespace sc = schema;

std::string supportedVersions() {
  std::string s;
  for (int64_t v = sc::kMinSupportedVersion; v <= sc::kPlanVersion; ++v)
    s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

// "format" and "version" first, so a newer plan gets a version error rather than field errors.
Status checkHeader(const Doc& doc, const json& root, std::string_view format, int64_t* version) {
  if (!root.contains("format")) return doc.error("format", "missing required field (expected \"" + std::string(format) + "\")");
  std::string f;
  LLCDIST_RETURN_IF_ERROR(doc.string(root, "", "format", &f));
  if (f != format)
    return doc.error("format", "expected \"" + std::string(format) + "\", got \"" + f + "\"" +
                                   (f == sc::kPlanFormat || f == sc::kProgramFormat ? " (wrong file?)" : ""));
  if (!root.contains("version")) return doc.error("version", "missing required field");
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "version", version));
  if (*version < sc::kMinSupportedVersion || *version > sc::kPlanVersion)
    return doc.error("version", "unsupported version " + std::to_string(*version) +
                                    " (this runtime supports version " + supportedVersions() +
                                    "; recompile the plan with a matching llc-dist)");
  return Status::ok();
}

Status readShape(const Doc& doc, const json& o, const std::string& path, std::vector<int64_t>* shape) {
  return doc.intArray(o, path, "shape", shape, 1);
}

bool mulOverflow(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

Status numelOf(const Doc& doc, const std::string& path, const std::vector<int64_t>& shape, int64_t* n) {
  *n = 1;
  for (int64_t d : shape)
    if (mulOverflow(*n, d, n)) return doc.error(key(path, "shape"), "element count overflows int64");
  return Status::ok();
}

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

// params[i].sharding (the mesh is already parsed): axis, dim, blocks, replicas; replicas must divide n
// and dim d of the shape must be divisible by blocks·(n / replicas). Sets out->localShape.
Status parseSharding(const Doc& doc, const json& s, const std::string& path, const Manifest& m, ParamDesc* out) {
  LLCDIST_RETURN_IF_ERROR(doc.keys(s, path, {"axis", "dim"}, {"blocks", "replicas"}));
  std::string axis;
  LLCDIST_RETURN_IF_ERROR(doc.string(s, path, "axis", &axis));
  auto a = parseMeshAxis(axis);
  if (!a) return doc.error(key(path, "axis"), "unknown axis \"" + axis + "\" (expected " + listNames(sc::kMeshAxes) + ")");
  ParamSharding sh;
  sh.axis = *a;
  const int64_t rank = int64_t(out->shape.size());
  if (rank == 0) return doc.error(key(path, "dim"), "a scalar parameter cannot be sharded");
  LLCDIST_RETURN_IF_ERROR(doc.integer(s, path, "dim", &sh.dim, 0, rank - 1));
  if (s.contains("blocks")) LLCDIST_RETURN_IF_ERROR(doc.integer(s, path, "blocks", &sh.blocks, 1));
  const int64_t axisN = m.mesh().axisSize(sh.axis);
  if (s.contains("replicas")) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(s, path, "replicas", &sh.replicas, 1));
    if (axisN % sh.replicas != 0)
      return doc.error(key(path, "replicas"), std::to_string(sh.replicas) + " replicas per shard do not divide axis " +
                                                  axis + " of size " + std::to_string(axisN));
  }
  const int64_t n = axisN / sh.replicas;  // distinct shards
  const int64_t d = out->shape[size_t(sh.dim)];
  int64_t unit = 0;
  if (mulOverflow(sh.blocks, n, &unit) || d % unit != 0)
    return doc.error(path, "dimension " + std::to_string(sh.dim) + " of \"" + out->name + "\" has size " +
                               std::to_string(d) + ", not divisible by blocks × " + axis +
                               (sh.replicas > 1 ? " / replicas" : "") + " = " + std::to_string(sh.blocks) + " × " +
                               std::to_string(n));
  out->sharding = sh;
  out->localShape[size_t(sh.dim)] = d / n;
  return Status::ok();
}

std::string shapeString(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + "]";
}

// params[i].zero (feature "zero"; the mesh and the param's `sharding` are already parsed): axis and
// stage; the local shape's first dimension splits evenly over the axis, or else `block_rows` must say
// ceil(rows / n) (padded blocks). Sets out->zero and out->blockShape.
Status parseZero(const Doc& doc, const json& z, const std::string& path, const Manifest& m, ParamDesc* out) {
  if (!m.hasFeature(sc::kZeroFeature))
    return doc.error(path, "a param with \"zero\" needs the feature \"zero\" in \"features\" (ZeRO plans)");
  LLCDIST_RETURN_IF_ERROR(doc.keys(z, path, {"axis", "stage"}, {"value_block", "block_rows"}));
  std::string axis;
  LLCDIST_RETURN_IF_ERROR(doc.string(z, path, "axis", &axis));
  auto a = parseMeshAxis(axis);
  if (!a) return doc.error(key(path, "axis"), "unknown axis \"" + axis + "\" (expected " + listNames(sc::kMeshAxes) + ")");
  if (out->sharding && out->sharding->axis == *a)
    return doc.error(key(path, "axis"), "\"" + out->name + "\" is sharded over " + axis +
                                            " already (params[].sharding); its ZeRO blocks need another axis");
  ParamZero zero;
  zero.axis = *a;
  LLCDIST_RETURN_IF_ERROR(doc.integer(z, path, "stage", &zero.stage, sc::kMinZeroStage, sc::kMaxZeroStage));
  if (z.contains("value_block"))
    LLCDIST_RETURN_IF_ERROR(doc.boolean(z, path, "value_block", &zero.valueBlock));
  if (out->localShape.empty()) return doc.error(path, "a scalar parameter cannot be split by ZeRO");
  const int64_t n = m.mesh().axisSize(zero.axis);
  const int64_t rows = out->localShape[0];
  const int64_t padded = (rows + n - 1) / n;  // the only block size: ceil(rows / n), as FSDP2 pads
  const std::string what = "dimension 0 of " + std::string(out->sharding ? "the local shard " : "") + "\"" +
                           out->name + "\" (shape " + shapeString(out->localShape) + ") has size " +
                           std::to_string(rows);
  if (z.contains("block_rows")) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(z, path, "block_rows", &zero.blockRows, 1));
    if (rows % n == 0)
      return doc.error(key(path, "block_rows"), what + ", divisible by " + axis + " = " + std::to_string(n) +
                                                    ": its blocks need no padding (remove \"block_rows\")");
    if (zero.blockRows != padded)
      return doc.error(key(path, "block_rows"), "is " + std::to_string(zero.blockRows) + " but " + what + " over " +
                                                    axis + " = " + std::to_string(n) + " pads to blocks of ceil(" +
                                                    std::to_string(rows) + " / " + std::to_string(n) + ") = " +
                                                    std::to_string(padded) + " rows");
  } else if (rows % n != 0) {
    return doc.error(path, what + ", not divisible by " + axis + " = " + std::to_string(n) +
                               " (ZeRO splits it into equal row blocks; padded blocks of ceil(" + std::to_string(rows) +
                               " / " + std::to_string(n) + ") = " + std::to_string(padded) +
                               " rows need \"block_rows\": " + std::to_string(padded) + ")");
  }
  out->zero = zero;
  out->blockShape[0] = padded;
  return Status::ok();
}

// params[i].placements: a non-empty array of {"program", "buffer", "grad"} with distinct programs. The
// program indices are range-checked once the programs are parsed (checkPlacements), the buffer ids
// against each program by validateParams.
Status parsePlacements(const Doc& doc, const json& v, const std::string& path, ParamDesc* out) {
  if (!v.is_array() || v.empty())
    return doc.error(path, "expected a non-empty array of {\"program\", \"buffer\", \"grad\"}, got " + planjson::describe(v));
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string pk = index(path, k);
    LLCDIST_RETURN_IF_ERROR(doc.keys(v[k], pk, {"program", "buffer", "grad"}));
    ParamDesc::Placement pl;
    LLCDIST_RETURN_IF_ERROR(doc.integer(v[k], pk, "program", &pl.program, 0));
    LLCDIST_RETURN_IF_ERROR(doc.integer(v[k], pk, "buffer", &pl.buffer, 0));
    LLCDIST_RETURN_IF_ERROR(doc.integer(v[k], pk, "grad", &pl.grad, 0));
    for (size_t j = 0; j < out->placements.size(); ++j)
      if (out->placements[j].program == pl.program)
        return doc.error(key(pk, "program"), "program " + std::to_string(pl.program) + " already has a copy of \"" +
                                                 out->name + "\" (placements[" + std::to_string(j) +
                                                 "]); a param has at most one placement per program");
    out->placements.push_back(pl);
  }
  return Status::ok();
}

Status parseParam(const Doc& doc, const json& p, const std::string& path, const Manifest& m, ParamDesc* out) {
  LLCDIST_RETURN_IF_ERROR(doc.keys(p, path, {"name", "shape", "dtype", "init", "weight_decay"},
                                   {"buffer", "grad", "placements", "sharding", "zero", "vocab_padded"}));
  LLCDIST_RETURN_IF_ERROR(doc.string(p, path, "name", &out->name));
  if (out->name.empty()) return doc.error(key(path, "name"), "empty parameter name");
  LLCDIST_RETURN_IF_ERROR(readShape(doc, p, path, &out->shape));
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(numelOf(doc, path, out->shape, &n));
  out->fileShape = out->shape;
  if (p.contains("vocab_padded")) {
    const std::string vp = key(path, "vocab_padded");
    if (!m.hasFeature(sc::kVocabPaddingFeature))
      return doc.error(vp, "needs the feature \"vocab_padding\" in \"features\" (vocabulary padding)");
    LLCDIST_RETURN_IF_ERROR(doc.boolean(p, path, "vocab_padded", &out->vocabPadded));
    if (out->vocabPadded) {
      if (out->shape.empty() || out->shape[0] != m.paddedVocabSize)
        return doc.error(vp, "\"" + out->name + "\" has shape " + shapeString(out->shape) +
                                 "; a vocab-padded param has model.padded_vocab_size = " +
                                 std::to_string(m.paddedVocabSize) + " rows (dimension 0)");
      out->fileShape[0] = m.vocabSize;  // the Hugging Face tensor: the real rows only
    }
  }
  std::string dtype;
  LLCDIST_RETURN_IF_ERROR(doc.string(p, path, "dtype", &dtype));
  if (!oneOf(dtype, sc::kParamDTypeNames))
    return doc.error(key(path, "dtype"), "unsupported parameter dtype \"" + dtype + "\" (expected " +
                                             listNames(sc::kParamDTypeNames) + ")");
  out->dtype = *sc::parseElemType(dtype);
  // Either "placements" or the single-program spelling "buffer" + "grad"; not both, not neither.
  const bool hasBuffer = p.contains("buffer"), hasGrad = p.contains("grad");
  if (p.contains("placements")) {
    if (hasBuffer || hasGrad)
      return doc.error(key(path, hasBuffer ? "buffer" : "grad"),
                       "a param has either \"placements\" or \"buffer\" + \"grad\", not both");
    LLCDIST_RETURN_IF_ERROR(parsePlacements(doc, p.at("placements"), key(path, "placements"), out));
  } else {
    if (!hasBuffer && !hasGrad)
      return doc.error(key(path, "placements"), "missing: a param needs \"placements\" (or, in a plan with one "
                                                "program, \"buffer\" and \"grad\")");
    if (!hasBuffer || !hasGrad) return doc.error(key(path, hasBuffer ? "grad" : "buffer"), "missing required field");
    ParamDesc::Placement pl;
    LLCDIST_RETURN_IF_ERROR(doc.integer(p, path, "buffer", &pl.buffer, 0));
    LLCDIST_RETURN_IF_ERROR(doc.integer(p, path, "grad", &pl.grad, 0));
    out->placements.push_back(pl);
    out->legacyBufferGrad = true;
  }
  out->buffer = out->placements[0].buffer;
  out->grad = out->placements[0].grad;
  LLCDIST_RETURN_IF_ERROR(doc.boolean(p, path, "weight_decay", &out->weightDecay));
  out->localShape = out->shape;
  if (p.contains("sharding")) LLCDIST_RETURN_IF_ERROR(parseSharding(doc, p.at("sharding"), key(path, "sharding"), m, out));
  out->blockShape = out->localShape;
  if (p.contains("zero")) LLCDIST_RETURN_IF_ERROR(parseZero(doc, p.at("zero"), key(path, "zero"), m, out));
  const json& init = p.at("init");
  const std::string ip = key(path, "init");
  LLCDIST_RETURN_IF_ERROR(doc.object(init, ip));
  if (!init.contains("kind")) return doc.error(key(ip, "kind"), "missing required field");
  std::string kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(init, ip, "kind", &kind));
  if (kind == "normal") {
    LLCDIST_RETURN_IF_ERROR(doc.keys(init, ip, {"kind", "std"}));
    out->init.kind = ParamInit::Kind::kNormal;
    LLCDIST_RETURN_IF_ERROR(doc.number(init, ip, "std", &out->init.std));
    if (out->init.std < 0) return doc.error(key(ip, "std"), "must be >= 0");
  } else if (kind == "zeros" || kind == "ones") {
    LLCDIST_RETURN_IF_ERROR(doc.keys(init, ip, {"kind"}));
    out->init.kind = kind == "zeros" ? ParamInit::Kind::kZeros : ParamInit::Kind::kOnes;
  } else {
    return doc.error(key(ip, "kind"), "unknown init kind \"" + kind + "\" (expected " + listNames(sc::kInitKinds) + ")");
  }
  return Status::ok();
}

// mesh.rank_order: a permutation of the three axis names, fastest-varying first.
Status parseRankOrder(const Doc& doc, const json& v, std::array<MeshAxis, 3>* out) {
  const std::string path = "mesh.rank_order";
  const std::string expect = "a permutation of " + listNames(sc::kMeshAxes) + " (fastest-varying axis first)";
  if (!v.is_array() || v.size() != 3) return doc.error(path, "expected " + expect + ", got " + planjson::describe(v));
  bool seen[3] = {false, false, false};
  for (size_t i = 0; i < 3; ++i) {
    if (!v[i].is_string()) return doc.error(index(path, i), "expected an axis name (" + listNames(sc::kMeshAxes) + "), got " + planjson::describe(v[i]));
    auto a = parseMeshAxis(v[i].get<std::string>());
    if (!a) return doc.error(index(path, i), "unknown axis \"" + v[i].get<std::string>() + "\" (expected " + listNames(sc::kMeshAxes) + ")");
    if (seen[size_t(*a)]) return doc.error(index(path, i), "axis \"" + v[i].get<std::string>() + "\" appears twice; expected " + expect);
    seen[size_t(*a)] = true;
    (*out)[i] = *a;
  }
  return Status::ok();
}

Status parseOptimizer(const Doc& doc, const json& o, OptimizerDesc* out) {
  const std::string path = "optimizer";
  LLCDIST_RETURN_IF_ERROR(doc.object(o, path));
  if (!o.contains("kind")) return doc.error("optimizer.kind", "missing required field");
  std::string kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(o, path, "kind", &kind));
  if (kind == "adamw") {
    out->kind = OptimizerDesc::Kind::kAdamW;
    LLCDIST_RETURN_IF_ERROR(doc.keys(o, path, {"kind", "beta1", "beta2", "eps", "weight_decay"}));
    LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "beta1", &out->beta1));
    LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "beta2", &out->beta2));
    LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "eps", &out->eps));
  } else if (kind == "sgd") {
    out->kind = OptimizerDesc::Kind::kSgd;
    LLCDIST_RETURN_IF_ERROR(doc.keys(o, path, {"kind", "momentum", "weight_decay"}));
    LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "momentum", &out->momentum));
  } else {
    return doc.error("optimizer.kind", "unknown optimizer \"" + kind + "\" (expected " + listNames(sc::kOptimizerKinds) + ")");
  }
  return doc.number(o, path, "weight_decay", &out->weightDecay);
}

Status parseLrSchedule(const Doc& doc, const json& o, LrSchedule* out) {
  const std::string path = "lr_schedule";
  LLCDIST_RETURN_IF_ERROR(doc.object(o, path));
  if (!o.contains("kind")) return doc.error("lr_schedule.kind", "missing required field");
  std::string kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(o, path, "kind", &kind));
  if (kind == "cosine") {
    out->kind = LrSchedule::Kind::kWarmupCosine;
    LLCDIST_RETURN_IF_ERROR(doc.keys(o, path, {"kind", "max_lr", "min_lr", "warmup_steps", "total_steps"}));
  } else if (kind == "constant") {
    out->kind = LrSchedule::Kind::kConstant;
    LLCDIST_RETURN_IF_ERROR(doc.keys(o, path, {"kind", "max_lr"}, {"min_lr", "warmup_steps", "total_steps"}));
  } else {
    return doc.error("lr_schedule.kind", "unknown schedule \"" + kind + "\" (expected " + listNames(sc::kLrScheduleKinds) + ")");
  }
  LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "max_lr", &out->maxLr));
  out->minLr = 0.0;
  out->warmupSteps = out->totalSteps = 0;
  if (o.contains("min_lr")) LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "min_lr", &out->minLr));
  if (o.contains("warmup_steps")) LLCDIST_RETURN_IF_ERROR(doc.integer(o, path, "warmup_steps", &out->warmupSteps, 0));
  if (o.contains("total_steps")) LLCDIST_RETURN_IF_ERROR(doc.integer(o, path, "total_steps", &out->totalSteps, 0));
  if (out->kind == LrSchedule::Kind::kWarmupCosine && out->totalSteps != 0 && out->totalSteps <= out->warmupSteps)
    return doc.error("lr_schedule.total_steps", "must be greater than warmup_steps (" +
                                                    std::to_string(out->warmupSteps) + ") or 0 for \"the run's --steps\"");
  return Status::ok();
}

// A file the manifest names (programs[i].file): a relative path that stays inside the plan directory
// and names a file. The OS cuts a name at a NUL byte (JSON's "\u0000"), so "program-0.json\u0000x"
// would silently read program-0.json: refused, like an empty or absolute name or a ".." component.
Status checkFileInPlanDir(const Doc& doc, const std::string& path, const std::string& name,
                          const std::string& example) {
  const std::string quoted = json(name).dump(-1, ' ', false, json::error_handler_t::replace);
  auto refuse = [&](const std::string& why) {
    return doc.error(path, "must be a relative path inside the plan directory, got " + quoted + ", which " + why +
                               " (name the file as llc-dist compile does, e.g. \"" + example +
                               "\", or recompile the plan)");
  };
  if (name.empty()) return refuse("is empty");
  if (const size_t nul = name.find('\0'); nul != std::string::npos)
    return refuse("contains a NUL character at byte " + std::to_string(nul) +
                  " (the operating system would cut the name there and read \"" + name.substr(0, nul) + "\")");
  const fs::path fp(name);
  if (fp.is_absolute() || fp.has_root_path()) return refuse("is an absolute path");
  if (std::any_of(fp.begin(), fp.end(), [](const fs::path& c) { return c == ".."; }))
    return refuse("has a \"..\" component (it would leave the plan directory)");
  if (!fp.has_filename() || fp.filename() == ".") return refuse("names a directory, not a file");
  return Status::ok();
}

// Params against the program list: placement programs in range, the legacy buffer/grad spelling only
// with one program, and every program holding a sharded param holds all of its shards.
Status checkPlacements(const Doc& doc, const Manifest& m) {
  const Mesh mesh = m.mesh();
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamDesc& p = m.params[i];
    const std::string path = index("params", i);
    if (p.legacyBufferGrad && m.programs.size() > 1)
      return doc.error(key(path, "buffer"), "\"buffer\" and \"grad\" name buffers of programs[0] and need a plan "
                                            "with one program; this plan has " + std::to_string(m.programs.size()) +
                                            ": use \"placements\"");
    for (size_t k = 0; k < p.placements.size(); ++k) {
      const ParamDesc::Placement& pl = p.placements[k];
      const std::string pk = index(key(path, "placements"), k);
      if (pl.program >= int64_t(m.programs.size()))
        return doc.error(key(pk, "program"), "program " + std::to_string(pl.program) + " is out of range (the plan has " +
                                                 std::to_string(m.programs.size()) + " program(s))");
      // Every program holding a split param holds all its pieces: the first coordinate on `axis` that
      // none of the program's ranks has, if any.
      auto missing = [&](MeshAxis axis) -> std::optional<int64_t> {
        std::vector<bool> member(size_t(mesh.axisSize(axis)), false);
        for (int64_t r : m.programs[size_t(pl.program)].ranks) member[size_t(mesh.coord(r, axis))] = true;
        for (size_t c = 0; c < member.size(); ++c)
          if (!member[c]) return int64_t(c);
        return std::nullopt;
      };
      auto missingError = [&](const char* field, MeshAxis axis, int64_t c, const std::string& how,
                              const char* pieces) {
        return doc.error(key(path, field), "\"" + p.name + "\" is " + how + " " +
                                               std::string(meshAxisName(axis)) + " but programs[" +
                                               std::to_string(pl.program) + "] has no rank with " +
                                               std::string(meshAxisName(axis)) + " coordinate " + std::to_string(c) +
                                               " (placements[" + std::to_string(k) +
                                               "]): every program holding the param must hold all its " + pieces);
      };
      if (p.zero)
        if (auto c = missing(p.zero->axis)) return missingError("zero", p.zero->axis, *c, "split by ZeRO over", "blocks");
      if (p.sharding)
        if (auto c = missing(p.sharding->axis))
          return missingError("sharding", p.sharding->axis, *c, "sharded over", "shards");
    }
  }
  return Status::ok();
}

StatusOr<Manifest> parseManifestJson(const Doc& doc, const json& root) {
  Manifest m;
  int64_t version = 0;
  LLCDIST_RETURN_IF_ERROR(checkHeader(doc, root, sc::kPlanFormat, &version));
  LLCDIST_RETURN_IF_ERROR(doc.keys(root, "", {"format", "version", "features", "model", "batch", "mesh", "optimizer",
                                              "lr_schedule", "grad_clip", "params", "programs"}));
  const json& features = root.at("features");
  LLCDIST_RETURN_IF_ERROR(doc.array(features, "features"));
  for (size_t i = 0; i < features.size(); ++i) {
    if (!features[i].is_string()) return doc.error(index("features", i), "expected a string, got " + planjson::describe(features[i]));
    const std::string f = features[i].get<std::string>();
    if (!oneOf(f, sc::kKnownFeatures))
      return doc.error(index("features", i), "unknown feature \"" + f + "\" (this runtime knows " +
                                                 (sc::kKnownFeatures.empty() ? std::string("none") : listNames(sc::kKnownFeatures)) +
                                                 "; use a newer runtime or compile without it)");
    m.features.push_back(f);
  }

  const json& model = root.at("model");
  LLCDIST_RETURN_IF_ERROR(doc.keys(model, "model", {"name", "architecture", "vocab_size", "dtype"},
                                   {"padded_vocab_size"}));
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "name", &m.modelName));
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "architecture", &m.architecture));
  LLCDIST_RETURN_IF_ERROR(doc.integer(model, "model", "vocab_size", &m.vocabSize, 1));
  // Vocabulary padding: padded_vocab_size exactly with the feature, and larger than the real vocabulary
  // (a plan without padding lists neither).
  const bool vocabPadding = m.hasFeature(sc::kVocabPaddingFeature);
  if (vocabPadding != model.contains("padded_vocab_size"))
    return doc.error("model.padded_vocab_size", vocabPadding ? "missing: the feature \"vocab_padding\" needs it"
                                                             : "needs the feature \"vocab_padding\" in \"features\"");
  if (vocabPadding) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(model, "model", "padded_vocab_size", &m.paddedVocabSize, 1));
    if (m.paddedVocabSize <= m.vocabSize)
      return doc.error("model.padded_vocab_size", "must exceed model.vocab_size = " + std::to_string(m.vocabSize) +
                                                      ", got " + std::to_string(m.paddedVocabSize) +
                                                      " (a plan without padding omits it and the feature)");
  }
  std::string dtype;
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "dtype", &dtype));
  if (!oneOf(dtype, sc::kParamDTypeNames))
    return doc.error("model.dtype", "unsupported dtype \"" + dtype + "\" (expected " + listNames(sc::kParamDTypeNames) + ")");
  m.modelDtype = *sc::parseElemType(dtype);

  const json& batch = root.at("batch");
  LLCDIST_RETURN_IF_ERROR(doc.keys(batch, "batch", {"seq_len", "micro_batch", "microbatches", "dp", "global_batch"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(batch, "batch", "seq_len", &m.seqLen, 1));
  LLCDIST_RETURN_IF_ERROR(doc.integer(batch, "batch", "micro_batch", &m.microBatch, 1));
  LLCDIST_RETURN_IF_ERROR(doc.integer(batch, "batch", "microbatches", &m.microbatches, 1));
  LLCDIST_RETURN_IF_ERROR(doc.integer(batch, "batch", "dp", &m.dataParallel, 1));
  LLCDIST_RETURN_IF_ERROR(doc.integer(batch, "batch", "global_batch", &m.globalBatch, 1));
  int64_t g = 0;
  if (mulOverflow(m.microBatch, m.microbatches, &g) || mulOverflow(g, m.dataParallel, &g) || g != m.globalBatch)
    return doc.error("batch.global_batch", "expected micro_batch × microbatches × dp = " +
                                               std::to_string(m.microBatch) + " × " + std::to_string(m.microbatches) +
                                               " × " + std::to_string(m.dataParallel) + ", got " + std::to_string(m.globalBatch));

  const json& mesh = root.at("mesh");
  LLCDIST_RETURN_IF_ERROR(doc.keys(mesh, "mesh", {"dp", "tp", "pp"}, {"rank_order"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "dp", &m.meshDp, 1, 1 << 24));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "tp", &m.meshTp, 1, 1 << 24));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "pp", &m.meshPp, 1, 1 << 24));
  if (m.meshDp != m.dataParallel)
    return doc.error("batch.dp", "must equal mesh.dp (" + std::to_string(m.meshDp) + "), got " + std::to_string(m.dataParallel));
  if (m.worldSize() > (int64_t(1) << 24)) return doc.error("mesh", "world size dp × tp × pp is too large");
  if (m.meshPp != 1 && !m.hasFeature(sc::kPipelineFeature))
    return doc.error("mesh.pp", "pp > 1 needs the feature \"pipeline\" (pipeline parallelism with pp = " +
                                    std::to_string(m.meshPp) +
                                    "; without it a plan is SPMD: every rank runs programs[0])");
  if (mesh.contains("rank_order")) LLCDIST_RETURN_IF_ERROR(parseRankOrder(doc, mesh.at("rank_order"), &m.rankOrder));

  LLCDIST_RETURN_IF_ERROR(parseOptimizer(doc, root.at("optimizer"), &m.optimizer));
  LLCDIST_RETURN_IF_ERROR(parseLrSchedule(doc, root.at("lr_schedule"), &m.lrSchedule));
  LLCDIST_RETURN_IF_ERROR(doc.number(root, "", "grad_clip", &m.gradClip));
  if (m.gradClip < 0) return doc.error("grad_clip", "must be >= 0 (0 = no clipping)");

  const json& params = root.at("params");
  LLCDIST_RETURN_IF_ERROR(doc.array(params, "params"));
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    ParamDesc p;
    LLCDIST_RETURN_IF_ERROR(parseParam(doc, params[i], index("params", i), m, &p));
    if (!names.insert(p.name).second)
      return doc.error(index("params", i) + ".name", "duplicate parameter \"" + p.name + "\" (tied weights appear once)");
    m.params.push_back(std::move(p));
  }

  const json& programs = root.at("programs");
  LLCDIST_RETURN_IF_ERROR(doc.array(programs, "programs"));
  if (programs.empty()) return doc.error("programs", "a plan needs at least one program");
  const bool pipeline = m.hasFeature(sc::kPipelineFeature);
  if (!pipeline && programs.size() > 1)
    return doc.error("programs", "a plan without the feature \"pipeline\" is SPMD: one program that every rank "
                                 "runs, got " + std::to_string(programs.size()) + " programs");
  if (pipeline && int64_t(programs.size()) != m.meshPp)
    return doc.error("programs", "a pipeline plan has one program per stage: expected mesh.pp = " +
                                     std::to_string(m.meshPp) + " programs, got " + std::to_string(programs.size()));
  const Mesh grid = m.mesh();
  std::vector<int> owner(size_t(m.worldSize()), -1);
  for (size_t i = 0; i < programs.size(); ++i) {
    const std::string path = index("programs", i);
    Manifest::ProgramRef ref;
    LLCDIST_RETURN_IF_ERROR(doc.keys(programs[i], path, {"file", "ranks"}, {"stage"}));
    ref.stage = int64_t(i);
    if (programs[i].contains("stage")) {
      LLCDIST_RETURN_IF_ERROR(doc.integer(programs[i], path, "stage", &ref.stage, 0));
      if (ref.stage != int64_t(i))
        return doc.error(key(path, "stage"), "expected " + std::to_string(i) + " (programs[i].stage must be i), got " +
                                                 std::to_string(ref.stage));
    }
    LLCDIST_RETURN_IF_ERROR(doc.string(programs[i], path, "file", &ref.file));
    LLCDIST_RETURN_IF_ERROR(
        checkFileInPlanDir(doc, key(path, "file"), ref.file, "program-" + std::to_string(i) + ".json"));
    LLCDIST_RETURN_IF_ERROR(doc.intArray(programs[i], path, "ranks", &ref.ranks, 0, m.worldSize() - 1));
    if (ref.ranks.empty()) return doc.error(key(path, "ranks"), "a program must run on at least one rank");
    for (size_t r = 0; r < ref.ranks.size(); ++r) {
      int& o = owner[size_t(ref.ranks[r])];
      if (o >= 0)
        return doc.error(index(key(path, "ranks"), r), "rank " + std::to_string(ref.ranks[r]) +
                                                           " already runs programs[" + std::to_string(o) + "]");
      o = int(i);
    }
    if (pipeline) {
      // Stage i runs exactly the ranks whose pp coordinate is i.
      for (size_t r = 0; r < ref.ranks.size(); ++r) {
        const int64_t c = grid.coord(ref.ranks[r], MeshAxis::kPp);
        if (c != int64_t(i))
          return doc.error(index(key(path, "ranks"), r),
                           "rank " + std::to_string(ref.ranks[r]) + " has pp coordinate " + std::to_string(c) +
                               ", but stage " + std::to_string(i) + " runs exactly the ranks with pp coordinate " +
                               std::to_string(i) + " (" + grid.describe() + ")");
      }
      for (int64_t r = 0; r < m.worldSize(); ++r)
        if (grid.coord(r, MeshAxis::kPp) == int64_t(i) && owner[size_t(r)] != int(i))
          return doc.error(key(path, "ranks"), "missing rank " + std::to_string(r) + ": stage " + std::to_string(i) +
                                                   " runs exactly the ranks with pp coordinate " + std::to_string(i) +
                                                   " (" + grid.describe() + ")");
    }
    m.programs.push_back(std::move(ref));
  }
  for (size_t r = 0; r < owner.size(); ++r)
    if (owner[r] < 0)
      return doc.error("programs", "no program runs rank " + std::to_string(r) + " (world size dp × tp × pp = " +
                                       std::to_string(m.worldSize()) + ")");
  LLCDIST_RETURN_IF_ERROR(checkPlacements(doc, m));
  return m;
}

// program "slot_deltas": the instance offsets of slotted buffers relative to instance 0's, one row per
// pattern (docs/plan-format.md "Microbatch slots"): at least 2 integers each, the first 0, each within
// ±arena_bytes (a delta that large places the instance outside the arena whatever the offset).
Status parseSlotDeltas(const Doc& doc, const json& v, int64_t arenaBytes, std::vector<std::vector<int64_t>>* out) {
  LLCDIST_RETURN_IF_ERROR(doc.array(v, "slot_deltas"));
  if (v.empty()) return doc.error("slot_deltas", "expected at least one row (leave the key out when no buffer has slots)");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = index("slot_deltas", i);
    LLCDIST_RETURN_IF_ERROR(doc.array(v[i], path));
    if (v[i].size() < 2) return doc.error(path, "expected at least 2 instances, got " + std::to_string(v[i].size()));
    std::vector<int64_t>& row = out->emplace_back(v[i].size());
    for (size_t k = 0; k < v[i].size(); ++k)
      LLCDIST_RETURN_IF_ERROR(doc.integerValue(v[i][k], index(path, k), &row[k], -arenaBytes, arenaBytes));
    if (row[0] != 0) return doc.error(index(path, 0), "expected 0 (instance 0 is at the buffer's offset), got " + std::to_string(row[0]));
  }
  return Status::ok();
}

Status parseBuffer(const Doc& doc, const json& b, const std::string& path, size_t i, int64_t arenaBytes,
                   const std::vector<std::vector<int64_t>>& slotDeltas, BufferDesc* out) {
  LLCDIST_RETURN_IF_ERROR(
      doc.keys(b, path, {"id", "name", "kind", "dtype", "shape", "offset", "bytes"}, {"slot_offsets", "slot_delta"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "id", &out->id));
  if (out->id != int64_t(i)) return doc.error(key(path, "id"), "expected " + std::to_string(i) + " (buffers[i].id must be i), got " + std::to_string(out->id));
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "name", &out->name));
  if (out->name.empty()) return doc.error(key(path, "name"), "empty buffer name");
  std::string s;
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "kind", &s));
  auto kind = sc::parseBufferKind(s);
  if (!kind) return doc.error(key(path, "kind"), "unknown buffer kind \"" + s + "\" (expected " + listNames(sc::kBufferKindNames) + ")");
  out->kind = *kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "dtype", &s));
  auto dt = sc::parseElemType(s);
  if (!dt) return doc.error(key(path, "dtype"), "unknown dtype \"" + s + "\" (expected " + listNames(sc::kElemTypeNames) + ")");
  out->dtype = *dt;
  LLCDIST_RETURN_IF_ERROR(readShape(doc, b, path, &out->shape));
  int64_t n = 0, expect = 0;
  LLCDIST_RETURN_IF_ERROR(numelOf(doc, path, out->shape, &n));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "offset", &out->offset, 0));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "bytes", &out->bytes, 0));
  const int64_t size = sc::elemTypeSize(out->dtype);
  const bool overflow = mulOverflow(n, size, &expect);  // (n × size itself would be UB to print)
  if (overflow || expect != out->bytes)
    return doc.error(key(path, "bytes"), "expected product(shape) × sizeof(" + std::string(sc::elemTypeName(out->dtype)) +
                                             ") = " + std::to_string(n) + " × " + std::to_string(size) + " = " +
                                             (overflow ? std::string("(overflow)") : std::to_string(expect)) +
                                             ", got " + std::to_string(out->bytes));
  if (out->offset % sc::kArenaAlignment != 0)
    return doc.error(key(path, "offset"), "offset " + std::to_string(out->offset) + " is not a multiple of " +
                                              std::to_string(sc::kArenaAlignment) + " (the arena alignment)");
  if (out->offset > arenaBytes || out->bytes > arenaBytes - out->offset)
    return doc.error(path, "buffer \"" + out->name + "\" [" + std::to_string(out->offset) + ", " +
                               std::to_string(out->offset + out->bytes) + ") extends past arena_bytes = " +
                               std::to_string(arenaBytes));
  if (!b.contains("slot_offsets") && !b.contains("slot_delta")) return Status::ok();
  // A slotted buffer: one instance per microbatch slot, each placed like a buffer of its own, at the
  // offsets given (slot_offsets) or at offset + a row of the program's slot_deltas (slot_delta).
  if (b.contains("slot_offsets") && b.contains("slot_delta"))
    return doc.error(key(path, "slot_delta"), "give \"slot_offsets\" or \"slot_delta\", not both");
  const bool explicitOffsets = b.contains("slot_offsets");
  const std::string sp = key(path, explicitOffsets ? "slot_offsets" : "slot_delta");
  if (explicitOffsets) {
    LLCDIST_RETURN_IF_ERROR(doc.intArray(b, path, "slot_offsets", &out->slotOffsets, 0));
    if (out->slotOffsets.size() < 2)
      return doc.error(sp, "expected at least 2 instances (a buffer with one instance has only \"offset\")");
  } else {
    int64_t row = 0;
    LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "slot_delta", &row, 0));
    if (row >= int64_t(slotDeltas.size()))
      return doc.error(sp, "row " + std::to_string(row) + " of \"slot_deltas\" does not exist (the program has " +
                               std::to_string(slotDeltas.size()) + ")");
    // |delta| <= arena_bytes and offset <= arena_bytes: no overflow.
    for (int64_t d : slotDeltas[size_t(row)]) out->slotOffsets.push_back(out->offset + d);
  }
  // (An instance's offset below 0 is outside the arena.)
  auto where = [&](size_t k) {
    return explicitOffsets ? index(sp, k) : sp;
  };
  if (out->kind != sc::BufferKind::kActivation && out->kind != sc::BufferKind::kScratch &&
      out->kind != sc::BufferKind::kInput)
    return doc.error(sp, "a \"" + std::string(sc::bufferKindName(out->kind)) +
                             "\" buffer cannot have slots (only activation, scratch and input buffers can)");
  if (out->slotOffsets[0] != out->offset)
    return doc.error(index(sp, 0), "expected the buffer's offset " + std::to_string(out->offset) + ", got " +
                                       std::to_string(out->slotOffsets[0]));
  for (size_t k = 1; k < out->slotOffsets.size(); ++k) {
    const int64_t o = out->slotOffsets[k];
    if (o % sc::kArenaAlignment != 0)
      return doc.error(where(k), "instance " + std::to_string(k) + " offset " + std::to_string(o) +
                                     " is not a multiple of " + std::to_string(sc::kArenaAlignment) +
                                     " (the arena alignment)");
    if (o < 0 || o > arenaBytes || out->bytes > arenaBytes - o)
      return doc.error(where(k), "instance " + std::to_string(k) + " of buffer \"" + out->name + "\" [" +
                                     std::to_string(o) + ", " + std::to_string(o + out->bytes) +
                                     ") extends past arena_bytes = " + std::to_string(arenaBytes));
  }
  return Status::ok();
}

// program "queues" (feature "async"): unique names of [a-z0-9_]+, the first "compute".
Status parseQueues(const Doc& doc, const json& v, const Manifest& manifest, std::vector<std::string>* out) {
  if (!manifest.hasFeature(sc::kAsyncFeature))
    return doc.error("queues", "needs the feature \"async\" in \"features\" (asynchronous plans)");
  if (!v.is_array() || v.empty()) return doc.error("queues", "expected a non-empty array of queue names, got " + planjson::describe(v));
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = index("queues", i);
    if (!v[i].is_string()) return doc.error(path, "expected a string, got " + planjson::describe(v[i]));
    const std::string q = v[i].get<std::string>();
    const bool wellFormed = !q.empty() && std::all_of(q.begin(), q.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!wellFormed) return doc.error(path, "queue name \"" + q + "\" is not of the form [a-z0-9_]+");
    if (i == 0 && q != sc::kComputeQueue)
      return doc.error(path, "the first queue must be \"" + std::string(sc::kComputeQueue) + "\", got \"" + q + "\"");
    if (std::find(out->begin(), out->end(), q) != out->end()) return doc.error(path, "duplicate queue \"" + q + "\"");
    out->push_back(q);
  }
  return Status::ok();
}

// The token rules (docs/plan-format.md "Asynchronous plans") over the step's execution order: the
// actions in order, each running its subroutine's ops in order. Every step executes the same ops, so
// this check at load time is the whole check: a plan that passes never waits for a token nobody
// started, and never ends a step with communication in flight.
Status checkTokens(const Doc& doc, const Program& prog) {
  struct InFlight {
    size_t sub, op, action;
  };
  std::map<int64_t, InFlight> inFlight;
  std::set<int64_t> waited;  // tokens waited at least once (a second wait is a "double wait")
  auto opPath = [](size_t sub, size_t op) { return index(key(index("subroutines", sub), "ops"), op); };
  auto at = [&](size_t a) {
    return " (action " + std::to_string(a) + ", subroutine \"" +
           prog.subroutines[size_t(prog.actions[a].subroutine)].name + "\", in the step's execution order)";
  };
  for (size_t a = 0; a < prog.actions.size(); ++a) {
    const size_t s = size_t(prog.actions[a].subroutine);
    const std::vector<Op>& ops = prog.subroutines[s].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.token < 0) continue;
      const std::string t = "token " + std::to_string(op.token);
      auto it = inFlight.find(op.token);
      if (op.kind == sc::OpKind::kWait) {
        if (it == inFlight.end())
          return doc.error(key(opPath(s, i), "token"),
                           (waited.count(op.token) ? "double wait: " + t + " was already waited for"
                                                   : "wait before start: " + t + " is not in flight") + at(a));
        inFlight.erase(it);
        waited.insert(op.token);
        continue;
      }
      if (it != inFlight.end())
        return doc.error(key(opPath(s, i), "token"),
                         t + " is started again before its wait (it is in flight from " +
                             opPath(it->second.sub, it->second.op) + ", action " +
                             std::to_string(it->second.action) + ")" + at(a));
      inFlight[op.token] = {s, i, a};
      waited.erase(op.token);
    }
  }
  if (!inFlight.empty()) {
    const auto& [token, where] = *inFlight.begin();
    return doc.error(key(opPath(where.sub, where.op), "token"),
                     "never waited: token " + std::to_string(token) + " (started in action " +
                         std::to_string(where.action) + ") is still in flight at the end of the step");
  }
  return Status::ok();
}

StatusOr<Program> parseProgramJson(const Doc& doc, const json& root, const Manifest& manifest) {
  // The start-up check that every op kind has its family's checker and binder (src/ops/OpDefs.h).
  LLCDIST_RETURN_IF_ERROR(ops::checkOpDefs());
  Program prog;
  int64_t version = 0;
  LLCDIST_RETURN_IF_ERROR(checkHeader(doc, root, sc::kProgramFormat, &version));
  LLCDIST_RETURN_IF_ERROR(
      doc.keys(root, "", {"format", "version", "arena_bytes", "buffers", "subroutines", "actions"},
               {"queues", "slot_deltas"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "arena_bytes", &prog.arenaBytes, 0));
  if (root.contains("queues")) LLCDIST_RETURN_IF_ERROR(parseQueues(doc, root.at("queues"), manifest, &prog.queues));
  std::vector<std::vector<int64_t>> slotDeltas;
  if (root.contains("slot_deltas"))
    LLCDIST_RETURN_IF_ERROR(parseSlotDeltas(doc, root.at("slot_deltas"), prog.arenaBytes, &slotDeltas));

  const json& buffers = root.at("buffers");
  LLCDIST_RETURN_IF_ERROR(doc.array(buffers, "buffers"));
  std::set<std::string> names;
  for (size_t i = 0; i < buffers.size(); ++i) {
    BufferDesc b;
    const std::string path = index("buffers", i);
    LLCDIST_RETURN_IF_ERROR(parseBuffer(doc, buffers[i], path, i, prog.arenaBytes, slotDeltas, &b));
    if (!names.insert(b.name).second) return doc.error(key(path, "name"), "duplicate buffer name \"" + b.name + "\"");
    if ((b.name == sc::kLossMetric || b.name == sc::kGradNormMetric) &&
        (b.kind != sc::BufferKind::kMetric || b.dtype != sc::ElemType::kF32 || b.numel() != 1))
      return doc.error(path, "the reserved buffer name \"" + b.name + "\" needs kind \"metric\", dtype \"f32\" and one element");
    prog.buffers.push_back(std::move(b));
  }

  const json& subs = root.at("subroutines");
  LLCDIST_RETURN_IF_ERROR(doc.array(subs, "subroutines"));
  for (size_t i = 0; i < subs.size(); ++i) {
    const std::string path = index("subroutines", i);
    Subroutine sub;
    LLCDIST_RETURN_IF_ERROR(doc.keys(subs[i], path, {"name", "ops"}));
    LLCDIST_RETURN_IF_ERROR(doc.string(subs[i], path, "name", &sub.name));
    if (sub.name.empty()) return doc.error(key(path, "name"), "empty subroutine name");
    for (const Subroutine& other : prog.subroutines)
      if (other.name == sub.name) return doc.error(key(path, "name"), "duplicate subroutine \"" + sub.name + "\"");
    const json& ops = subs[i].at("ops");
    LLCDIST_RETURN_IF_ERROR(doc.array(ops, key(path, "ops")));
    for (size_t j = 0; j < ops.size(); ++j) {
      Op op;
      LLCDIST_RETURN_IF_ERROR(planops::parseOp(doc, ops[j], index(key(path, "ops"), j), prog, manifest, &op));
      sub.ops.push_back(std::move(op));
    }
    prog.subroutines.push_back(std::move(sub));
  }

  const json& actions = root.at("actions");
  LLCDIST_RETURN_IF_ERROR(doc.array(actions, "actions"));
  planops::SlotChecker slots(prog);
  // Per subroutine, once (an action per microbatch names it): does it load a microbatch?
  std::vector<bool> loads(prog.subroutines.size());
  for (size_t s = 0; s < prog.subroutines.size(); ++s)
    loads[s] = std::any_of(prog.subroutines[s].ops.begin(), prog.subroutines[s].ops.end(),
                           [](const Op& op) { return op.kind == sc::OpKind::kLoadMicrobatch; });
  prog.actions.reserve(actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const std::string path = index("actions", i);
    LLCDIST_RETURN_IF_ERROR(doc.keys(actions[i], path, {"subroutine"}, {"microbatch", "slot"}));
    std::string name;
    LLCDIST_RETURN_IF_ERROR(doc.string(actions[i], path, "subroutine", &name));
    Action a;
    a.subroutine = -1;
    for (size_t s = 0; s < prog.subroutines.size(); ++s)
      if (prog.subroutines[s].name == name) a.subroutine = int64_t(s);
    if (a.subroutine < 0) {
      std::string known;
      for (const Subroutine& s : prog.subroutines) known += (known.empty() ? "\"" : ", \"") + s.name + "\"";
      return doc.error(key(path, "subroutine"), "unknown subroutine \"" + name + "\" (defined: " +
                                                    (known.empty() ? std::string("none") : known) + ")");
    }
    if (actions[i].contains("microbatch"))
      LLCDIST_RETURN_IF_ERROR(doc.integer(actions[i], path, "microbatch", &a.microbatch, 0, manifest.microbatches - 1));
    if (loads[size_t(a.subroutine)] && a.microbatch < 0)
      return doc.error(path, "subroutine \"" + name + "\" contains load_microbatch, so the action needs a \"microbatch\"");
    if (actions[i].contains("slot")) {
      LLCDIST_RETURN_IF_ERROR(doc.integer(actions[i], path, "slot", &a.slot, 0));
      LLCDIST_RETURN_IF_ERROR(slots.check(doc, path, size_t(a.subroutine), a.slot));
    }
    prog.actions.push_back(a);
  }
  if (manifest.hasFeature(sc::kAsyncFeature)) LLCDIST_RETURN_IF_ERROR(checkTokens(doc, prog));
  return prog;
}

Status readFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::notFound(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::ioError(path + ": read failed");
  *out = ss.str();
  return Status::ok();
}

}  // namespace

int64_t ParamDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ParamDesc::fileNumel() const {
  int64_t n = 1;
  for (int64_t d : fileShape) n *= d;
  return n;
}

int64_t ParamDesc::localNumel() const {
  int64_t n = 1;
  for (int64_t d : localShape) n *= d;
  return n;
}

int64_t ParamDesc::blockNumel() const {
  int64_t n = 1;
  for (int64_t d : blockShape) n *= d;
  return n;
}

const ParamDesc::Placement* ParamDesc::placementIn(int64_t program) const {
  for (const Placement& p : placements)
    if (p.program == program) return &p;
  return nullptr;
}

bool Manifest::hasFeature(std::string_view name) const {
  return std::find(features.begin(), features.end(), name) != features.end();
}

int64_t Manifest::programOfRank(int64_t rank) const {
  for (size_t i = 0; i < programs.size(); ++i)
    if (std::find(programs[i].ranks.begin(), programs[i].ranks.end(), rank) != programs[i].ranks.end())
      return int64_t(i);
  return -1;
}

int64_t BufferDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Program::findBuffer(std::string_view name) const {
  for (const BufferDesc& b : buffers)
    if (b.name == name) return b.id;
  return -1;
}

StatusOr<Manifest> parseManifestDocument(const json& root, const std::string& file) {
  Doc doc(file);
  try {
    return parseManifestJson(doc, root);
  } catch (const std::exception& e) {  // defensive: the readers check types before every access
    return Status::internal(file + ": unexpected error while reading: " + e.what());
  }
}

StatusOr<Manifest> parseManifest(const std::string& text, const std::string& file) {
  json root;
  LLCDIST_RETURN_IF_ERROR(Doc(file).parse(text, &root));
  return parseManifestDocument(root, file);
}

StatusOr<Program> parseProgramDocument(const json& root, const std::string& file, const Manifest& manifest) {
  Doc doc(file);
  try {
    StatusOr<Program> p = parseProgramJson(doc, root, manifest);
    if (p.isOk()) p->file = file;
    return p;
  } catch (const std::exception& e) {
    return Status::internal(file + ": unexpected error while reading: " + e.what());
  }
}

StatusOr<Program> parseProgram(const std::string& text, const std::string& file, const Manifest& manifest) {
  json root;
  LLCDIST_RETURN_IF_ERROR(Doc(file).parse(text, &root));
  return parseProgramDocument(root, file, manifest);
}

Status validateParams(const Manifest& manifest, const Program& program) { return validateParams(manifest, program, 0); }

Status validateParams(const Manifest& manifest, const Program& program, size_t programIndex) {
  std::vector<int> used(program.buffers.size(), -1);
  for (size_t i = 0; i < manifest.params.size(); ++i) {
    const ParamDesc& p = manifest.params[i];
    size_t k = 0;
    while (k < p.placements.size() && p.placements[k].program != int64_t(programIndex)) ++k;
    if (k == p.placements.size()) continue;  // no copy in this program
    const ParamDesc::Placement& pl = p.placements[k];
    const std::string prefix =
        "params[" + std::to_string(i) + "]." + (p.legacyBufferGrad ? std::string() : "placements[" + std::to_string(k) + "].");
    auto err = [&](size_t, const char* field, const std::string& msg) {
      return Status::invalidArgument(prefix + field + ": " + msg);
    };
    for (const char* field : {"buffer", "grad"}) {
      const bool isGrad = field[0] == 'g';
      const int64_t id = isGrad ? pl.grad : pl.buffer;
      const auto want = isGrad ? sc::BufferKind::kGrad : sc::BufferKind::kParam;
      if (id >= int64_t(program.buffers.size()))
        return err(i, field, "buffer id " + std::to_string(id) + " is out of range (" + program.file + " has " +
                                 std::to_string(program.buffers.size()) + " buffers)");
      const BufferDesc& b = program.buffers[size_t(id)];
      if (b.kind != want)
        return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") has kind \"" +
                                 std::string(sc::bufferKindName(b.kind)) + "\", expected \"" +
                                 std::string(sc::bufferKindName(want)) + "\"");
      // The value buffer has the param's dtype; the gradient any float dtype (e.g. an f32 gradient of a
      // bf16 param, or a bf16 gradient of an f32 master param).
      if (!isGrad && b.dtype != p.dtype)
        return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                                 std::string(sc::elemTypeName(b.dtype)) + " but parameter \"" + p.name +
                                 "\" has dtype \"" + std::string(sc::elemTypeName(p.dtype)) + "\"");
      if (isGrad && !sc::isFloatType(b.dtype))
        return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                                 std::string(sc::elemTypeName(b.dtype)) + "; a gradient must be f32 or bf16");
      const std::vector<int64_t>& wantShape = isGrad ? p.gradShape() : p.bufferShape();
      if (b.shape != wantShape) {
        auto str = shapeString;
        if (p.zero) {
          const bool block = isGrad ? p.gradHoldsBlock() : p.bufferHoldsBlock();
          const std::string local = p.sharding ? "the local shard of parameter \"" + p.name + "\" (shape " + str(p.shape) +
                                                     ", sharded on " + std::string(meshAxisName(p.sharding->axis)) +
                                                     " dim " + std::to_string(p.sharding->dim) + ")"
                                               : "parameter \"" + p.name + "\"";
          return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                                   " but under ZeRO stage " + std::to_string(p.zero->stage) + " the " +
                                   (isGrad ? "gradient" : "value buffer") + " holds " +
                                   (block ? "this rank's block of " + local + ": shape " + str(wantShape) +
                                                " (dim 0 divided by " +
                                                std::string(meshAxisName(p.zero->axis)) + ")"
                                          : "the whole of " + local + ": shape " + str(wantShape)));
        }
        if (p.sharding)
          return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                                   " but the local shard of parameter \"" + p.name + "\" (shape " + str(p.shape) +
                                   ", sharded on " + std::string(meshAxisName(p.sharding->axis)) + " dim " +
                                   std::to_string(p.sharding->dim) + ") has shape " + str(p.localShape));
        return err(i, field, "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                                 " but parameter \"" + p.name + "\" has shape " + str(p.shape));
      }
      if (used[size_t(id)] >= 0)
        return err(i, field, "buffer " + std::to_string(id) + " is already used by params[" +
                                 std::to_string(used[size_t(id)]) + "]");
      used[size_t(id)] = int(i);
    }
  }
  return Status::ok();
}

StatusOr<Plan> loadPlan(const std::string& dir) {
  return loadPlan(dir, [](const Manifest&, size_t) { return true; });
}

StatusOr<Plan> loadPlan(const std::string& dir, const std::function<bool(const Manifest&, size_t)>& wanted) {
  Plan plan;
  plan.dir = dir;
  const std::string manifestPath = (fs::path(dir) / sc::kManifestFile).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::notFound(dir + ": not a plan directory (no such directory)");
  std::string text;
  LLCDIST_RETURN_IF_ERROR(readFile(manifestPath, &text));
  LLCDIST_ASSIGN_OR_RETURN(plan.manifest, parseManifest(text, manifestPath));
  bool all = true;
  for (size_t i = 0; i < plan.manifest.programs.size(); ++i) {
    plan.loaded.push_back(wanted(plan.manifest, i));
    all = all && plan.loaded.back();
    if (!plan.loaded.back()) {
      plan.programs.emplace_back();
      continue;
    }
    const std::string path = (fs::path(dir) / plan.manifest.programs[i].file).string();
    LLCDIST_RETURN_IF_ERROR(readFile(path, &text));
    LLCDIST_ASSIGN_OR_RETURN(Program prog, parseProgram(text, path, plan.manifest));
    plan.programs.push_back(std::move(prog));
  }
  if (all) plan.loaded.clear();
  // Every param placement against its program (the legacy buffer/grad spelling: programs[0]).
  for (size_t i = 0; i < plan.programs.size(); ++i)
    if (plan.isLoaded(i))
      LLCDIST_RETURN_IF_ERROR(validateParams(plan.manifest, plan.programs[i], i).withContext(manifestPath));
  return plan;
}

}  // namespace llcdist::rt
