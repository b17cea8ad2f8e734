// The checkpoint manifest (runtime/src/train/Checkpoint.cpp): what `llc-dist run --resume` and
// `llc-dist export` read first from a checkpoint directory (checkpoint.json).
//
// Input: the file's text. parseCheckpointManifest must never crash, throw, hang or allocate hugely;
// a manifest it accepts must print (checkpointManifestText) to text it accepts again, unchanged.
#include "llcdist/runtime/Checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = llcdist::rt::parseCheckpointManifest(text, "checkpoint.json");
  if (!m.isOk())
    return 0;
  const std::string printed = llcdist::rt::checkpointManifestText(m.value());
  auto again = llcdist::rt::parseCheckpointManifest(printed, "checkpoint.json");
  if (!again.isOk() || llcdist::rt::checkpointManifestText(again.value()) != printed)
    std::abort();  // a manifest the writer prints must read back as itself
  return 0;
}
