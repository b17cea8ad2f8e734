#include "llcdist/runtime/Rng.h"

#include <algorithm>
#include <cmath>

namespace llcdist::rt {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;  // Philox multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // key schedule increments

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

PhiloxKey splitKey(uint64_t k) { return {uint32_t(k), uint32_t(k >> 32)}; }

// Uniform in the open interval (0, 1) from 32 bits.
double toUnitOpen(uint32_t x) { return (double(x) + 0.5) * (1.0 / 4294967296.0); }

enum Stream : uint32_t { kNormalStream = 0, kUniformStream = 1 };

PhiloxCounter block(PhiloxKey key, uint64_t blockIndex, Stream stream) {
  return philox4x32_10({uint32_t(blockIndex), uint32_t(blockIndex >> 32), stream, 0}, key);
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c[0], p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k = {k[0] + kWeyl0, k[1] + kWeyl1};
  }
  return c;
}

uint64_t streamKey(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return splitmix64(splitmix64(seed) ^ h);
}

uint64_t random64(uint64_t key, uint64_t a, uint64_t b) {
  const PhiloxCounter r =
      philox4x32_10({uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32)}, splitKey(key));
  return (uint64_t(r[1]) << 32) | r[0];
}

void initNormal(float* out, uint64_t seed, std::string_view name, int64_t globalBegin, int64_t count,
                float std, float mean) {
  const PhiloxKey key = splitKey(streamKey(seed, name));
  int64_t i = globalBegin;
  const int64_t end = globalBegin + count;
  while (i < end) {
    const uint64_t c = uint64_t(i) / 4;
    const PhiloxCounter r = block(key, c, kNormalStream);
    double z[4];
    for (int pair = 0; pair < 2; ++pair) {
      const double radius = std::sqrt(-2.0 * std::log(toUnitOpen(r[2 * pair])));
      const double angle = 2.0 * M_PI * toUnitOpen(r[2 * pair + 1]);
      z[2 * pair] = radius * std::cos(angle);
      z[2 * pair + 1] = radius * std::sin(angle);
    }
    for (int64_t j = i - int64_t(4 * c); j < 4 && i < end; ++j, ++i)
      out[i - globalBegin] = static_cast<float>(mean + std * z[j]);
  }
}

void initUniform(float* out, uint64_t seed, std::string_view name, int64_t globalBegin, int64_t count,
                 float lo, float hi) {
  const PhiloxKey key = splitKey(streamKey(seed, name));
  int64_t i = globalBegin;
  const int64_t end = globalBegin + count;
  while (i < end) {
    const uint64_t c = uint64_t(i) / 4;
    const PhiloxCounter r = block(key, c, kUniformStream);
    for (int64_t j = i - int64_t(4 * c); j < 4 && i < end; ++j, ++i) {
      const double u = double(r[j]) * (1.0 / 4294967296.0);  // [0, 1)
      // Guard against rounding up to hi in fp32.
      out[i - globalBegin] = std::min(static_cast<float>(lo + (double(hi) - lo) * u), std::nextafter(hi, lo));
    }
  }
}

void fillConstant(float* out, int64_t count, float value) { std::fill_n(out, count, value); }

}  // namespace llcdist::rt
