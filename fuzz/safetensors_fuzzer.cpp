// The safetensors reader (runtime/src/Safetensors.cpp): SafetensorsReader::open on any bytes returns
// a reader or an error, never crashes, throws, hangs or allocates more than the file justifies. An
// accepted file's tensors are then read as `llc-dist run --init-from` reads them: the floating-point
// ones as fp32, the others as raw bytes.
#include "FuzzFile.h"

#include "llcdist/runtime/Safetensors.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto reader = llcdist::rt::SafetensorsReader::open(llcdist::fuzz::inputAsFile(data, size));
  if (!reader.isOk())
    return 0;
  const llcdist::rt::SafetensorsReader& r = reader.value();
  for (const llcdist::rt::TensorInfo& t : r.tensors()) {
    if (r.find(t.name) != &t)
      __builtin_trap();  // tensors() is sorted by name, and find() finds each
    auto floats = r.readF32(t.name);
    if (!floats.isOk()) {
      std::vector<uint8_t> raw(t.byteSize());
      (void)r.readBytes(t, 0, t.byteSize(), raw.data());
    }
  }
  return 0;
}
