//===- PlanWriter.cpp - plan dialect -> the runtime's plan directory ------===//
#include "llcdist/Target/Plan/PlanWriter.h"
#include "llcdist/Target/Plan/JsonText.h"
#include "llcdist/Dialect/XF/IR/ConfigLoc.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

using namespace mlir;
using namespace llcdist;
using json = nlohmann::ordered_json;

namespace {
namespace schema = llcdist::rt::schema;
namespace rt = llcdist::rt;

/// An empty object with room for `n` members. An ordered_json object is a
/// vector of pair<const string, json>, which cannot be moved without a
/// possible throw, so growing it copies every member, subtrees and all: a
/// program's top level would copy its buffers and subroutines.
json objectWithRoom(size_t n) {
  json j = json::object();
  j.get_ref<json::object_t &>().reserve(n);
  return j;
}

json toJson(Attribute a) {
  if (auto b = dyn_cast<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(a))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(a))
    return s.str();
  if (auto arr = dyn_cast<ArrayAttr>(a)) {
    json j = json::array();
    j.get_ref<json::array_t &>().reserve(arr.size());
    for (Attribute e : arr)
      j.push_back(toJson(e));
    return j;
  }
  if (auto d = dyn_cast<DictionaryAttr>(a)) {
    json j = objectWithRoom(d.size());
    for (NamedAttribute n : d)
      j[n.getName().str()] = toJson(n.getValue());
    return j;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  a.print(os);
  return s;
}

std::string provenance(Location loc) {
  if (auto n = dyn_cast<NameLoc>(loc)) {
    std::string inner = provenance(n.getChildLoc());
    return n.getName().str() + (inner.empty() ? "" : " @ " + inner);
  }
  if (auto f = dyn_cast<FileLineColLoc>(loc))
    return (f.getFilename().str() + ":" + std::to_string(f.getLine()) + ":" +
            std::to_string(f.getColumn()));
  // The config fields an op came from (xf/IR/ConfigLoc.h) are for
  // diagnostics: provenance is the location beside them.
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && xf::configFused(fused))
    for (Location l : fused.getLocations())
      if (!xf::isConfigField(l))
        return provenance(l);
  return "";
}

std::string dtypeName(Type t) {
  return t.isInteger(32) ? "i32" : t.isBF16() ? "bf16" : t.isF64() ? "f64" : "f32";
}

LogicalResult writeJson(ModuleOp module, const std::string &path, const json &j) {
  std::string err;
  auto out = openOutputFile(path, &err);
  if (!out)
    return mlir::emitError(module.getLoc(), "cannot write ") << path << ": " << err;
  // A program file is megabytes: written in large pieces, not a system call
  // per file-system block (the stream's default buffer).
  out->os().SetBufferSize(1 << 20);
  writeJsonText(out->os(), j);
  out->os() << "\n";
  if (out->os().has_error())
    return mlir::emitError(module.getLoc(), "write failed: ") << path;
  out->keep();
  return success();
}

/// One program's JSON; fills `summary` and `paramIds` (param name -> buffer
/// and grad ids in this program).
json programJson(plan::ProgramOp program, PlanSummary &summary,
                 std::map<std::string, std::pair<int64_t, int64_t>> &paramIds) {
  llvm::StringMap<int64_t> ids;
  json buffers = json::array();
  // Slotted buffers' instance offsets relative to instance 0's, one row per
  // distinct pattern (a chunk's slot block has one; docs/plan-format.md).
  std::map<std::vector<int64_t>, int64_t> rowOf;
  json slotDeltas = json::array();
  for (auto buf : program.getBody().front().getOps<plan::BufferOp>()) {
    int64_t id = ids.size();
    ids[buf.getSymName()] = id;
    auto t = buf.getTensorType();
    json entry = objectWithRoom(8);
    entry["id"] = id;
    entry["name"] = buf.getName().str();
    entry["kind"] = buf.getKind().str();
    entry["dtype"] = dtypeName(t.getElementType());
    entry["shape"] = t.getShape();
    entry["offset"] = int64_t(*buf.getOffset());
    entry["bytes"] = buf.getNumBytes();
    if (auto slots = buf->getAttrOfType<DenseI64ArrayAttr>(plan::kSlotOffsetsAttr)) {
      std::vector<int64_t> deltas;
      for (int64_t o : slots.asArrayRef())
        deltas.push_back(o - slots[0]);
      auto [it, fresh] = rowOf.try_emplace(deltas, int64_t(rowOf.size()));
      if (fresh)
        slotDeltas.push_back(deltas);
      entry["slot_delta"] = it->second;
    }
    buffers.push_back(std::move(entry));
  }
  summary.buffers += ids.size();
  summary.arenaBytes = std::max<int64_t>(summary.arenaBytes, *program.getArenaBytes());
  summary.arenaBytesPerProgram.push_back(*program.getArenaBytes());
  auto idOf = [&](Attribute a) { return ids.lookup(cast<FlatSymbolRefAttr>(a).getValue()); };

  json subroutines = json::array();
  for (auto sub : program.getBody().front().getOps<plan::SubroutineOp>()) {
    json ops = json::array();
    for (auto k : sub.getBody().front().getOps<plan::KernelOp>()) {
      json args = objectWithRoom(k.getArgs().size());
      for (NamedAttribute a : k.getArgs()) {
        if (auto list = dyn_cast<ArrayAttr>(a.getValue())) {
          json l = json::array();
          for (Attribute e : list)
            l.push_back(idOf(e));
          args[a.getName().str()] = std::move(l);
        } else {
          args[a.getName().str()] = idOf(a.getValue());
        }
      }
      // Built in place and moved: a braced list would copy every subtree.
      json op = objectWithRoom(6); // op, args, attrs, loc, queue, token
      op["op"] = k.getKernel().str();
      auto token = k->getAttrOfType<IntegerAttr>(plan::kTokenAttr);
      auto queue = k->getAttrOfType<StringAttr>(plan::kQueueAttr);
      if (k.getKernel() == plan::kWaitKernel) {
        // {"op": "wait", "token": T}: no args, no attrs.
        summary.async = true;
        op["token"] = token.getInt();
        if (queue)
          op["queue"] = queue.str();
        if (std::string loc = provenance(k.getLoc()); !loc.empty())
          op["loc"] = std::move(loc);
        ops.push_back(std::move(op));
        ++summary.kernels;
        continue;
      }
      op["args"] = std::move(args);
      op["attrs"] = toJson(k.getParams());
      op["loc"] = provenance(k.getLoc());
      if (queue) {
        summary.async = true;
        op["queue"] = queue.str();
      }
      if (token) {
        summary.async = true;
        op["token"] = token.getInt();
      }
      ops.push_back(std::move(op));
      ++summary.kernels;
    }
    json entry = objectWithRoom(2);
    entry["name"] = sub.getSymName().str();
    entry["ops"] = std::move(ops);
    subroutines.push_back(std::move(entry));
  }

  json actions = json::array();
  llvm::StringMap<int64_t> opsOf; // subroutine -> its ops
  for (auto sub : program.getBody().front().getOps<plan::SubroutineOp>())
    opsOf[sub.getSymName()] = int64_t(llvm::range_size(sub.getBody().front().getOps<plan::KernelOp>()));
  int64_t opsPerStep = 0;
  for (auto sched : program.getBody().front().getOps<plan::ScheduleOp>())
    for (auto a : sched.getBody().front().getOps<plan::ActionOp>()) {
      opsPerStep += opsOf.lookup(a.getSubroutine());
      json j = objectWithRoom(3);
      j["subroutine"] = a.getSubroutine().str();
      if (auto mb = a.getMicrobatch())
        j["microbatch"] = int64_t(*mb);
      if (auto slot = a->getAttrOfType<IntegerAttr>(plan::kSlotAttr))
        j["slot"] = slot.getInt();
      actions.push_back(std::move(j));
    }
  summary.opsPerStepPerProgram.push_back(opsPerStep);
  for (auto p : program.getBody().front().getOps<plan::ParamOp>())
    paramIds[p.getName().str()] = {ids.lookup(p.getValue()), ids.lookup(p.getGrad())};
  json out = objectWithRoom(8);
  out["format"] = std::string(schema::kProgramFormat);
  out["version"] = schema::kPlanVersion;
  out["arena_bytes"] = *program.getArenaBytes();
  if (auto queues = program->getAttrOfType<ArrayAttr>(plan::kQueuesAttr)) {
    summary.async = true;
    out["queues"] = toJson(queues);
  }
  if (!slotDeltas.empty())
    out["slot_deltas"] = std::move(slotDeltas);
  out["buffers"] = std::move(buffers);
  out["subroutines"] = std::move(subroutines);
  out["actions"] = std::move(actions);
  return out;
}

/// The param entry of the manifest (global shape, init, sharding) from the
/// program that updates it (or the first that holds it).
json paramJson(SymbolTable &symbols, plan::ParamOp p) {
  auto value = symbols.lookup<plan::BufferOp>(p.getValue());
  // A split parameter: the manifest holds its global (Hugging Face) shape
  // and how it is split; its buffers hold this rank's shard.
  json sharding;
  std::vector<int64_t> shape(value.getTensorType().getShape());
  if (auto local = p->getAttrOfType<DenseI64ArrayAttr>("local_shape"))
    shape.assign(local.asArrayRef().begin(), local.asArrayRef().end());
  if (auto sh = p->getAttrOfType<DictionaryAttr>("sharding")) {
    auto global = sh.getAs<DenseI64ArrayAttr>("global_shape");
    shape.assign(global.asArrayRef().begin(), global.asArrayRef().end());
    sharding = {{"axis", sh.getAs<StringAttr>("axis").str()},
                {"dim", sh.getAs<IntegerAttr>("dim").getInt()},
                {"blocks", sh.getAs<IntegerAttr>("blocks").getInt()}};
    if (auto r = sh.getAs<IntegerAttr>("replicas")) // kv-head replication
      sharding["replicas"] = r.getInt();
  }
  json j = {{"name", p.getName().str()},
            {"shape", shape},
            {"dtype", dtypeName(value.getTensorType().getElementType())},
            {"init", toJson(p.getInit())},
            {"weight_decay", p.getWeightDecay()}};
  if (!sharding.is_null())
    j["sharding"] = sharding;
  if (p->hasAttr("vocab_padded"))
    j["vocab_padded"] = true;
  if (auto z = p->getAttrOfType<DictionaryAttr>("zero"))
  {
    j["zero"] = {{"axis", z.getAs<StringAttr>("axis").str()},
                 {"stage", z.getAs<IntegerAttr>("stage").getInt()}};
    if (auto vb = z.getAs<BoolAttr>("value_block"))
      j["zero"]["value_block"] = vb.getValue();
    if (auto rows = z.getAs<IntegerAttr>("block_rows")) // padded blocks
      j["zero"]["block_rows"] = rows.getInt();
  }
  return j;
}
} // namespace

FailureOr<PlanJson> llcdist::buildPlanJson(ModuleOp module) {
  auto programs = llvm::to_vector(module.getOps<plan::ProgramOp>());
  if (programs.empty())
    return mlir::emitError(module.getLoc(), "no plan.program (run llcdist-lower-to-plan)");
  for (auto program : programs)
    if (!program.getArenaBytes())
      return mlir::emitError(program.getLoc(),
                             "buffers have no offsets (run llcdist-plan-memory)");
  auto manifestAttr = module->getAttrOfType<DictionaryAttr>(plan::kManifestAttr);
  if (!manifestAttr)
    return mlir::emitError(module.getLoc(), "no plan.manifest attribute (run llcdist-lower-to-plan)");

  PlanJson out;
  json manifest = {{"format", std::string(schema::kPlanFormat)},
                   {"version", schema::kPlanVersion},
                   {"features", json::array()}};
  for (NamedAttribute n : manifestAttr)
    manifest[n.getName().str()] = toJson(n.getValue());
  // The runtime's mesh: rank <-> coordinates (docs/plan-format.md "Multi-rank plans").
  const json &meshJson = manifest["mesh"];
  rt::Mesh mesh = rt::Mesh::make(meshJson.value("dp", int64_t(1)), meshJson.value("tp", int64_t(1)),
                                 meshJson.value("pp", int64_t(1)), meshJson.value("cp", int64_t(1)));
  mesh.ep = meshJson.value("ep", int64_t(1));
  if (meshJson.contains("rank_order")) {
    // Three names (a mesh without cp) leave cp, of size 1, slowest.
    std::vector<rt::MeshAxis> order;
    for (const std::string &name : meshJson["rank_order"].get<std::vector<std::string>>())
      if (auto axis = rt::parseMeshAxis(name))
        order.push_back(*axis);
    if (!mesh.setOrder(order))
      return mlir::emitError(module.getLoc(), "the manifest's mesh.rank_order is not a permutation of the mesh's axes");
  }
  const int64_t world = mesh.worldSize(), pp = mesh.axisSize(rt::MeshAxis::kPp);
  bool pipeline = pp > 1;
  if (pipeline)
    manifest["features"].push_back("pipeline");
  if (mesh.axisSize(rt::MeshAxis::kCp) > 1)
    manifest["features"].push_back(std::string(schema::kContextParallelFeature));
  if (mesh.ep > 1)
    manifest["features"].push_back(std::string(schema::kExpertParallelFeature));
  if (!pipeline && programs.size() != 1)
    return mlir::emitError(module.getLoc(), "expected one plan.program without a "
                                            "pipeline, found ")
           << programs.size();
  if (pipeline && int64_t(programs.size()) != pp)
    return mlir::emitError(module.getLoc(), "expected one plan.program per pipeline "
                                            "stage (")
           << pp << "), found " << programs.size();

  json params = json::array();
  std::map<std::string, size_t> paramIndex;
  json programList = json::array();
  for (auto [i, program] : llvm::enumerate(programs)) {
    std::map<std::string, std::pair<int64_t, int64_t>> ids;
    out.programs.push_back(programJson(program, out.summary, ids));
    json ranks = json::array();
    for (int64_t r = 0; r < world; ++r)
      if (!pipeline || mesh.coord(r, rt::MeshAxis::kPp) == int64_t(i))
        ranks.push_back(r);
    json entry = objectWithRoom(3);
    entry["file"] = "program-" + std::to_string(i) + ".json";
    entry["ranks"] = std::move(ranks);
    if (pipeline)
      entry["stage"] = int64_t(i);
    programList.push_back(std::move(entry));
    SymbolTable symbols(program); // one lookup per param: O(1), not a walk of the buffers
    for (auto p : program.getBody().front().getOps<plan::ParamOp>()) {
      std::string name = p.getName().str();
      auto [it, inserted] = paramIndex.try_emplace(name, params.size());
      if (inserted) {
        params.push_back(paramJson(symbols, p));
        ++out.summary.params;
      }
      auto [buffer, grad] = ids[name];
      if (pipeline) {
        params[it->second]["placements"].push_back(
            {{"program", int64_t(i)}, {"buffer", buffer}, {"grad", grad}});
      } else {
        params[it->second]["buffer"] = buffer;
        params[it->second]["grad"] = grad;
      }
    }
  }
  for (const auto &p : params)
    if (p.contains("zero")) {
      manifest["features"].push_back("zero");
      break;
    }
  if (manifest["model"].contains("padded_vocab_size"))
    manifest["features"].push_back(std::string(schema::kVocabPaddingFeature));
  if (out.summary.async)
    manifest["features"].push_back(plan::kAsyncFeature);
  manifest["params"] = std::move(params);
  manifest["programs"] = std::move(programList);
  out.manifest = std::move(manifest);
  return out;
}

FailureOr<PlanSummary>
llcdist::writePlanDirectory(ModuleOp module, const std::string &dir,
                            const std::map<std::string, std::string> &extraFiles) {
  FailureOr<PlanJson> plan = buildPlanJson(module);
  if (failed(plan))
    return failure();
  return writePlanDirectory(module, *plan, dir, extraFiles);
}

FailureOr<PlanSummary>
llcdist::writePlanDirectory(ModuleOp module, const PlanJson &files, const std::string &dir,
                            const std::map<std::string, std::string> &extraFiles) {
  const PlanJson *plan = &files;
  // Write beside the target, then move into place.
  namespace fs = llvm::sys::fs;
  if (fs::exists(dir)) {
    bool isDir = fs::is_directory(dir);
    std::error_code ec;
    bool empty = isDir && fs::directory_iterator(dir, ec) == fs::directory_iterator();
    if (!isDir || (!empty && !fs::exists(dir + "/manifest.json")))
      return mlir::emitError(module.getLoc(), "refusing to overwrite ")
             << dir << ": it exists and is not a plan directory; choose another -o";
  }
  llvm::SmallString<256> parent(dir);
  llvm::sys::path::remove_filename(parent);
  if (!parent.empty())
    if (std::error_code ec = fs::create_directories(parent))
      return mlir::emitError(module.getLoc(), "cannot create ")
             << parent << ": " << ec.message();
  llvm::SmallString<256> tmp(dir);
  while (!tmp.empty() && tmp.back() == '/')
    tmp.pop_back();
  tmp += ".tmp-%%%%%%";
  llvm::SmallString<256> tmpDir;
  std::error_code ec;
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::createUniquePath(tmp, tmpDir, /*MakeAbsolute=*/false);
    ec = fs::create_directory(tmpDir, /*IgnoreExisting=*/false);
    if (ec != std::errc::file_exists)
      break;
  }
  if (ec)
    return mlir::emitError(module.getLoc(), "cannot create a directory beside ")
           << dir << ": " << ec.message();
  auto cleanup = [&] { (void)fs::remove_directories(tmpDir); };
  if (failed(writeJson(module, (tmpDir + "/manifest.json").str(), plan->manifest))) {
    cleanup();
    return failure();
  }
  for (auto [i, program] : llvm::enumerate(plan->programs))
    if (failed(writeJson(module, (tmpDir + "/program-" + std::to_string(i) + ".json").str(),
                         program))) {
      cleanup();
      return failure();
    }
  for (const auto &[name, text] : extraFiles) {
    std::string err;
    auto f = openOutputFile((tmpDir + "/" + name).str(), &err);
    if (!f || (f->os() << text, f->os().has_error())) {
      cleanup();
      return mlir::emitError(module.getLoc(), "cannot write ") << name << ": " << err;
    }
    f->keep();
  }
  if (fs::exists(dir))
    if ((ec = fs::remove_directories(dir))) {
      cleanup();
      return mlir::emitError(module.getLoc(), "cannot replace ") << dir << ": " << ec.message();
    }
  if ((ec = fs::rename(tmpDir, dir))) {
    cleanup();
    return mlir::emitError(module.getLoc(), "cannot move the plan into ") << dir << ": " << ec.message();
  }
  return plan->summary;
}
