// The device files of --device (devices/*.json; lib/Support/Device.cpp's parseDevice). An accepted
// device's reserve is computed as compile computes it.
#include "llcdist/Support/Device.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  llcdist::DeviceSpec device;
  if (llcdist::parseDevice(text, "fuzz/device.json", device))
    return 0;
  for (int64_t communicators : {1, 4})
    (void)device.reserve.bytes(device.memoryBytes, communicators);
  return 0;
}
