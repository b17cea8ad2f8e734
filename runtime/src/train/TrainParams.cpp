// Parameter init (manifest or safetensors import) and export. See Train.h for the rules.
#include "TrainParts.h"

#include "llcdist/runtime/Rng.h"
#include "llcdist/runtime/Safetensors.h"

#include <set>

namespace llcdist::rt::train {
namespace {

std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Status importParams(const Manifest& manifest, Interpreter& interp, const std::string& path) {
  LLCDIST_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(path));
  auto fileErr = [&](Status s) { return std::move(s).withContext("--init-from file '" + path + "'"); };
  std::set<std::string> names;
  for (const ParamDesc& p : manifest.params) {
    names.insert(p.name);
    const TensorInfo* t = reader.find(p.name);
    if (!t)
      return fileErr(Status::notFound("tensor '" + p.name + "' (parameter of shape " + shapeStr(p.shape) +
                                      ") is missing from the file"));
    if (t->shape != p.shape)
      return fileErr(Status::invalidArgument("tensor '" + p.name + "' has shape " + shapeStr(t->shape) +
                                             " but the plan's parameter has shape " + shapeStr(p.shape)));
    std::vector<float> v(size_t(p.numel()));
    LLCDIST_RETURN_IF_ERROR(reader.readF32(p.name, v.data(), p.numel()));
    LLCDIST_RETURN_IF_ERROR(interp.writeBuffer(p.buffer, v.data()));
  }
  std::string extra;
  int64_t numExtra = 0;
  for (const TensorInfo& t : reader.tensors())
    if (!names.count(t.name) && numExtra++ < 5) extra += (extra.empty() ? "'" : ", '") + t.name + "'";
  if (numExtra > 0)
    return fileErr(Status::invalidArgument(std::to_string(numExtra) + " tensor(s) are not parameters of the plan: " +
                                           extra + (numExtra > 5 ? ", ..." : "") +
                                           " (wrong model or plan? tied weights are stored once)"));
  return Status::ok();
}

}  // namespace

Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom) {
  if (!initFrom.empty()) return importParams(manifest, interp, initFrom);
  for (const ParamDesc& p : manifest.params) {
    std::vector<float> v(size_t(p.numel()));
    switch (p.init.kind) {
      case ParamInit::Kind::kNormal: initNormal(v.data(), seed, p.name, 0, p.numel(), float(p.init.std)); break;
      case ParamInit::Kind::kZeros: fillConstant(v.data(), p.numel(), 0.0f); break;
      case ParamInit::Kind::kOnes: fillConstant(v.data(), p.numel(), 1.0f); break;
    }
    LLCDIST_RETURN_IF_ERROR(interp.writeBuffer(p.buffer, v.data()).withContext("param '" + p.name + "'"));
  }
  return Status::ok();
}

Status saveParams(const Manifest& manifest, Interpreter& interp, const std::string& path) {
  std::vector<std::vector<float>> values;
  values.reserve(manifest.params.size());
  std::vector<TensorToWrite> tensors;
  for (const ParamDesc& p : manifest.params) {
    LLCDIST_ASSIGN_OR_RETURN(std::vector<float> v, interp.readF32(p.buffer));
    values.push_back(std::move(v));
    tensors.push_back({p.name, DType::kF32, p.shape, values.back().data()});
  }
  return writeSafetensors(path, std::move(tensors), {{"format", "pt"}});
}

}  // namespace llcdist::rt::train
