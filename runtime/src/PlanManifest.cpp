// Plan directory loading, the manifest: manifest.json into Manifest (params, their sharding, ZeRO
// blocks and placements, the mesh, the optimizer and LR schedule), validated. See Plan.h and
// docs/plan-format.md; the programs are Plan.cpp's.
#include "llcdist/runtime/Plan.h"

#include "PlanJson.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace llcdist::rt {
namespace {

namespace fs = std::filesystem;
using planjson::checkHeader;
using planjson::Doc;
using planjson::index;
using planjson::json;
using planjson::key;
using planjson::listNames;
using planjson::mulOverflow;
using planjson::numelOf;
using planjson::oneOf;
using planjson::readShape;
using planjson::shapeString;
namespace sc = schema;

// params[i].sharding (the mesh is already parsed): axis, dim, blocks, replicas; replicas must divide n
// and dim d of the shape must be divisible by blocks·(n / replicas). Sets out->localShape.
Status parseSharding(const Doc& doc, const json& s, const std::string& path, const Manifest& m, ParamDesc* out) {
  LLCDIST_RETURN_IF_ERROR(doc.keys(s, path, {"axis", "dim"}, {"blocks", "replicas"}));
  std::string axis;
  LLCDIST_RETURN_IF_ERROR(doc.string(s, path, "axis", &axis));
  auto a = parseMeshAxis(axis);
  if (!a)
    return doc.error(key(path, "axis"), "unknown axis \"" + axis + "\" (expected " + listNames(sc::kMeshAxes) + ", " +
                                            listNames(sc::kDerivedMeshAxes) + ")");
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

// params[i].zero (feature "zero"; the mesh and the param's `sharding` are already parsed): axis (one
// mesh axis or a set, "dp+cp") and stage; the local shape's first dimension splits evenly over the
// axis's n members, or else `block_rows` must say ceil(rows / n) (padded blocks). Sets out->zero and
// out->blockShape.
Status parseZero(const Doc& doc, const json& z, const std::string& path, const Manifest& m, ParamDesc* out) {
  if (!m.hasFeature(sc::kZeroFeature))
    return doc.error(path, "a param with \"zero\" needs the feature \"zero\" in \"features\" (ZeRO plans)");
  LLCDIST_RETURN_IF_ERROR(doc.keys(z, path, {"axis", "stage"}, {"value_block", "block_rows"}));
  std::string axis;
  LLCDIST_RETURN_IF_ERROR(doc.string(z, path, "axis", &axis));
  auto a = parseAxisSet(axis);
  if (!a) return doc.error(key(path, "axis"), axisSetError(axis));
  if (out->sharding && a->has(out->sharding->axis))
    return doc.error(key(path, "axis"), "\"" + out->name + "\" is sharded over " +
                                            std::string(meshAxisName(out->sharding->axis)) +
                                            " already (params[].sharding); its ZeRO blocks need another axis" +
                                            (a->single() ? "" : " (\"" + axis + "\" contains it)"));
  // A shard of the ep axis is replicated over edp only: its ZeRO blocks cannot span dp, which mixes shards.
  if (out->sharding && isDerivedAxis(out->sharding->axis) && a->has(MeshAxis::kDp))
    return doc.error(key(path, "axis"), "\"" + out->name + "\" is sharded over " +
                                            std::string(meshAxisName(out->sharding->axis)) +
                                            ", inside dp: its ZeRO blocks need an axis without dp (its replicas " +
                                            "are over " + (out->sharding->axis == MeshAxis::kEp ? "edp" : "ep") +
                                            ")");
  ParamZero zero;
  zero.axis = *a;
  const std::string axisName = axisSetName(zero.axis);  // "dp", "dp+cp"
  LLCDIST_RETURN_IF_ERROR(doc.integer(z, path, "stage", &zero.stage, sc::kMinZeroStage, sc::kMaxZeroStage));
  if (z.contains("value_block")) LLCDIST_RETURN_IF_ERROR(doc.boolean(z, path, "value_block", &zero.valueBlock));
  if (out->localShape.empty()) return doc.error(path, "a scalar parameter cannot be split by ZeRO");
  const int64_t n = m.mesh().axisSize(zero.axis);
  const int64_t rows = out->localShape[0];
  const int64_t padded = (rows + n - 1) / n;  // the only block size: ceil(rows / n), as FSDP2 pads
  const std::string what = "dimension 0 of " + std::string(out->sharding ? "the local shard " : "") + "\"" + out->name +
                           "\" (shape " + shapeString(out->localShape) + ") has size " + std::to_string(rows);
  if (z.contains("block_rows")) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(z, path, "block_rows", &zero.blockRows, 1));
    if (rows % n == 0)
      return doc.error(key(path, "block_rows"), what + ", divisible by " + axisName + " = " + std::to_string(n) +
                                                    ": its blocks need no padding (remove \"block_rows\")");
    if (zero.blockRows != padded)
      return doc.error(key(path, "block_rows"), "is " + std::to_string(zero.blockRows) + " but " + what + " over " +
                                                    axisName + " = " + std::to_string(n) + " pads to blocks of ceil(" +
                                                    std::to_string(rows) + " / " + std::to_string(n) +
                                                    ") = " + std::to_string(padded) + " rows");
  } else if (rows % n != 0) {
    return doc.error(path, what + ", not divisible by " + axisName + " = " + std::to_string(n) +
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
    return doc.error(path,
                     "expected a non-empty array of {\"program\", \"buffer\", \"grad\"}, got " + planjson::describe(v));
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
      return doc.error(key(path, "placements"),
                       "missing: a param needs \"placements\" (or, in a plan with one "
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
  if (p.contains("sharding"))
    LLCDIST_RETURN_IF_ERROR(parseSharding(doc, p.at("sharding"), key(path, "sharding"), m, out));
  out->blockShape = out->localShape;
  if (p.contains("zero")) LLCDIST_RETURN_IF_ERROR(parseZero(doc, p.at("zero"), key(path, "zero"), m, out));
  const json& init = p.at("init");
  const std::string ip = key(path, "init");
  LLCDIST_RETURN_IF_ERROR(doc.object(init, ip));
  if (!init.contains("kind")) return doc.error(key(ip, "kind"), "missing required field");
  std::string kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(init, ip, "kind", &kind));
  if (kind == "normal") {
    LLCDIST_RETURN_IF_ERROR(doc.keys(init, ip, {"kind", "std"}, {"zero_row"}));
    out->init.kind = ParamInit::Kind::kNormal;
    LLCDIST_RETURN_IF_ERROR(doc.number(init, ip, "std", &out->init.std));
    if (out->init.std < 0) return doc.error(key(ip, "std"), "must be >= 0");
    if (init.contains("zero_row")) {  // a real row of dimension 0 (the pad token's of an embedding)
      LLCDIST_RETURN_IF_ERROR(doc.integer(init, ip, "zero_row", &out->init.zeroRow, 0));
      const int64_t rows = out->fileShape.empty() ? 0 : out->fileShape[0];
      if (out->init.zeroRow >= rows)
        return doc.error(key(ip, "zero_row"), "row " + std::to_string(out->init.zeroRow) + " is outside the " +
                                                  std::to_string(rows) + " rows of \"" + out->name + "\" (shape " +
                                                  shapeString(out->fileShape) + ", dimension 0)");
    }
  } else if (kind == "zeros" || kind == "ones") {
    LLCDIST_RETURN_IF_ERROR(doc.keys(init, ip, {"kind"}));
    out->init.kind = kind == "zeros" ? ParamInit::Kind::kZeros : ParamInit::Kind::kOnes;
  } else {
    return doc.error(key(ip, "kind"),
                     "unknown init kind \"" + kind + "\" (expected " + listNames(sc::kInitKinds) + ")");
  }
  return Status::ok();
}

// mesh.rank_order: a permutation of the three axis names dp, tp, pp (cp then the slowest axis) or of
// all four, fastest-varying first. `cp` is mesh.cp: a three-name order with cp > 1 is refused (it would
// place the context-parallel axis silently).
Status parseRankOrder(const Doc& doc, const json& v, int64_t cp, std::array<MeshAxis, kNumMeshAxes>* out) {
  const std::string path = "mesh.rank_order";
  const std::array<std::string_view, 3> three = {sc::kMeshAxes[0], sc::kMeshAxes[1], sc::kMeshAxes[2]};
  const std::string expect = cp > 1 ? "a permutation of " + listNames(sc::kMeshAxes) + " (fastest-varying axis first)"
                                    : "a permutation of " + listNames(three) + " or of " + listNames(sc::kMeshAxes) +
                                          " (fastest-varying axis first)";
  if (!v.is_array() || (v.size() != 3 && v.size() != 4))
    return doc.error(path, "expected " + expect + ", got " + planjson::describe(v));
  std::vector<MeshAxis> axes;
  bool seen[kNumMeshAxes] = {false, false, false, false};
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return doc.error(index(path, i),
                       "expected an axis name (" + listNames(sc::kMeshAxes) + "), got " + planjson::describe(v[i]));
    auto a = parseMeshAxis(v[i].get<std::string>());
    if (a && isDerivedAxis(*a))
      return doc.error(index(path, i), "\"" + v[i].get<std::string>() +
                                           "\" is an expert-parallel axis inside dp, not a mesh axis of its own: the "
                                           "rank order lists " + listNames(sc::kMeshAxes) + " only (ep sits in dp)");
    if (!a)
      return doc.error(index(path, i),
                       "unknown axis \"" + v[i].get<std::string>() + "\" (expected " + listNames(sc::kMeshAxes) + ")");
    if (seen[size_t(*a)])
      return doc.error(index(path, i), "axis \"" + v[i].get<std::string>() + "\" appears twice; expected " + expect);
    if (v.size() == 3 && *a == MeshAxis::kCp)
      return doc.error(index(path, i),
                       "a rank_order of three axes lists dp, tp and pp (cp is then the slowest "
                       "axis); list all four axes to place cp, expected " +
                           expect);
    seen[size_t(*a)] = true;
    axes.push_back(*a);
  }
  if (v.size() == 3 && cp > 1)
    return doc.error(path, "mesh.cp = " + std::to_string(cp) +
                               " needs a rank_order that lists cp too: expected a permutation of " +
                               listNames(sc::kMeshAxes) + " (fastest-varying axis first), e.g. " +
                               listNames(sc::kDefaultRankOrderWithCp) + ", got " + planjson::describe(v));
  Mesh grid;
  if (!grid.setOrder(axes)) return doc.error(path, "expected " + expect + ", got " + planjson::describe(v));
  *out = grid.order;
  return Status::ok();
}

// mesh.cp_layout (optional; after mesh.cp and batch.seq_len): a known layout, and load_balanced only
// when every cp rank gets two equal halves (seq_len divisible by 2·cp).
Status parseCpLayout(const Doc& doc, const json& mesh, Manifest* m) {
  if (!mesh.contains("cp_layout")) return Status::ok();
  std::string name;
  LLCDIST_RETURN_IF_ERROR(doc.string(mesh, "mesh", "cp_layout", &name));
  const std::optional<sc::CpLayout> layout = sc::parseCpLayout(name);
  if (!layout)
    return doc.error("mesh.cp_layout",
                     "unknown layout \"" + name + "\" (expected " + listNames(sc::kCpLayoutNames) + ")");
  if (*layout == sc::CpLayout::kLoadBalanced && m->seqLen % (2 * m->meshCp) != 0)
    return doc.error("mesh.cp_layout",
                     "load_balanced needs batch.seq_len divisible by 2·cp = " + std::to_string(2 * m->meshCp) +
                         ", got seq_len " + std::to_string(m->seqLen) +
                         " (each cp rank holds two chunks of seq_len / (2·cp))");
  m->cpLayout = *layout;
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
    return doc.error("optimizer.kind",
                     "unknown optimizer \"" + kind + "\" (expected " + listNames(sc::kOptimizerKinds) + ")");
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
    return doc.error("lr_schedule.kind",
                     "unknown schedule \"" + kind + "\" (expected " + listNames(sc::kLrScheduleKinds) + ")");
  }
  LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "max_lr", &out->maxLr));
  out->minLr = 0.0;
  out->warmupSteps = out->totalSteps = 0;
  if (o.contains("min_lr")) LLCDIST_RETURN_IF_ERROR(doc.number(o, path, "min_lr", &out->minLr));
  if (o.contains("warmup_steps")) LLCDIST_RETURN_IF_ERROR(doc.integer(o, path, "warmup_steps", &out->warmupSteps, 0));
  if (o.contains("total_steps")) LLCDIST_RETURN_IF_ERROR(doc.integer(o, path, "total_steps", &out->totalSteps, 0));
  if (out->kind == LrSchedule::Kind::kWarmupCosine && out->totalSteps != 0 && out->totalSteps <= out->warmupSteps)
    return doc.error(
        "lr_schedule.total_steps",
        "must be greater than warmup_steps (" + std::to_string(out->warmupSteps) + ") or 0 for \"the run's --steps\"");
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
      return doc.error(key(path, "buffer"),
                       "\"buffer\" and \"grad\" name buffers of programs[0] and need a plan "
                       "with one program; this plan has " +
                           std::to_string(m.programs.size()) + ": use \"placements\"");
    for (size_t k = 0; k < p.placements.size(); ++k) {
      const ParamDesc::Placement& pl = p.placements[k];
      const std::string pk = index(key(path, "placements"), k);
      if (pl.program >= int64_t(m.programs.size()))
        return doc.error(key(pk, "program"), "program " + std::to_string(pl.program) +
                                                 " is out of range (the plan has " + std::to_string(m.programs.size()) +
                                                 " program(s))");
      // Every program holding a split param holds all its pieces: the first coordinate on `axis` that
      // none of the program's ranks has, if any.
      // A set of axes ("dp+cp", ZeRO) counts its member index (Mesh::coord on the set).
      auto missing = [&](AxisSet axis) -> std::optional<int64_t> {
        std::vector<bool> member(size_t(mesh.axisSize(axis)), false);
        for (int64_t r : m.programs[size_t(pl.program)].ranks) member[size_t(mesh.coord(r, axis))] = true;
        for (size_t c = 0; c < member.size(); ++c)
          if (!member[c]) return int64_t(c);
        return std::nullopt;
      };
      auto missingError = [&](const char* field, AxisSet axis, int64_t c, const std::string& how, const char* pieces) {
        const std::string name = axisSetName(axis);
        return doc.error(key(path, field), "\"" + p.name + "\" is " + how + " " + name + " but programs[" +
                                               std::to_string(pl.program) + "] has no rank with " + name +
                                               (axis.single() ? " coordinate " : " member index ") + std::to_string(c) +
                                               " (placements[" + std::to_string(k) +
                                               "]): every program holding the param must hold all its " + pieces);
      };
      if (p.zero)
        if (auto c = missing(p.zero->axis))
          return missingError("zero", p.zero->axis, *c, "split by ZeRO over", "blocks");
      if (p.sharding)
        if (auto c = missing(AxisSet::of(p.sharding->axis)))
          return missingError("sharding", AxisSet::of(p.sharding->axis), *c, "sharded over", "shards");
    }
  }
  return Status::ok();
}

// manifest.programs (the mesh and features already parsed): one per stage (SPMD: one), each with its
// file in the plan directory and the ranks that run it, every rank exactly once; a pipeline stage runs
// exactly the ranks of its pp coordinate.
Status parsePrograms(const Doc& doc, const json& programs, Manifest* manifest) {
  Manifest& m = *manifest;
  LLCDIST_RETURN_IF_ERROR(doc.array(programs, "programs"));
  if (programs.empty()) return doc.error("programs", "a plan needs at least one program");
  const bool pipeline = m.hasFeature(sc::kPipelineFeature);
  if (!pipeline && programs.size() > 1)
    return doc.error("programs",
                     "a plan without the feature \"pipeline\" is SPMD: one program that every rank "
                     "runs, got " +
                         std::to_string(programs.size()) + " programs");
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
        return doc.error(index(key(path, "ranks"), r),
                         "rank " + std::to_string(ref.ranks[r]) + " already runs programs[" + std::to_string(o) + "]");
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
      return doc.error("programs",
                       "no program runs rank " + std::to_string(r) +
                           (m.meshCp > 1 ? " (world size dp × tp × pp × cp = " : " (world size dp × tp × pp = ") +
                           std::to_string(m.worldSize()) + ")");
  return Status::ok();
}

StatusOr<Manifest> parseManifestJson(const Doc& doc, const json& root) {
  Manifest m;
  int64_t version = 0;
  LLCDIST_RETURN_IF_ERROR(checkHeader(doc, root, sc::kPlanFormat, &version));
  LLCDIST_RETURN_IF_ERROR(doc.keys(root, "",
                                   {"format", "version", "features", "model", "batch", "mesh", "optimizer",
                                    "lr_schedule", "grad_clip", "params", "programs"}));
  const json& features = root.at("features");
  LLCDIST_RETURN_IF_ERROR(doc.array(features, "features"));
  for (size_t i = 0; i < features.size(); ++i) {
    if (!features[i].is_string())
      return doc.error(index("features", i), "expected a string, got " + planjson::describe(features[i]));
    const std::string f = features[i].get<std::string>();
    if (!oneOf(f, sc::kKnownFeatures))
      return doc.error(index("features", i),
                       "unknown feature \"" + f + "\" (this runtime knows " +
                           (sc::kKnownFeatures.empty() ? std::string("none") : listNames(sc::kKnownFeatures)) +
                           "; use a newer runtime or compile without it)");
    m.features.push_back(f);
  }

  const json& model = root.at("model");
  LLCDIST_RETURN_IF_ERROR(
      doc.keys(model, "model", {"name", "architecture", "vocab_size", "dtype"}, {"padded_vocab_size"}));
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
    return doc.error("model.dtype",
                     "unsupported dtype \"" + dtype + "\" (expected " + listNames(sc::kParamDTypeNames) + ")");
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
    return doc.error("batch.global_batch",
                     "expected micro_batch × microbatches × dp = " + std::to_string(m.microBatch) + " × " +
                         std::to_string(m.microbatches) + " × " + std::to_string(m.dataParallel) + ", got " +
                         std::to_string(m.globalBatch));

  const json& mesh = root.at("mesh");
  LLCDIST_RETURN_IF_ERROR(doc.keys(mesh, "mesh", {"dp", "tp", "pp"}, {"cp", "rank_order", "cp_layout", "ep"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "dp", &m.meshDp, 1, 1 << 24));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "tp", &m.meshTp, 1, 1 << 24));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "pp", &m.meshPp, 1, 1 << 24));
  if (mesh.contains("cp")) LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "cp", &m.meshCp, 1, sc::kMaxMeshAxisSize));
  if (m.meshDp != m.dataParallel)
    return doc.error("batch.dp",
                     "must equal mesh.dp (" + std::to_string(m.meshDp) + "), got " + std::to_string(m.dataParallel));
  // (each factor <= 2^24, so dp·tp·pp fits; the product with cp is checked stepwise)
  int64_t world = m.meshDp * m.meshTp * m.meshPp;
  if (world > sc::kMaxMeshAxisSize || mulOverflow(world, m.meshCp, &world) || world > sc::kMaxMeshAxisSize)
    return doc.error(
        "mesh", m.meshCp > 1 ? "world size dp × tp × pp × cp is too large" : "world size dp × tp × pp is too large");
  if (m.meshPp != 1 && !m.hasFeature(sc::kPipelineFeature))
    return doc.error(
        "mesh.pp", "pp > 1 needs the feature \"pipeline\" (pipeline parallelism with pp = " + std::to_string(m.meshPp) +
                       "; without it a plan is SPMD: every rank runs programs[0])");
  if (m.meshCp != 1 && !m.hasFeature(sc::kContextParallelFeature))
    return doc.error("mesh.cp", "cp > 1 needs the feature \"context_parallel\" (context parallelism with cp = " +
                                    std::to_string(m.meshCp) + ")");
  if (m.seqLen % m.meshCp != 0)
    return doc.error("batch.seq_len", "the global sequence length " + std::to_string(m.seqLen) +
                                          " must be divisible by mesh.cp = " + std::to_string(m.meshCp) +
                                          " (each cp rank holds seq_len / cp positions of every sample)");
  // mesh.ep (expert parallelism): a divisor of dp; > 1 only with the feature.
  if (mesh.contains("ep")) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "ep", &m.meshEp, 1, sc::kMaxMeshAxisSize));
    if (m.meshDp % m.meshEp != 0)
      return doc.error("mesh.ep", "ep = " + std::to_string(m.meshEp) + " does not divide mesh.dp = " +
                                      std::to_string(m.meshDp) +
                                      " (the ep groups are drawn from the data-parallel group): choose an ep that "
                                      "divides dp");
    if (m.meshEp != 1 && !m.hasFeature(sc::kExpertParallelFeature))
      return doc.error("mesh.ep", "ep > 1 needs the feature \"expert_parallel\" (expert parallelism with ep = " +
                                      std::to_string(m.meshEp) + ")");
  }
  if (mesh.contains("rank_order"))
    LLCDIST_RETURN_IF_ERROR(parseRankOrder(doc, mesh.at("rank_order"), m.meshCp, &m.rankOrder));
  LLCDIST_RETURN_IF_ERROR(parseCpLayout(doc, mesh, &m));

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
      return doc.error(index("params", i) + ".name",
                       "duplicate parameter \"" + p.name + "\" (tied weights appear once)");
    m.params.push_back(std::move(p));
  }

  LLCDIST_RETURN_IF_ERROR(parsePrograms(doc, root.at("programs"), &m));
  LLCDIST_RETURN_IF_ERROR(checkPlacements(doc, m));
  return m;
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

}  // namespace llcdist::rt
