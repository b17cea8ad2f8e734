//===- PlanWriter.cpp - plan dialect -> the runtime's plan directory ------===//
#include "llcdist/Target/Plan/PlanWriter.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include <nlohmann/json.hpp>

using namespace mlir;
using namespace llcdist;
using json = nlohmann::ordered_json;

namespace {
namespace schema = llcdist::rt::schema;

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
    for (Attribute e : arr)
      j.push_back(toJson(e));
    return j;
  }
  if (auto d = dyn_cast<DictionaryAttr>(a)) {
    json j = json::object();
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
  return "";
}

std::string dtypeName(Type t) { return t.isInteger(32) ? "i32" : "f32"; }

LogicalResult writeJson(ModuleOp module, const std::string &path, const json &j) {
  std::string err;
  auto out = openOutputFile(path, &err);
  if (!out)
    return mlir::emitError(module.getLoc(), "cannot write ") << path << ": " << err;
  out->os() << j.dump(1) << "\n";
  if (out->os().has_error())
    return mlir::emitError(module.getLoc(), "write failed: ") << path;
  out->keep();
  return success();
}
} // namespace

FailureOr<PlanSummary> llcdist::writePlanDirectory(ModuleOp module,
                                                   const std::string &dir) {
  auto programs = llvm::to_vector(module.getOps<plan::ProgramOp>());
  if (programs.size() != 1)
    return mlir::emitError(module.getLoc(), "expected one plan.program, found ")
           << programs.size() << " (run llcdist-lower-to-plan)";
  plan::ProgramOp program = programs.front();
  if (!program.getArenaBytes())
    return mlir::emitError(program.getLoc(), "buffers have no offsets (run llcdist-plan-memory)");
  auto manifestAttr = module->getAttrOfType<DictionaryAttr>(plan::kManifestAttr);
  if (!manifestAttr)
    return mlir::emitError(module.getLoc(), "no plan.manifest attribute (run llcdist-lower-to-plan)");

  PlanSummary summary;
  llvm::StringMap<int64_t> ids;
  json buffers = json::array();
  for (auto buf : program.getBody().front().getOps<plan::BufferOp>()) {
    int64_t id = ids.size();
    ids[buf.getSymName()] = id;
    auto t = buf.getTensorType();
    buffers.push_back({{"id", id},
                       {"name", buf.getName().str()},
                       {"kind", buf.getKind().str()},
                       {"dtype", dtypeName(t.getElementType())},
                       {"shape", t.getShape()},
                       {"offset", int64_t(*buf.getOffset())},
                       {"bytes", buf.getNumBytes()}});
  }
  summary.buffers = ids.size();
  summary.arenaBytes = *program.getArenaBytes();
  auto idOf = [&](Attribute a) { return ids.lookup(cast<FlatSymbolRefAttr>(a).getValue()); };

  json subroutines = json::array();
  for (auto sub : program.getBody().front().getOps<plan::SubroutineOp>()) {
    json ops = json::array();
    for (auto k : sub.getBody().front().getOps<plan::KernelOp>()) {
      json args = json::object();
      for (NamedAttribute a : k.getArgs()) {
        if (auto list = dyn_cast<ArrayAttr>(a.getValue())) {
          json l = json::array();
          for (Attribute e : list)
            l.push_back(idOf(e));
          args[a.getName().str()] = l;
        } else {
          args[a.getName().str()] = idOf(a.getValue());
        }
      }
      ops.push_back({{"op", k.getKernel().str()},
                     {"args", args},
                     {"attrs", toJson(k.getParams())},
                     {"loc", provenance(k.getLoc())}});
      ++summary.kernels;
    }
    subroutines.push_back({{"name", sub.getSymName().str()}, {"ops", ops}});
  }

  json actions = json::array();
  for (auto sched : program.getBody().front().getOps<plan::ScheduleOp>())
    for (auto a : sched.getBody().front().getOps<plan::ActionOp>()) {
      json j = {{"subroutine", a.getSubroutine().str()}};
      if (auto mb = a.getMicrobatch())
        j["microbatch"] = int64_t(*mb);
      actions.push_back(j);
    }

  json params = json::array();
  for (auto p : program.getBody().front().getOps<plan::ParamOp>()) {
    auto value = program.lookupSymbol<plan::BufferOp>(p.getValue());
    // A split parameter: the manifest holds its global (Hugging Face) shape
    // and how it is split; its buffers hold this rank's shard.
    json sharding;
    std::vector<int64_t> shape(value.getTensorType().getShape());
    if (auto sh = p->getAttrOfType<DictionaryAttr>("sharding")) {
      auto global = sh.getAs<DenseI64ArrayAttr>("global_shape");
      shape.assign(global.asArrayRef().begin(), global.asArrayRef().end());
      sharding = {{"axis", sh.getAs<StringAttr>("axis").str()},
                  {"dim", sh.getAs<IntegerAttr>("dim").getInt()},
                  {"blocks", sh.getAs<IntegerAttr>("blocks").getInt()}};
    }
    params.push_back({{"name", p.getName().str()},
                      {"shape", shape},
                      {"dtype", "f32"},
                      {"buffer", ids.lookup(p.getValue())},
                      {"grad", ids.lookup(p.getGrad())},
                      {"init", toJson(p.getInit())},
                      {"weight_decay", p.getWeightDecay()}});
    if (!sharding.is_null())
      params.back()["sharding"] = sharding;
    ++summary.params;
  }

  json manifest = {{"format", std::string(schema::kPlanFormat)},
                   {"version", schema::kPlanVersion},
                   {"features", json::array()}};
  for (NamedAttribute n : manifestAttr)
    manifest[n.getName().str()] = toJson(n.getValue());
  manifest["params"] = params;
  // SPMD: every rank runs program 0 (pipeline stages bring more programs).
  int64_t world = 1;
  for (const char *axis : {"dp", "tp", "pp"})
    world *= manifest["mesh"].value(axis, int64_t(1));
  json ranks = json::array();
  for (int64_t r = 0; r < world; ++r)
    ranks.push_back(r);
  manifest["programs"] = json::array({{{"file", "program-0.json"}, {"ranks", ranks}}});

  json programJson = {{"format", std::string(schema::kProgramFormat)},
                      {"version", schema::kPlanVersion},
                      {"arena_bytes", summary.arenaBytes},
                      {"buffers", buffers},
                      {"subroutines", subroutines},
                      {"actions", actions}};

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
  if (failed(writeJson(module, (tmpDir + "/manifest.json").str(), manifest)) ||
      failed(writeJson(module, (tmpDir + "/program-0.json").str(), programJson))) {
    cleanup();
    return failure();
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
  return summary;
}
