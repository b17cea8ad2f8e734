// The llm.c token-file reader (runtime/src/TokenData.cpp): TokenFile::open on any bytes returns the
// tokens or an error, never crashes, throws, hangs or allocates more than the file justifies. An
// accepted file feeds the batch sampler as `llc-dist run --data` does, shuffled and not, with a
// sequence length and batch derived from its token count.
#include "FuzzFile.h"

#include "llcdist/runtime/TokenData.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = llcdist::rt::TokenFile::open(llcdist::fuzz::inputAsFile(data, size));
  if (!file.isOk())
    return 0;
  auto tokens = std::make_shared<const llcdist::rt::TokenFile>(std::move(file).value());
  for (bool shuffle : {false, true}) {
    llcdist::rt::BatchConfig cfg;
    cfg.T = 1 + tokens->size() % 7;
    cfg.B = 1 + tokens->size() % 3;
    cfg.microbatches = 2;
    cfg.dp = 2;
    cfg.shuffle = shuffle;
    cfg.seed = uint64_t(tokens->size());
    auto sampler = llcdist::rt::BatchSampler::create(tokens, cfg);
    if (!sampler.isOk())
      continue;
    std::vector<int32_t> inputs(size_t(cfg.B * cfg.T)), targets(inputs.size());
    for (int64_t step = 0; step < 3; ++step)
      for (int64_t micro = 0; micro < cfg.microbatches; ++micro)
        for (int64_t rank = 0; rank < cfg.dp; ++rank)
          if (!sampler.value().microbatch(step, micro, rank, inputs.data(), targets.data()).isOk())
            __builtin_trap();  // in range by construction
  }
  return 0;
}
