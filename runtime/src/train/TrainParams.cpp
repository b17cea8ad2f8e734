// Parameter init (manifest or safetensors import) and export, per rank and sharding-aware. See Train.h
// for the rules and docs/plan-format.md "Sharded parameters" for the layout of a shard.
#include "TrainParts.h"

#include "llcdist/runtime/Rng.h"
#include "llcdist/runtime/Safetensors.h"

#include <cstring>
#include <set>

namespace llcdist::rt::train {
namespace {

std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// This rank's member index on p's sharding axis and that axis's size (0 and 1 when replicated).
std::pair<int64_t, int64_t> memberOf(const Manifest& m, const ParamDesc& p, int rank) {
  if (!p.sharding) return {0, 1};
  const Mesh mesh = m.mesh();
  return {mesh.coord(rank, p.sharding->axis), mesh.axisSize(p.sharding->axis)};
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
    const ParamDesc::Placement* pl = p.placementIn(int64_t(interp.programIndex()));
    if (!pl) continue;  // no copy on this rank's program (another pipeline stage holds it)
    std::vector<float> full(size_t(p.numel()));
    LLCDIST_RETURN_IF_ERROR(reader.readF32(p.name, full.data(), p.numel()));
    if (!p.sharding) {
      LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, full.data()));
      continue;
    }
    const auto [member, n] = memberOf(manifest, p, interp.rank());
    std::vector<float> local(size_t(p.localNumel()));
    forEachShardRun(p, member, n, [&](int64_t l, int64_t g, int64_t count) {
      std::memcpy(local.data() + l, full.data() + g, size_t(count) * 4);
    });
    LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, local.data()));
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

void forEachShardRun(const ParamDesc& p, int64_t member, int64_t axisSize,
                     const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (!p.sharding) {
    fn(0, 0, p.numel());
    return;
  }
  // View the global tensor as [outer, D, inner] around dim d; D = blocks · n · chunk. Local row l =
  // j·chunk + q (block j, offset q) is global row j·(n·chunk) + member·chunk + q.
  const size_t d = size_t(p.sharding->dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= p.shape[i];
  for (size_t i = d + 1; i < p.shape.size(); ++i) inner *= p.shape[i];
  const int64_t D = p.shape[d], blocks = p.sharding->blocks;
  const int64_t chunk = D / (blocks * axisSize), localD = D / axisSize;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t l = (o * localD + j * chunk) * inner;
      const int64_t g = (o * D + j * axisSize * chunk + member * chunk) * inner;
      fn(l, g, chunk * inner);
    }
}

Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom) {
  if (!initFrom.empty()) return importParams(manifest, interp, initFrom);
  for (const ParamDesc& p : manifest.params) {
    const ParamDesc::Placement* pl = p.placementIn(int64_t(interp.programIndex()));
    if (!pl) continue;  // no copy on this rank's program
    std::vector<float> v(size_t(p.localNumel()));
    const auto [member, n] = memberOf(manifest, p, interp.rank());
    switch (p.init.kind) {
      case ParamInit::Kind::kNormal:
        forEachShardRun(p, member, n, [&](int64_t l, int64_t g, int64_t count) {
          initNormal(v.data() + l, seed, p.name, g, count, float(p.init.std));
        });
        break;
      case ParamInit::Kind::kZeros: fillConstant(v.data(), p.localNumel(), 0.0f); break;
      case ParamInit::Kind::kOnes: fillConstant(v.data(), p.localNumel(), 1.0f); break;
    }
    LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, v.data()).withContext("param '" + p.name + "'"));
  }
  return Status::ok();
}

Status saveParams(const Manifest& manifest, const std::vector<Interpreter*>& ranks, const std::string& path) {
  const Mesh mesh = manifest.mesh();
  std::vector<std::vector<float>> values;
  values.reserve(manifest.params.size());
  std::vector<TensorToWrite> tensors;
  for (const ParamDesc& p : manifest.params) {
    std::vector<float> full(size_t(p.numel()));
    // The first rank seen for each member index supplies the shard; every other rank with that member
    // index must hold the same bits, whichever program (pipeline stage) holds its copy.
    std::vector<int> owner(size_t(p.sharding ? mesh.axisSize(p.sharding->axis) : 1), -1);
    std::vector<std::vector<float>> shards(owner.size());
    auto programOf = [&](size_t r) {
      return manifest.programs.size() > 1 ? " (programs[" + std::to_string(ranks[r]->programIndex()) + "])"
                                          : std::string();
    };
    for (size_t r = 0; r < ranks.size(); ++r) {
      const ParamDesc::Placement* pl = p.placementIn(int64_t(ranks[r]->programIndex()));
      if (!pl) continue;  // this rank's program holds no copy
      const auto [member, n] = memberOf(manifest, p, int(r));
      LLCDIST_ASSIGN_OR_RETURN(std::vector<float> v, ranks[r]->readF32(pl->buffer));
      if (owner[size_t(member)] < 0) {
        owner[size_t(member)] = int(r);
        forEachShardRun(p, member, n, [&](int64_t l, int64_t g, int64_t count) {
          std::memcpy(full.data() + g, v.data() + l, size_t(count) * 4);
        });
        shards[size_t(member)] = std::move(v);
        continue;
      }
      const std::vector<float>& ref = shards[size_t(member)];
      if (std::memcmp(ref.data(), v.data(), v.size() * 4) == 0) continue;
      int64_t first = 0;
      while (std::memcmp(&ref[size_t(first)], &v[size_t(first)], 4) == 0) ++first;
      int64_t global = first;
      forEachShardRun(p, member, n, [&](int64_t l, int64_t g, int64_t count) {
        if (first >= l && first < l + count) global = g + (first - l);
      });
      return Status::internal("param '" + p.name + "': rank " + std::to_string(r) + "'s copy" + programOf(r) +
                              " differs from rank " + std::to_string(owner[size_t(member)]) + "'s" +
                              programOf(size_t(owner[size_t(member)])) + " at element " + std::to_string(global) +
                              (p.sharding ? " (local element " + std::to_string(first) + " of shard " +
                                                std::to_string(member) + ")"
                                          : std::string()) +
                              ": " + std::to_string(v[size_t(first)]) + " vs " + std::to_string(ref[size_t(first)]) +
                              " (the replicas diverged: a missing or mismatched all-reduce in the plan?)");
    }
    for (size_t c = 0; c < owner.size(); ++c)
      if (owner[c] < 0)  // the loader makes every program holding the param hold all its shards
        return Status::internal("param '" + p.name + "': no rank holds shard " + std::to_string(c));
    values.push_back(std::move(full));
    tensors.push_back({p.name, DType::kF32, p.shape, values.back().data()});
  }
  return writeSafetensors(path, std::move(tensors), {{"format", "pt"}});
}

}  // namespace llcdist::rt::train
