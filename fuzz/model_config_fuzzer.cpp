// The compiler's Hugging Face config.json reader (lib/Frontend/ModelConfig.cpp): parseModelConfig on
// any text returns a config or an error, never crashes, throws, hangs or allocates hugely. An accepted
// config also goes through what `llc-dist info` and compile compute from it first: the parameter
// count and the default training shape (sanity bounds keep both from overflowing).
#include "llcdist/Frontend/ModelConfig.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  llcdist::ModelConfig config;
  if (llcdist::parseModelConfig(text, "fuzz/config.json", config))
    return 0;
  (void)config.numParameters();
  (void)config.where("num_layers");
  for (int64_t dp : {1, 8}) {
    llcdist::TrainingShape shape;
    (void)llcdist::resolveTrainingShape(config, dp, shape);
  }
  return 0;
}
