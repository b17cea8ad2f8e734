// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian uint64][N bytes: JSON header][data bytes]
//   header = {"__metadata__": {"k": "v", ...} (optional),
//             "<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
//
// data_offsets are byte offsets relative to the start of the data section. The reader validates the
// whole header on open() and reports errors naming the file, the tensor and the field; tensor bytes
// are read on demand (nothing but the header is kept in memory), so a rank can read only its shard.
// Multi-byte values are little-endian; this implementation assumes a little-endian host.
#pragma once

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

int64_t dtypeSize(DType dtype);           // bytes per element
std::string_view dtypeName(DType dtype);  // "F32", "BF16", ...
std::optional<DType> parseDType(std::string_view name);

// IEEE half and bfloat16 <-> fp32. Narrowing rounds to nearest-even; overflow gives ±inf; NaN stays NaN.
// (bf16ToFloat / floatToBf16 live in Bf16.h, included here.)
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty = scalar
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
  uint64_t byteSize() const { return end - begin; }
};

class SafetensorsReader {
public:
  // Reads and validates the header: file at least 8 bytes, header length within the file, valid JSON
  // object, no duplicate names, every tensor with a known dtype, a non-negative shape and data_offsets
  // inside the data section whose size equals numel·dtypeSize, no two tensors overlapping;
  // "__metadata__" (if present) a map of strings.
  static StatusOr<SafetensorsReader> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Raw bytes [offset, offset + size) of a tensor's data (offset/size relative to the tensor) into dst.
  Status readBytes(const TensorInfo& tensor, uint64_t offset, uint64_t size, void* dst) const;
  // The whole tensor converted to fp32 (from F32, F16, BF16 or F64); dst has numel() floats.
  Status readF32(std::string_view name, float* dst, int64_t count) const;
  StatusOr<std::vector<float>> readF32(std::string_view name) const;

private:
  std::string path_;
  uint64_t dataStart_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` points at numel·dtypeSize bytes in `dtype` (may be null when numel is 0).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes tensors sorted by name, packed in that order, with the header padded by spaces to a multiple
// of 8 bytes (as the Python library does). Output is deterministic for the same input. The file is
// written to a temporary next to `path` and renamed over it, so a failure leaves no partial file.
Status writeSafetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace llcdist::rt
