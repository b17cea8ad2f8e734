// Durable file writes and content checksums: what checkpoints (Checkpoint.h) and the training driver
// share. A durable write is written to a temporary name beside its target, fsynced, renamed over the
// target, and the directory fsynced, so a crash at any point leaves either the old file or the new
// one, never a torn one.
#pragma once

#include "llcdist/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace llcdist::rt {

// 64-bit FNV-1a, continuing from `h` (start with kFnvOffset).
inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
uint64_t fnv1a64(const void* data, size_t size, uint64_t h = kFnvOffset);
// FNV-1a of a whole file's bytes; an error naming the file when it cannot be read.
StatusOr<uint64_t> fnv1a64File(const std::string& path);
// XXH3-64 (xxHash, libxxhash): the checksum of checkpoint files and tensors (GB/s, where FNV-1a
// runs byte at a time); of a buffer, and of a whole file's bytes (an error naming the file).
uint64_t xxh3(const void* data, size_t size);
StatusOr<uint64_t> xxh3File(const std::string& path);
// 16 lowercase hex digits.
std::string hex16(uint64_t x);

// A whole file's bytes, refused (before reading) when larger than maxBytes; errors name the file.
StatusOr<std::string> readFileText(const std::string& path, int64_t maxBytes);

// fsync(2) of a file or a directory (opened read-only); an error naming it.
Status fsyncPath(const std::string& path);
// `text` to `path` durably (above); an error naming the file.
Status writeFileDurably(const std::string& path, const std::string& text);

}  // namespace llcdist::rt
