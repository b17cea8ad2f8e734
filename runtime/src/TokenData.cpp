// llm.c token files and the deterministic batch order. See TokenData.h.
#include "llcdist/runtime/TokenData.h"

#include "llcdist/runtime/Rng.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace llcdist::rt {
namespace {

namespace fs = std::filesystem;

Status fileError(const std::string& path, Status s) { return std::move(s).withContext("file '" + path + "'"); }

constexpr int64_t kHeaderBytes = kTokenHeaderInts * 4;

// The header of `version` and `count` tokens of `width` bytes each, written through a temporary.
Status writeTokens(const std::string& path, const void* tokens, int64_t count, int32_t version, int64_t width) {
  if (count < 0 || count > INT32_MAX)
    return fileError(path, Status::invalidArgument("token count " + std::to_string(count) +
                                                   " does not fit the int32 header field"));
  std::vector<int32_t> header(kTokenHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = version;
  header[2] = int32_t(count);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) {
      out.write(reinterpret_cast<const char*>(header.data()), kHeaderBytes);
      if (count > 0) out.write(static_cast<const char*>(tokens), std::streamsize(count * width));
      out.flush();
    }
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return fileError(path, Status::ioError("cannot write temporary file '" + tmp + "'"));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return fileError(path, Status::ioError("cannot rename the temporary file: " + ec.message()));
  }
  return Status::ok();
}

}  // namespace

Status writeTokenFile(const std::string& path, const uint16_t* tokens, int64_t count) {
  return writeTokens(path, tokens, count, kTokenFileVersion, 2);
}

Status writeTokenFile(const std::string& path, const uint32_t* tokens, int64_t count) {
  return writeTokens(path, tokens, count, kTokenFileVersionWide, 4);
}

StatusOr<TokenFile> TokenFile::open(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return fileError(path, Status::ioError("cannot stat: " + ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fileError(path, Status::ioError("cannot open for reading"));
  if (size < uint64_t(kHeaderBytes))
    return fileError(path, Status::dataLoss("file is " + std::to_string(size) + " bytes, shorter than the " +
                                            std::to_string(kHeaderBytes) + "-byte header"));
  int32_t header[kTokenHeaderInts];
  in.read(reinterpret_cast<char*>(header), kHeaderBytes);
  if (header[0] != kTokenFileMagic)
    return fileError(path, Status::dataLoss("bad magic " + std::to_string(header[0]) + " (expected " +
                                            std::to_string(kTokenFileMagic) + ")"));
  if (header[1] != kTokenFileVersion && header[1] != kTokenFileVersionWide)
    return fileError(path, Status::dataLoss("unsupported version " + std::to_string(header[1]) + " (expected " +
                                            std::to_string(kTokenFileVersion) + ": uint16 tokens, or " +
                                            std::to_string(kTokenFileVersionWide) + ": uint32 tokens)"));
  const int64_t count = header[2], width = header[1] == kTokenFileVersionWide ? 4 : 2;
  const uint64_t payload = size - uint64_t(kHeaderBytes);
  if (count < 0 || uint64_t(count) * uint64_t(width) != payload)
    return fileError(path, Status::dataLoss("header says " + std::to_string(count) + " tokens (" +
                                            std::to_string(count * width) + " bytes) but the file has " +
                                            std::to_string(payload) + " bytes of tokens"));
  TokenFile f;
  f.path_ = path;
  f.tokens_.resize(count);
  if (width == 4) {
    if (count > 0 && !in.read(reinterpret_cast<char*>(f.tokens_.data()), std::streamsize(payload)))
      return fileError(path, Status::ioError("read failed"));
    return f;
  }
  std::vector<uint16_t> narrow(static_cast<size_t>(count));
  if (count > 0 && !in.read(reinterpret_cast<char*>(narrow.data()), std::streamsize(payload)))
    return fileError(path, Status::ioError("read failed"));
  std::copy(narrow.begin(), narrow.end(), f.tokens_.begin());
  return f;
}

StatusOr<BatchSampler> BatchSampler::create(std::shared_ptr<const TokenFile> file, const BatchConfig& cfg) {
  if (!file) return Status::invalidArgument("batch sampler: no token file");
  if (cfg.B <= 0 || cfg.T <= 0 || cfg.microbatches <= 0 || cfg.dp <= 0)
    return Status::invalidArgument("batch sampler: B, T, microbatches and dp must be positive");
  if (file->size() < cfg.T + 1)
    return fileError(file->path(), Status::invalidArgument(
                                       std::to_string(file->size()) + " tokens are too few for one sample of T+1 = " +
                                       std::to_string(cfg.T + 1) + " tokens"));
  BatchSampler s;
  s.file_ = std::move(file);
  s.cfg_ = cfg;
  s.samplesPerEpoch_ = (s.file_->size() - 1) / cfg.T;
  return s;
}

int64_t shufflePermute(uint64_t seed, int64_t epoch, int64_t p, int64_t n) {
  if (n <= 1) return 0;
  int bits = 2;
  while ((int64_t(1) << bits) < n) bits += 2;  // even, so the Feistel halves are balanced
  const int half = bits / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  const uint64_t key = random64(streamKey(seed, "llcdist.data.shuffle"), uint64_t(epoch), 0);
  uint64_t x = uint64_t(p);
  do {  // cycle walking: a permutation of [0, 2^bits) restricted to [0, n)
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 6; ++round) {
      const uint64_t f = random64(key, right, round) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

int64_t BatchSampler::sampleStart(int64_t s) const {
  const int64_t epoch = s / samplesPerEpoch_, p = s % samplesPerEpoch_;
  const int64_t index = cfg_.shuffle ? shufflePermute(cfg_.seed, epoch, p, samplesPerEpoch_) : p;
  return index * cfg_.T;
}

Status BatchSampler::microbatch(int64_t step, int64_t micro, int64_t dpRank, int32_t* inputs,
                                int32_t* targets) const {
  return microbatchChunk(step, micro, dpRank, PositionRuns{}, cfg_.T, inputs, targets);
}

Status BatchSampler::microbatchChunk(int64_t step, int64_t micro, int64_t dpRank, const PositionRuns& positions,
                                     int64_t S, int32_t* inputs, int32_t* targets) const {
  if (step < 0 || micro < 0 || micro >= cfg_.microbatches || dpRank < 0 || dpRank >= cfg_.dp)
    return Status::outOfRange("batch sampler: step " + std::to_string(step) + ", microbatch " +
                              std::to_string(micro) + ", dp rank " + std::to_string(dpRank) +
                              " is outside the configuration (M=" + std::to_string(cfg_.microbatches) +
                              ", dp=" + std::to_string(cfg_.dp) + ")");
  if (S < 0 || (S > 0 && (positions.minAt(S) < 0 || positions.maxAt(S) >= cfg_.T)))
    return Status::outOfRange("batch sampler: " + std::to_string(S) + " rows at positions " +
                              (S > 0 ? std::to_string(positions.minAt(S)) + ".." + std::to_string(positions.maxAt(S))
                                     : std::string("(none)")) +
                              " are outside the sequence of " + std::to_string(cfg_.T));
  const uint32_t* tok = file_->tokens().data();
  for (int64_t i = 0; i < cfg_.B; ++i) {
    const uint32_t* src = tok + sampleStart(globalSample(step, micro, dpRank, i));
    for (int64_t t = 0; t < S; ++t) {
      const int64_t pos = positions.at(t);
      inputs[i * S + t] = int32_t(src[pos]);
      targets[i * S + t] = int32_t(src[pos + 1]);
    }
  }
  return Status::ok();
}

}  // namespace llcdist::rt
