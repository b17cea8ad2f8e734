// Token files in llm.c's format and the batch sampler that defines the data order.
//
// File: 256 little-endian int32 header words — [0] magic 20240520, [1] version, [2] token count —
// then `count` tokens: uint16 in version 1 (llm.c's), uint32 in version 2 (llc-dist's, for vocabularies
// past 65,536 ids: Llama 3's 128,256, Qwen2's 151,936; scripts/prepare_data.py writes it only then).
//
// Order (design.md §4). A step has G = B·M·dp sequences of T tokens (B micro-batch size, M
// microbatches, dp data-parallel ranks). Global sample s = k·G + g of step k reads the T+1 tokens
// starting at token start(s) (inputs the first T, targets the last T); microbatch j of data-parallel
// rank r holds samples g = (j·dp + r)·B + i, i in [0, B). Any (B, M, dp) with the same G therefore sees
// the same global batch. With Ns = floor((count-1)/T) samples per epoch:
//   shuffle off: start(s) = (s mod Ns)·T   — llm.c's sequential order, wrapping at the end of the file;
//   shuffle on:  start(s) = π_e(s mod Ns)·T, e = s / Ns, where π_e is a pseudo-random permutation of
//                [0, Ns) that depends only on (seed, e) (a keyed Feistel network with cycle walking:
//                O(1) memory and time per lookup, identical on every rank).
#pragma once

#include "llcdist/runtime/Positions.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;      // uint16 tokens (llm.c)
inline constexpr int32_t kTokenFileVersionWide = 2;  // uint32 tokens
inline constexpr int64_t kTokenHeaderInts = 256;

// Writes a token file (via a temporary and a rename: no partial output on failure): version 1 from
// uint16 tokens, version 2 from uint32 ones.
Status writeTokenFile(const std::string& path, const uint16_t* tokens, int64_t count);
Status writeTokenFile(const std::string& path, const uint32_t* tokens, int64_t count);

class TokenFile {
public:
  // Reads the whole file; checks size >= header, magic, version (1 or 2), and that the token count
  // matches the file size. Errors name the file.
  static StatusOr<TokenFile> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<uint32_t>& tokens() const { return tokens_; }
  int64_t size() const { return int64_t(tokens_.size()); }

private:
  std::string path_;
  std::vector<uint32_t> tokens_;
};

// Context parallelism (docs/plan-format.md "Context parallelism"): the rank with cp coordinate c of cp
// holds, of each of its samples, the inputs at the T/cp positions contextParallelPositions(T, cp, c,
// manifest.mesh.cp_layout) gives its rows (Positions.h) and the targets at the same positions (T the
// global sequence length), so the cp ranks hold every sample exactly once. cp = 1: the whole sample.

struct BatchConfig {
  int64_t B = 1;             // sequences per microbatch
  int64_t T = 1;             // sequence length
  int64_t microbatches = 1;  // M, gradient-accumulation steps
  int64_t dp = 1;            // data-parallel ranks
  bool shuffle = false;
  uint64_t seed = 0;         // shuffle seed
};

class BatchSampler {
public:
  // Fails if a size is not positive or the file has fewer than T+1 tokens.
  static StatusOr<BatchSampler> create(std::shared_ptr<const TokenFile> file, const BatchConfig& cfg);

  const BatchConfig& config() const { return cfg_; }
  int64_t globalBatch() const { return cfg_.B * cfg_.microbatches * cfg_.dp; }  // G
  int64_t samplesPerEpoch() const { return samplesPerEpoch_; }                   // Ns
  // Global sample index of sequence i of microbatch `micro` on data-parallel rank `dpRank` at `step`.
  int64_t globalSample(int64_t step, int64_t micro, int64_t dpRank, int64_t i) const {
    return step * globalBatch() + (micro * cfg_.dp + dpRank) * cfg_.B + i;
  }
  // First token of global sample s (s >= 0).
  int64_t sampleStart(int64_t s) const;
  // inputs[B,T] and targets[B,T] (int32 token ids) of one microbatch.
  Status microbatch(int64_t step, int64_t micro, int64_t dpRank, int32_t* inputs, int32_t* targets) const;
  // S rows of each sample of that microbatch, row s at position positions.at(s) of the sample: inputs
  // and targets [B, S] (context parallelism: contextParallelPositions). Every position must lie in
  // [0, T) (OutOfRange otherwise).
  Status microbatchChunk(int64_t step, int64_t micro, int64_t dpRank, const PositionRuns& positions, int64_t S,
                         int32_t* inputs, int32_t* targets) const;

private:
  std::shared_ptr<const TokenFile> file_;
  BatchConfig cfg_;
  int64_t samplesPerEpoch_ = 0;
};

// The shuffle permutation π_e(p) for p in [0, n), exposed for tests and tools.
int64_t shufflePermute(uint64_t seed, int64_t epoch, int64_t p, int64_t n);

}  // namespace llcdist::rt
