// Data sources for training: llm.c token files through BatchSampler, or synthetic tokens; one source
// per (data-parallel, context-parallel) coordinate. See Train.h.
#include "TrainParts.h"

#include "llcdist/runtime/Rng.h"
#include "llcdist/runtime/TokenData.h"

#include <memory>

namespace llcdist::rt::train {

StatusOr<DataSourceFactory> makeDataSources(const Manifest& m, const std::string& data, bool shuffle, uint64_t seed) {
  const int64_t B = m.microBatch, T = m.seqLen, V = m.vocabSize, G = m.globalBatch, dp = m.dataParallel;
  const int64_t cp = m.meshCp;
  const CpLayout layout = m.cpLayout;
  // Context parallelism: each rank loads its T / cp positions of every sample (mesh.cp_layout's).
  auto checkShape = [B, T, cp](int64_t b, int64_t s) {
    if (b != B || s != T / cp)
      return Status::internal("load_microbatch asked for [" + std::to_string(b) + ", " + std::to_string(s) +
                              "], the manifest's batch is [" + std::to_string(B) + ", " + std::to_string(T) + "]" +
                              (cp > 1 ? " over cp = " + std::to_string(cp) + ": [" + std::to_string(B) + ", " +
                                            std::to_string(T / cp) + "] a rank"
                                      : std::string()));
    return Status::ok();
  };
  if (data == "synthetic") {
    const uint64_t key = streamKey(seed, "llcdist.synthetic");
    return DataSourceFactory([=](int64_t dpRank, int64_t cpRank) {
      const PositionRuns rows = contextParallelPositions(T, cp, cpRank, layout);
      return MicrobatchSource([=](int64_t step, int64_t micro, int32_t* ids, int32_t* targets, int64_t b, int64_t s) {
        LLCDIST_RETURN_IF_ERROR(checkShape(b, s));
        // Token t of the sample's T + 1 (inputs 0..T-1, targets 1..T): row r's input is token pos(r),
        // its target token pos(r) + 1.
        auto token = [&](int64_t sample, int64_t t) {
          return int32_t(random64(key, uint64_t(sample), uint64_t(t)) % uint64_t(V));
        };
        for (int64_t i = 0; i < B; ++i) {
          const int64_t sample = step * G + (micro * dp + dpRank) * B + i;
          for (int64_t r = 0; r < s; ++r) {
            ids[i * s + r] = token(sample, rows.at(r));
            targets[i * s + r] = token(sample, rows.at(r) + 1);
          }
        }
        return Status::ok();
      });
    });
  }
  LLCDIST_ASSIGN_OR_RETURN(TokenFile file, TokenFile::open(data));
  const std::vector<uint32_t>& toks = file.tokens();
  for (size_t p = 0; p < toks.size(); ++p)
    if (int64_t(toks[p]) >= V)
      return Status::invalidArgument("token " + std::to_string(toks[p]) + " at position " + std::to_string(p) +
                                     " is >= the model's vocab_size " + std::to_string(V) +
                                     " (data tokenized for another model?)")
          .withContext("file '" + data + "'");
  BatchConfig cfg;
  cfg.B = B;
  cfg.T = T;
  cfg.microbatches = m.microbatches;
  cfg.dp = dp;
  cfg.shuffle = shuffle;
  cfg.seed = seed;
  auto shared = std::make_shared<const TokenFile>(std::move(file));
  LLCDIST_ASSIGN_OR_RETURN(BatchSampler sampler, BatchSampler::create(shared, cfg));
  auto sp = std::make_shared<BatchSampler>(std::move(sampler));
  return DataSourceFactory([=](int64_t dpRank, int64_t cpRank) {
    const PositionRuns rows = contextParallelPositions(T, cp, cpRank, layout);
    return MicrobatchSource([=](int64_t step, int64_t micro, int32_t* ids, int32_t* targets, int64_t b, int64_t s) {
      LLCDIST_RETURN_IF_ERROR(checkShape(b, s));
      return sp->microbatchChunk(step, micro, dpRank, rows, s, ids, targets);
    });
  });
}

}  // namespace llcdist::rt::train
