// parseByteSize (lib/Support/Device.cpp): --memory-budget / --memory-reserve values such as "80GiB",
// "72.5GB" or a byte count. Any text is a size in [0 or 1, 2^60] or nullopt.
#include "llcdist/Support/Device.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  for (bool allowZero : {false, true}) {
    std::optional<int64_t> bytes = llcdist::parseByteSize(text, allowZero);
    // The documented range: a violation is a finding, not a silently wrong size.
    if (bytes && (*bytes < (allowZero ? 0 : 1) || *bytes > (int64_t(1) << 60)))
      std::abort();
  }
  return 0;
}
