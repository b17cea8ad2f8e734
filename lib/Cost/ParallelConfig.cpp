//===- ParallelConfig.cpp - a configuration's flags, text and checks -----===//
//
// StepModel.h's ParallelConfig as `llc-dist compile` flags and as report
// text, and checkConfig: what the compiler would refuse of a configuration
// (divisibility, and the combinations it does not build), so the planner
// never prices a configuration that does not compile.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/StepModel.h"

#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;

int64_t Workload::paddedVocab(int64_t tp) const {
  int64_t m = 128 * tp;
  return (model.vocab + m - 1) / m * m;
}

std::string ParallelConfig::compileFlags() const {
  std::ostringstream os;
  os << "--mesh dp=" << dp << ",tp=" << tp << ",pp=" << pp;
  if (cp > 1)
    os << ",cp=" << cp;
  if (ep > 1)
    os << ",ep=" << ep;
  if (cp > 1)
    os << " --cp-impl " << cpImpl;
  os << " --micro-batch " << microBatch;
  if (pp > 1) {
    os << " --schedule " << schedule;
    if (virtualStages > 1)
      os << " --virtual-stages " << virtualStages;
  }
  if (sequenceParallel)
    os << " --sequence-parallel";
  if (scatterGatherP2P)
    os << " --scatter-gather-p2p";
  if (recompute != "none")
    os << " --recompute " << recompute;
  if (zero)
    os << " --zero " << zero;
  if (gradBucket)
    os << " --grad-bucket-size " << gradBucket;
  if (fsdpPrefetch)
    os << " --fsdp-prefetch " << fsdpPrefetch;
  return os.str();
}

std::string ParallelConfig::str() const {
  std::ostringstream os;
  os << "dp=" << dp << ",tp=" << tp << ",pp=" << pp;
  if (ep > 1)
    os << ",ep=" << ep;
  if (cp > 1)
    os << ",cp=" << cp << (cpImpl == "ring" ? " ring" : " a2a");
  if (pp > 1) {
    os << " " << schedule;
    if (virtualStages > 1)
      os << " v=" << virtualStages;
  }
  os << " mb=" << microBatch;
  if (sequenceParallel)
    os << " sp";
  if (scatterGatherP2P)
    os << " sg";
  if (recompute != "none")
    os << " recompute=" << recompute;
  if (zero)
    os << " zero=" << zero;
  if (gradBucket)
    os << " buckets";
  if (fsdpPrefetch)
    os << " prefetch=" << fsdpPrefetch;
  return os.str();
}

namespace {
/// What the compiler refuses of context parallelism (ContextParallel.cpp).
std::optional<std::string> checkContextParallel(const Workload &w, const ParallelConfig &c) {
  if (c.cp == 1)
    return std::nullopt;
  const ModelConfig &m = w.model;
  auto why = [](const std::string &s) { return std::optional<std::string>(s); };
  // A mixture of experts routes each cp rank's own tokens (ContextParallel.cpp), not with a capacity,
  // which counts a microbatch's.
  if (m.moe && w.moeCapacityFactor > 0)
    return why("a capacity factor bounds each expert's rows of a rank's tokens, which context parallelism splits "
               "over cp");
  if (c.cpImpl == "ring") {
    if (w.seqLen % (2 * c.cp))
      return why("the ring's 2*cp load-balanced chunks do not divide the sequence");
  } else if (c.cpImpl == "all-to-all") {
    if (m.alibi) // ContextParallel.cpp's localHeads
      return why("all-to-all gives each cp rank a slice of the heads, and ALiBi's slopes follow the heads: use the "
                 "ring");
    const int64_t kvPerRank = m.kvHeads >= c.tp ? m.kvHeads / c.tp : 1;
    if (w.seqLen % c.cp || (m.heads / c.tp) % c.cp || (kvPerRank % c.cp && c.cp % kvPerRank))
      return why("all-to-all needs cp dividing the sequence and the heads per tp rank, and dividing the kv heads "
                 "per tp rank or a multiple of them (replicated)");
  } else {
    return why("cp-impl must be ring or all-to-all");
  }
  return std::nullopt;
}

/// What the compiler refuses of expert parallelism (MeshSpec.cpp,
/// AttachMesh.cpp, Pipelines.cpp's overlapOptionsError), in its words.
std::optional<std::string> checkExpertParallel(const Workload &w, const ParallelConfig &c) {
  if (c.ep == 1)
    return std::nullopt;
  auto why = [](const std::string &s) { return std::optional<std::string>(s); };
  const std::string ep = "ep=" + std::to_string(c.ep);
  if (c.dp % c.ep)
    return why(ep + " must divide dp=" + std::to_string(c.dp) +
               ": expert-parallel ranks are drawn from the data-parallel group");
  if (!w.model.moe)
    return why(ep + " splits a mixture-of-experts model's experts, but this model has none; leave ep out of --mesh");
  const int64_t experts = w.model.moe->experts;
  if (experts % c.ep)
    return why(ep + " does not divide the " + std::to_string(experts) + " experts; choose ep among the divisors of " +
               std::to_string(experts));
  return std::nullopt;
}
} // namespace

std::optional<std::string> cost::checkConfig(const Workload &w, const ParallelConfig &c) {
  const ModelConfig &m = w.model;
  auto why = [](const std::string &s) { return std::optional<std::string>(s); };
  if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.cp < 1 || c.ep < 1 || c.microBatch < 1 || c.virtualStages < 1)
    return why("every degree and the micro-batch must be >= 1");
  if (auto cpWhy = checkContextParallel(w, c))
    return cpWhy;
  if (auto epWhy = checkExpertParallel(w, c))
    return epWhy;
  // llcdist-partition's: under SP each tp rank routes its own slice of a microbatch's tokens.
  if (m.moe && c.sequenceParallel && w.moeCapacityFactor > 0)
    return why("a capacity factor bounds each expert's rows of a rank's tokens, which sequence parallelism splits "
               "over tp");
  if (m.heads % c.tp)
    return why("tp=" + std::to_string(c.tp) + " does not divide num_heads=" + std::to_string(m.heads));
  if (m.kvHeads % c.tp && c.tp % m.kvHeads)
    return why("tp and num_kv_heads do not divide one another");
  if (groupedQkv(m.arch) && m.kvHeads % c.tp) // TensorParallel.cpp's replicateKvHeads refuses it
    return why("tp=" + std::to_string(c.tp) + " does not divide num_kv_heads=" + std::to_string(m.kvHeads) +
               ": a fused q|k|v (query_key_value, GPTBigCode's c_attn) cannot replicate kv heads");
  if (m.qkvBlocks && m.qkvBlocks % c.tp) // TensorParallel's grouped split: whole blocks per rank
    return why("tp=" + std::to_string(c.tp) + " does not divide the " + std::to_string(m.qkvBlocks) +
               " blocks of CodeGen's qkv_proj (each [q | v | k] of a quarter of the heads)");
  if (m.intermediate % c.tp)
    return why("tp does not divide the MLP's intermediate size");
  if (w.globalBatch % (c.microBatch * c.dp))
    return why("micro-batch x dp does not divide the global batch");
  if (c.pp * c.virtualStages > m.layers)
    return why("pp x virtual stages exceeds the layers");
  if (c.pp == 1 && (c.virtualStages > 1 || c.schedule != "1f1b"))
    return why("a schedule needs pp > 1");
  if (c.virtualStages > 1 && c.schedule != "interleaved")
    return why("virtual stages need the interleaved schedule");
  if (c.schedule == "interleaved" && (c.virtualStages < 2 || c.microbatches(w.globalBatch) % c.pp))
    return why("interleaved needs v >= 2 and microbatches a multiple of pp");
  if (c.sequenceParallel && (c.tp == 1 || (w.seqLen / c.cp) % c.tp))
    return why("sequence parallelism needs tp > 1 dividing the sequence");
  if (c.scatterGatherP2P && !c.scatterGatherApplies())
    return why("scatter/gather pipeline sends need tp > 1 and pp > 1 without sequence parallelism");
  if (c.zero < 0 || c.zero > 3 || (c.zero && c.dataParallelGroup() == 1))
    return why("ZeRO needs dp × cp > 1");
  if (c.gradBucket && c.dataParallelGroup() == 1)
    return why("gradient buckets need dp × cp > 1");
  if (c.fsdpPrefetch && c.zero != 3)
    return why("FSDP prefetch needs zero 3");
  if (c.zero == 3 && c.pp > 1)
    return why("ZeRO-3 with pipeline parallelism is not searched");
  return std::nullopt;
}
