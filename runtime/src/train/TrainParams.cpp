// Parameter init (manifest or safetensors import) and export, per rank and sharding-aware. See Train.h
// for the rules and docs/plan-format.md "Sharded parameters" for the layout of a shard.
#include "TrainParts.h"

#include "llcdist/runtime/Rng.h"
#include "llcdist/runtime/Safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace llcdist::rt::train {

std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<FileTensor> fileTensorsOf(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t at = name.find("{e}");
  if (at == std::string::npos || shape.size() < 2) return {{name, shape, 0, numel}};
  const std::vector<int64_t> each(shape.begin() + 1, shape.end());
  const int64_t per = numel / shape[0];
  std::vector<FileTensor> out;
  for (int64_t e = 0; e < shape[0]; ++e) {
    std::string n = name;
    n.replace(at, 3, std::to_string(e));
    out.push_back({std::move(n), each, e * per, per});
  }
  return out;
}

namespace {

// What a rank's value buffer of param p holds: its shard index on p's sharding axis and the number of
// shards (its member index and the axis size, each divided by the sharding's replicas; 0 and 1 when
// replicated), and under ZeRO stage 3 its block (its coordinate on the zero axis) of
// that many blocks (0 of 1 otherwise: stages 1 and 2 keep the whole local tensor in the value buffer).
struct Holding {
  int64_t member = 0, members = 1;
  int64_t block = 0, blocks = 1;
  // The replica class: ranks with the same key hold the same elements and must agree bitwise.
  int64_t key() const { return member * blocks + block; }
};

Holding holdingOf(const Manifest& m, const ParamDesc& p, int rank) {
  const Mesh mesh = m.mesh();
  Holding h;
  if (p.sharding) {
    h.member = mesh.coord(rank, p.sharding->axis) / p.sharding->replicas;
    h.members = mesh.axisSize(p.sharding->axis) / p.sharding->replicas;
  }
  if (p.bufferHoldsBlock()) {
    h.block = mesh.coord(rank, p.zero->axis);
    h.blocks = mesh.axisSize(p.zero->axis);
  }
  return h;
}

void forEachHeld(const ParamDesc& p, const Holding& h, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  forEachHeldRun(p, h.member, h.members, h.block, h.blocks, fn);
}


Status importParams(const Manifest& manifest, Interpreter& interp, const std::string& path) {
  LLCDIST_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(path));
  auto fileErr = [&](Status s) { return std::move(s).withContext("--init-from file '" + path + "'"); };
  std::set<std::string> names;
  for (const ParamDesc& p : manifest.params) {
    const std::vector<FileTensor> files = fileTensorsOf(p.name, p.fileShape);
    for (const FileTensor& f : files) {
      names.insert(f.name);
      const TensorInfo* t = reader.find(f.name);
      if (!t)
        return fileErr(Status::notFound("tensor '" + f.name + "' (parameter of shape " + shapeStr(f.shape) +
                                        ") is missing from the file"));
      if (t->shape != f.shape)
        return fileErr(Status::invalidArgument(
            "tensor '" + f.name + "' has shape " + shapeStr(t->shape) + " but the plan's parameter has shape " +
            shapeStr(f.shape) +
            (p.vocabPadded ? " (the real vocabulary of " + std::to_string(manifest.vocabSize) +
                                 " rows; the plan pads it to " + std::to_string(manifest.paddedVocabSize) + ")"
                           : std::string())));
    }
    const ParamDesc::Placement* pl = p.placementIn(int64_t(interp.programIndex()));
    if (!pl) continue;  // no copy on this rank's program (another pipeline stage holds it)
    // The file holds the real rows (the global tensor's first fileNumel elements); padding rows are zero.
    std::vector<float> full(size_t(p.numel()), 0.0f);
    for (const FileTensor& f : files) LLCDIST_RETURN_IF_ERROR(reader.readF32(f.name, full.data() + f.offset, f.numel));
    if (!p.sharding && !p.bufferHoldsBlock()) {
      LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, full.data()));
      continue;
    }
    // The rank's shard, or under ZeRO stage 3 its block of the shard.
    std::vector<float> held(size_t(p.bufferHoldsBlock() ? p.blockNumel() : p.localNumel()));
    forEachHeld(p, holdingOf(manifest, p, interp.rank()), [&](int64_t l, int64_t g, int64_t count) {
      std::memcpy(held.data() + l, full.data() + g, size_t(count) * 4);
    });
    LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, held.data()));
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

void forEachHeldRun(const ParamDesc& p, int64_t member, int64_t axisSize, int64_t block, int64_t blocks,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  // Block `block` of the local tensor is its contiguous elements [lo, hi) (row blocks of dim 0, of
  // ceil(rows / blocks) rows: the last blocks of a padded param end early, or are all padding); cut
  // the shard's runs to that range and count offsets from lo.
  const int64_t E = p.localNumel();
  const int64_t rows = p.localShape.empty() ? 1 : p.localShape[0];
  const int64_t blockElems = (rows + blocks - 1) / blocks * (rows > 0 ? E / rows : 0);
  const int64_t lo = std::min(E, block * blockElems), hi = std::min(E, lo + blockElems);
  forEachShardRun(p, member, axisSize, [&](int64_t l, int64_t g, int64_t count) {
    const int64_t a = std::max(l, lo), b = std::min(l + count, hi);
    if (a < b) fn(a - lo, g + (a - l), b - a);
  });
}

namespace {
// The ParamDesc whose shard member `layout.member` of layout.members is the layout's local tensor.
ParamDesc layoutView(const std::vector<int64_t>& globalShape, const ShardLayout& layout) {
  ParamDesc v;
  v.shape = globalShape;
  v.localShape = globalShape;
  if (layout.members > 1) {
    v.sharding = ParamSharding{MeshAxis::kTp, layout.dim, layout.splitBlocks, 1};
    v.localShape[size_t(layout.dim)] /= layout.members;
  }
  return v;
}
}  // namespace

Status checkLayout(const std::vector<int64_t>& shape, const ShardLayout& l, int64_t heldNumel) {
  if (l.members < 1 || l.splitBlocks < 1 || l.blocks < 1) return Status::invalidArgument("members, split_blocks and blocks must be >= 1");
  if (l.member >= l.members) return Status::invalidArgument("member " + std::to_string(l.member) + " of " + std::to_string(l.members));
  if (l.block >= l.blocks) return Status::invalidArgument("block " + std::to_string(l.block) + " of " + std::to_string(l.blocks));
  if (l.members > 1) {
    if (l.dim >= int64_t(shape.size()))
      return Status::invalidArgument("dim " + std::to_string(l.dim) + " of a " + std::to_string(shape.size()) + "-d tensor");
    if (l.splitBlocks > shape[size_t(l.dim)] || shape[size_t(l.dim)] % (l.splitBlocks * l.members) != 0)
      return Status::invalidArgument("dimension " + std::to_string(l.dim) + " (" + std::to_string(shape[size_t(l.dim)]) +
                                     ") does not split into " + std::to_string(l.splitBlocks) + " × " +
                                     std::to_string(l.members) + " chunks");
  }
  if (l.blocks > 1 && shape.empty()) return Status::invalidArgument("a scalar has no row blocks");
  const ParamDesc v = layoutView(shape, l);
  const int64_t E = v.localNumel(), rows = v.localShape.empty() ? 1 : v.localShape[0];
  const int64_t held = l.blocks == 1 ? E : (rows + l.blocks - 1) / l.blocks * (rows > 0 ? E / rows : 0);
  if (held != heldNumel)
    return Status::invalidArgument("the layout holds " + std::to_string(held) + " elements but the tensor has " +
                                   std::to_string(heldNumel));
  return Status::ok();
}

void forEachLayoutRun(const std::vector<int64_t>& shape, const ShardLayout& l,
                      const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  forEachHeldRun(layoutView(shape, l), l.member, l.members, l.block, l.blocks, fn);
}

ShardLayout layoutOf(const Manifest& m, const ParamDesc& p, bool block, int rank) {
  const Mesh mesh = m.mesh();
  ShardLayout l;
  if (p.sharding) {
    l.dim = p.sharding->dim;
    l.splitBlocks = p.sharding->blocks;
    l.member = mesh.coord(rank, p.sharding->axis) / p.sharding->replicas;
    l.members = mesh.axisSize(p.sharding->axis) / p.sharding->replicas;
    if (l.members == 1) l = ShardLayout{};
  }
  if (block && p.zero) {
    l.block = mesh.coord(rank, p.zero->axis);
    l.blocks = mesh.axisSize(p.zero->axis);
  }
  return l;
}

Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom) {
  if (!initFrom.empty()) return importParams(manifest, interp, initFrom);
  for (const ParamDesc& p : manifest.params) {
    const ParamDesc::Placement* pl = p.placementIn(int64_t(interp.programIndex()));
    if (!pl) continue;  // no copy on this rank's program
    // By global index: the rank's shard, or under ZeRO stage 3 its block of the shard.
    const int64_t held = p.bufferHoldsBlock() ? p.blockNumel() : p.localNumel();
    std::vector<float> v(static_cast<size_t>(held));
    switch (p.init.kind) {
      case ParamInit::Kind::kNormal: {
        // Real elements by global index (so any padding initializes the same real rows); vocabulary
        // padding rows (global elements from fileNumel on) start at zero.
        // init.zero_row (torch's nn.Embedding(padding_idx)): that row's global elements start at zero.
        const int64_t real = p.fileNumel();
        const int64_t rowLen = p.shape.empty() || p.shape[0] == 0 ? 0 : p.numel() / p.shape[0];
        const int64_t zeroBegin = p.init.zeroRow * rowLen, zeroEnd = p.init.zeroRow < 0 ? 0 : zeroBegin + rowLen;
        forEachHeld(p, holdingOf(manifest, p, interp.rank()), [&](int64_t l, int64_t g, int64_t count) {
          const int64_t n = std::clamp<int64_t>(real - g, 0, count);
          if (n > 0) initNormal(v.data() + l, seed, p.name, g, n, float(p.init.std));
          fillConstant(v.data() + l + n, count - n, 0.0f);
          const int64_t lo = std::max(g, zeroBegin), hi = std::min(g + count, zeroEnd);
          if (lo < hi) fillConstant(v.data() + l + (lo - g), hi - lo, 0.0f);
        });
        break;
      }
      case ParamInit::Kind::kZeros: fillConstant(v.data(), held, 0.0f); break;
      case ParamInit::Kind::kOnes:  // the real elements only: a padded block's padding stays zero
        forEachHeld(p, holdingOf(manifest, p, interp.rank()),
                    [&](int64_t l, int64_t, int64_t count) { fillConstant(v.data() + l, count, 1.0f); });
        break;
    }
    LLCDIST_RETURN_IF_ERROR(interp.writeF32(pl->buffer, v.data()).withContext("param '" + p.name + "'"));
  }
  return Status::ok();
}

Status saveParams(const Manifest& manifest, const std::vector<Interpreter*>& ranks, const std::string& path) {
  return saveParams(manifest, int(ranks.size()),
                    [&](int r, int64_t, int64_t buffer) { return ranks[size_t(r)]->readF32(buffer); }, path);
}

Status saveParams(const Manifest& manifest, int world, const ParamRead& read, const std::string& path) {
  const Mesh mesh = manifest.mesh();
  std::vector<std::vector<float>> values;
  values.reserve(manifest.params.size());
  std::vector<TensorToWrite> tensors;
  for (const ParamDesc& p : manifest.params) {
    std::vector<float> full(size_t(p.numel()));
    // The first rank seen for each (shard member, ZeRO-3 block) supplies those elements; every other
    // rank holding the same ones must hold the same bits, whichever program (pipeline stage) holds its
    // copy. Stages 1 and 2 keep the whole shard in the value buffer: one class per shard member.
    const int64_t numShards = p.sharding ? mesh.axisSize(p.sharding->axis) / p.sharding->replicas : 1;
    const int64_t numBlocks = p.bufferHoldsBlock() ? mesh.axisSize(p.zero->axis) : 1;
    std::vector<int> owner(size_t(numShards * numBlocks), -1);
    std::vector<std::vector<float>> shards(owner.size());
    auto programOf = [&](size_t r) {
      return manifest.programs.size() > 1 ? " (programs[" + std::to_string(manifest.programOfRank(int64_t(r))) + "])"
                                          : std::string();
    };
    for (size_t r = 0; r < size_t(world); ++r) {
      const ParamDesc::Placement* pl = p.placementIn(manifest.programOfRank(int64_t(r)));
      if (!pl) continue;  // this rank's program holds no copy
      const Holding h = holdingOf(manifest, p, int(r));
      const size_t key = size_t(h.key());
      LLCDIST_ASSIGN_OR_RETURN(std::vector<float> v, read(int(r), int64_t(&p - manifest.params.data()), pl->buffer));
      if (owner[key] < 0) {
        owner[key] = int(r);
        forEachHeld(p, h, [&](int64_t l, int64_t g, int64_t count) {
          std::memcpy(full.data() + g, v.data() + l, size_t(count) * 4);
        });
        shards[key] = std::move(v);
        continue;
      }
      const std::vector<float>& ref = shards[key];
      if (std::memcmp(ref.data(), v.data(), v.size() * 4) == 0) continue;
      int64_t first = 0;
      while (std::memcmp(&ref[size_t(first)], &v[size_t(first)], 4) == 0) ++first;
      int64_t global = first;
      forEachHeld(p, h, [&](int64_t l, int64_t g, int64_t count) {
        if (first >= l && first < l + count) global = g + (first - l);
      });
      std::string where;
      if (p.sharding || numBlocks > 1) {
        where = " (local element " + std::to_string(first) + " of ";
        if (p.sharding) where += "shard " + std::to_string(h.member) + (numBlocks > 1 ? ", " : "");
        if (numBlocks > 1) where += "ZeRO block " + std::to_string(h.block);
        where += ")";
      }
      return Status::internal("param '" + p.name + "': rank " + std::to_string(r) + "'s copy" + programOf(r) +
                              " differs from rank " + std::to_string(owner[key]) + "'s" +
                              programOf(size_t(owner[key])) + " at element " + std::to_string(global) + where +
                              ": " + std::to_string(v[size_t(first)]) + " vs " + std::to_string(ref[size_t(first)]) +
                              " (the replicas diverged: a missing or mismatched all-reduce in the plan?)");
    }
    for (size_t c = 0; c < owner.size(); ++c)
      if (owner[c] < 0)  // the loader makes every program holding the param hold all its shards and blocks
        return Status::internal("param '" + p.name + "': no rank holds shard " + std::to_string(int64_t(c) / numBlocks) +
                                (numBlocks > 1 ? " block " + std::to_string(int64_t(c) % numBlocks) : std::string()));
    full.resize(size_t(p.fileNumel()));  // vocabulary padding rows are not part of the HF tensor
    values.push_back(std::move(full));
    for (const FileTensor& f : fileTensorsOf(p.name, p.fileShape))
      tensors.push_back({f.name, DType::kF32, f.shape, values.back().data() + f.offset});
  }
  return writeSafetensors(path, std::move(tensors), {{"format", "pt"}});
}

}  // namespace llcdist::rt::train
