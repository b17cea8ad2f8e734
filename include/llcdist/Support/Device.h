//===- Device.h - an accelerator's memory and speed ------------*- C++ -*-===//
//
// MLIR-free: the device a plan must fit on, from a small JSON file (shipped
// in devices/, editable):
//
//   {"name": "NVIDIA H100 SXM 80GB", "memory_gib": 80,
//    "bf16_dense_tflops": 989, "hbm_tb_s": 3.35, "source": "...",
//    "reserve": {"cuda_context_mib": 1024, "cublas_workspace_mib": 64,
//                "cudnn_workspace_mib": 128, "nccl_buffsize_mib": 4,
//                "nccl_channels": 16, "nccl_peers": 2,
//                "fragmentation_fraction": 0.02, "source": "..."}}
//
// `llc-dist compile --device h100-80gb` refuses a plan whose arena exceeds
// the memory minus the reserve on any rank (issues #6, #10); the cost model
// (issue #15) reads the peaks, the bandwidth and the optional "cost" object:
//
//   "cost": {"fp32_tflops": 67, "kernel_launch_us": 4,
//            "attention_fwd_efficiency": 0.6, "attention_bwd_efficiency": 0.5,
//            "source": "...",
//            "fitted": {"gemm_efficiency": .., "gemm_knee_gflop": ..,
//                       "memory_efficiency": .., "source": "..."}}
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_DEVICE_H
#define LLCDIST_SUPPORT_DEVICE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llcdist {

/// What a training process holds on the device outside the plan's arena
/// (the file's "reserve" object; every field required, its reasoning in
/// "source"). NCCL's part grows with the communicators a rank joins, so the
/// reserve is a function of the plan.
struct DeviceReserve {
  int64_t cudaContextBytes = 0;     ///< cuda_context_mib
  int64_t cublasWorkspaceBytes = 0; ///< cublas_workspace_mib (all handles/streams)
  int64_t cudnnWorkspaceBytes = 0;  ///< cudnn_workspace_mib
  int64_t ncclBuffsizeBytes = 0;    ///< nccl_buffsize_mib (NCCL_BUFFSIZE)
  int64_t ncclChannels = 0;         ///< nccl_channels per communicator
  int64_t ncclPeers = 0;            ///< nccl_peers per channel (ring: 2)
  double fragmentationFraction = 0; ///< of the capacity, in [0, 0.5)
  std::string source;

  /// NCCL_BUFFSIZE × channels × peers: one communicator's buffers.
  int64_t ncclPerCommunicatorBytes() const {
    return ncclBuffsizeBytes * ncclChannels * ncclPeers;
  }
  int64_t fragmentationBytes(int64_t capacity) const;
  /// The whole reserve on a device of `capacity` bytes for a rank that joins
  /// `communicators` NCCL communicators.
  int64_t bytes(int64_t capacity, int64_t communicators) const;
};

/// What the cost model (include/llcdist/Cost/CostModel.h) reads of a device:
/// the file's optional "cost" object, every field required when it is there.
/// Peaks and bandwidths are datasheet figures, the attention efficiencies are
/// cited, and the three `fitted` ones come from scripts/fit_cost_model.py
/// (fitted once, on the calibration set; docs/cost-model.md).
struct DeviceCost {
  double fp32Tflops = 0;             ///< fp32_tflops: non-tensor-core FP32 peak
  double kernelLaunchUs = 0;         ///< kernel_launch_us: per kernel, back to back
  double attentionFwdEfficiency = 0; ///< attention_fwd_efficiency: of the bf16 peak
  double attentionBwdEfficiency = 0; ///< attention_bwd_efficiency
  // fitted.*:
  double gemmEfficiency = 0; ///< the fraction of peak a large GEMM reaches
  double gemmKneeGflop = 0;  ///< the GEMM size (GFLOP) that reaches half of that
  double memoryEfficiency = 0; ///< the fraction of HBM bandwidth memory-bound kernels reach
  std::string source, fitSource;
};

struct DeviceSpec {
  std::string id;   ///< the file's stem, e.g. h100-80gb
  std::string name; ///< e.g. NVIDIA H100 SXM 80GB
  int64_t memoryBytes = 0;
  double bf16DenseTflops = 0, hbmTBs = 0;
  DeviceReserve reserve;
  std::optional<DeviceCost> cost; ///< the "cost" object, when the file has one
};

/// Parses `text` (the content of `path`); the message names the file, the
/// field and the fix.
std::optional<std::string> parseDevice(const std::string &text, const std::string &path,
                                       DeviceSpec &out);
/// `nameOrPath` is a JSON file, or the name of one in the devices directory
/// (LLCDIST_DEVICES_DIR in the environment, else the source tree's devices/).
std::optional<std::string> loadDevice(const std::string &nameOrPath, DeviceSpec &out);
/// Whether a --device / --topology value is a file (it has a '/' or ends in
/// .json) rather than the name of a shipped one.
bool namesAFile(const std::string &nameOrPath);
/// The names of the shipped devices (for messages).
std::vector<std::string> knownDevices();

/// "80GiB", "72.5GB", "1024MiB", "123456789" (bytes) -> bytes; nullopt on a
/// malformed or non-positive size (zero is accepted with `allowZero`) or one
/// above 2^60 bytes (1 EiB).
std::optional<int64_t> parseByteSize(const std::string &text, bool allowZero = false);

} // namespace llcdist

#endif
