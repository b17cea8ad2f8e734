// Plan directory loading: program-N.json into Program (buffers, subroutines, actions, queues, tokens),
// validated against the manifest (PlanManifest.cpp), and the directory as a whole. See Plan.h and
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

// program "slot_deltas": the instance offsets of slotted buffers relative to instance 0's, one row per
// pattern (docs/plan-format.md "Microbatch slots"): at least 2 integers each, the first 0, each within
// ±arena_bytes (a delta that large places the instance outside the arena whatever the offset).
Status parseSlotDeltas(const Doc& doc, const json& v, int64_t arenaBytes, std::vector<std::vector<int64_t>>* out) {
  LLCDIST_RETURN_IF_ERROR(doc.array(v, "slot_deltas"));
  if (v.empty())
    return doc.error("slot_deltas", "expected at least one row (leave the key out when no buffer has slots)");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = index("slot_deltas", i);
    LLCDIST_RETURN_IF_ERROR(doc.array(v[i], path));
    if (v[i].size() < 2) return doc.error(path, "expected at least 2 instances, got " + std::to_string(v[i].size()));
    std::vector<int64_t>& row = out->emplace_back(v[i].size());
    for (size_t k = 0; k < v[i].size(); ++k)
      LLCDIST_RETURN_IF_ERROR(doc.integerValue(v[i][k], index(path, k), &row[k], -arenaBytes, arenaBytes));
    if (row[0] != 0)
      return doc.error(index(path, 0),
                       "expected 0 (instance 0 is at the buffer's offset), got " + std::to_string(row[0]));
  }
  return Status::ok();
}

Status parseBuffer(const Doc& doc, const json& b, const std::string& path, size_t i, int64_t arenaBytes,
                   const std::vector<std::vector<int64_t>>& slotDeltas, BufferDesc* out) {
  LLCDIST_RETURN_IF_ERROR(
      doc.keys(b, path, {"id", "name", "kind", "dtype", "shape", "offset", "bytes"}, {"slot_offsets", "slot_delta"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "id", &out->id));
  if (out->id != int64_t(i))
    return doc.error(key(path, "id"),
                     "expected " + std::to_string(i) + " (buffers[i].id must be i), got " + std::to_string(out->id));
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "name", &out->name));
  if (out->name.empty()) return doc.error(key(path, "name"), "empty buffer name");
  std::string s;
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "kind", &s));
  auto kind = sc::parseBufferKind(s);
  if (!kind)
    return doc.error(key(path, "kind"),
                     "unknown buffer kind \"" + s + "\" (expected " + listNames(sc::kBufferKindNames) + ")");
  out->kind = *kind;
  LLCDIST_RETURN_IF_ERROR(doc.string(b, path, "dtype", &s));
  auto dt = sc::parseElemType(s);
  if (!dt)
    return doc.error(key(path, "dtype"),
                     "unknown dtype \"" + s + "\" (expected " + listNames(sc::kElemTypeNames) + ")");
  out->dtype = *dt;
  LLCDIST_RETURN_IF_ERROR(readShape(doc, b, path, &out->shape));
  int64_t n = 0, expect = 0;
  LLCDIST_RETURN_IF_ERROR(numelOf(doc, path, out->shape, &n));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "offset", &out->offset, 0));
  LLCDIST_RETURN_IF_ERROR(doc.integer(b, path, "bytes", &out->bytes, 0));
  const int64_t size = sc::elemTypeSize(out->dtype);
  const bool overflow = mulOverflow(n, size, &expect);  // (n × size itself would be UB to print)
  if (overflow || expect != out->bytes)
    return doc.error(key(path, "bytes"), "expected product(shape) × sizeof(" +
                                             std::string(sc::elemTypeName(out->dtype)) + ") = " + std::to_string(n) +
                                             " × " + std::to_string(size) + " = " +
                                             (overflow ? std::string("(overflow)") : std::to_string(expect)) +
                                             ", got " + std::to_string(out->bytes));
  if (out->offset % sc::kArenaAlignment != 0)
    return doc.error(key(path, "offset"), "offset " + std::to_string(out->offset) + " is not a multiple of " +
                                              std::to_string(sc::kArenaAlignment) + " (the arena alignment)");
  if (out->offset > arenaBytes || out->bytes > arenaBytes - out->offset)
    return doc.error(path, "buffer \"" + out->name + "\" [" + std::to_string(out->offset) + ", " +
                               std::to_string(out->offset + out->bytes) +
                               ") extends past arena_bytes = " + std::to_string(arenaBytes));
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
  auto where = [&](size_t k) { return explicitOffsets ? index(sp, k) : sp; };
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
  if (!v.is_array() || v.empty())
    return doc.error("queues", "expected a non-empty array of queue names, got " + planjson::describe(v));
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
                                                   : "wait before start: " + t + " is not in flight") +
                               at(a));
        inFlight.erase(it);
        waited.insert(op.token);
        continue;
      }
      if (it != inFlight.end())
        return doc.error(key(opPath(s, i), "token"), t + " is started again before its wait (it is in flight from " +
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
  LLCDIST_RETURN_IF_ERROR(doc.keys(root, "", {"format", "version", "arena_bytes", "buffers", "subroutines", "actions"},
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
      return doc.error(
          path, "the reserved buffer name \"" + b.name + "\" needs kind \"metric\", dtype \"f32\" and one element");
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
      return doc.error(path,
                       "subroutine \"" + name + "\" contains load_microbatch, so the action needs a \"microbatch\"");
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
    const std::string prefix = "params[" + std::to_string(i) + "]." +
                               (p.legacyBufferGrad ? std::string() : "placements[" + std::to_string(k) + "].");
    auto err = [&](size_t, const char* field, const std::string& msg) {
      return Status::invalidArgument(prefix + field + ": " + msg);
    };
    for (const char* field : {"buffer", "grad"}) {
      const bool isGrad = field[0] == 'g';
      const int64_t id = isGrad ? pl.grad : pl.buffer;
      const auto want = isGrad ? sc::BufferKind::kGrad : sc::BufferKind::kParam;
      if (id >= int64_t(program.buffers.size()))
        return err(i, field,
                   "buffer id " + std::to_string(id) + " is out of range (" + program.file + " has " +
                       std::to_string(program.buffers.size()) + " buffers)");
      const BufferDesc& b = program.buffers[size_t(id)];
      if (b.kind != want)
        return err(i, field,
                   "buffer " + std::to_string(id) + " (\"" + b.name + "\") has kind \"" +
                       std::string(sc::bufferKindName(b.kind)) + "\", expected \"" +
                       std::string(sc::bufferKindName(want)) + "\"");
      // The value buffer has the param's dtype; the gradient any float dtype (e.g. an f32 gradient of a
      // bf16 param, or a bf16 gradient of an f32 master param).
      if (!isGrad && b.dtype != p.dtype)
        return err(i, field,
                   "buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                       std::string(sc::elemTypeName(b.dtype)) + " but parameter \"" + p.name + "\" has dtype \"" +
                       std::string(sc::elemTypeName(p.dtype)) + "\"");
      if (isGrad && !sc::isFloatType(b.dtype))
        return err(i, field,
                   "buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                       std::string(sc::elemTypeName(b.dtype)) + "; a gradient must be f32 or bf16");
      const std::vector<int64_t>& wantShape = isGrad ? p.gradShape() : p.bufferShape();
      if (b.shape != wantShape) {
        auto str = shapeString;
        if (p.zero) {
          const bool block = isGrad ? p.gradHoldsBlock() : p.bufferHoldsBlock();
          const std::string local = p.sharding
                                        ? "the local shard of parameter \"" + p.name + "\" (shape " + str(p.shape) +
                                              ", sharded on " + std::string(meshAxisName(p.sharding->axis)) + " dim " +
                                              std::to_string(p.sharding->dim) + ")"
                                        : "parameter \"" + p.name + "\"";
          return err(i, field,
                     "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                         " but under ZeRO stage " + std::to_string(p.zero->stage) + " the " +
                         (isGrad ? "gradient" : "value buffer") + " holds " +
                         (block ? "this rank's block of " + local + ": shape " + str(wantShape) +
                                      " (dim 0 divided by " + axisSetName(p.zero->axis) + ")"
                                : "the whole of " + local + ": shape " + str(wantShape)));
        }
        if (p.sharding)
          return err(i, field,
                     "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                         " but the local shard of parameter \"" + p.name + "\" (shape " + str(p.shape) +
                         ", sharded on " + std::string(meshAxisName(p.sharding->axis)) + " dim " +
                         std::to_string(p.sharding->dim) + ") has shape " + str(p.localShape));
        return err(i, field,
                   "buffer " + std::to_string(id) + " (\"" + b.name + "\") has shape " + str(b.shape) +
                       " but parameter \"" + p.name + "\" has shape " + str(p.shape));
      }
      if (used[size_t(id)] >= 0)
        return err(
            i, field,
            "buffer " + std::to_string(id) + " is already used by params[" + std::to_string(used[size_t(id)]) + "]");
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
