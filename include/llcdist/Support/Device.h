//===- Device.h - an accelerator's memory and speed ------------*- C++ -*-===//
//
// MLIR-free: the device a plan must fit on, from a small JSON file (shipped
// in devices/, editable):
//
//   {"name": "NVIDIA H100 SXM 80GB", "memory_gib": 80,
//    "bf16_dense_tflops": 989, "hbm_tb_s": 3.35, "source": "..."}
//
// `llc-dist compile --device h100-80gb` refuses a plan whose arena exceeds
// the memory on any rank (issue #6); the cost model of later issues reads
// the rest.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_DEVICE_H
#define LLCDIST_SUPPORT_DEVICE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llcdist {

struct DeviceSpec {
  std::string id;   ///< the file's stem, e.g. h100-80gb
  std::string name; ///< e.g. NVIDIA H100 SXM 80GB
  int64_t memoryBytes = 0;
  double bf16DenseTflops = 0, hbmTBs = 0;
};

/// Parses `text` (the content of `path`); the message names the file, the
/// field and the fix.
std::optional<std::string> parseDevice(const std::string &text, const std::string &path,
                                       DeviceSpec &out);
/// `nameOrPath` is a JSON file, or the name of one in the devices directory
/// (LLCDIST_DEVICES_DIR in the environment, else the source tree's devices/).
std::optional<std::string> loadDevice(const std::string &nameOrPath, DeviceSpec &out);
/// The names of the shipped devices (for messages).
std::vector<std::string> knownDevices();

/// "80GiB", "72.5GB", "1024MiB", "123456789" (bytes) -> bytes; nullopt on a
/// malformed or non-positive size.
std::optional<int64_t> parseByteSize(const std::string &text);

} // namespace llcdist

#endif
