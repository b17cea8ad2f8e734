// The plan's attention as cuDNN SDPA problems (AttentionPlan.h). CUDA-free.
#include "cuda/host/AttentionPlan.h"

#include "llcdist/runtime/Kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <tuple>

namespace llcdist::rt::cuda {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

auto keyTuple(const AttentionKey& k) {
  return std::make_tuple(k.B, k.S, k.nh, k.nkv, k.hd, k.backward, k.deterministic, k.scaleBits, int(k.dtype),
                         k.packedQkv, k.packedGrad, k.window);
}

bool isGradient(AttentionTensor t) {
  return t == AttentionTensor::kDQ || t == AttentionTensor::kDK || t == AttentionTensor::kDV;
}

bool isQueryShaped(AttentionTensor t) {
  return t == AttentionTensor::kQ || t == AttentionTensor::kO || t == AttentionTensor::kDO ||
         t == AttentionTensor::kDQ;
}

// "cuDNN 9.10.1" from 91001 (cudnnGetVersion: major·10000 + minor·100 + patch since cuDNN 9).
std::string versionName(int64_t v) {
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

AttentionProblem attentionProblem(const AttentionParams& p, bool backward, bool deterministic,
                                  schema::ElemType dtype) {
  AttentionProblem a;
  a.B = p.B;
  a.S = p.S;
  a.nh = p.nh;
  a.nkv = p.nkv;
  a.hd = p.hd;
  a.backward = backward;
  a.deterministic = backward && deterministic;
  // As src/kernels/Attention.cpp (and the own CUDA kernel) round it; hd <= 0 leaves 0, which the support
  // check names.
  a.scale = p.hd > 0 ? attentionScale(p.hd) : 0.0f;
  a.dtype = dtype;
  a.packedQkv = p.packedQkv;
  a.packedGrad = backward && p.packedGrad;
  a.window = p.window >= p.S ? 0 : p.window;  // a window >= S masks nothing: the causal problem
  a.alibi = p.alibi.on();
  return a;
}

std::string describeAttention(const AttentionProblem& p) {
  std::ostringstream os;
  os << "attention " << (p.backward ? "backward" : "forward") << " B=" << p.B << " S=" << p.S << " nh=" << p.nh
     << " nkv=" << p.nkv << " hd=" << p.hd << " " << schema::elemTypeName(p.dtype) << " causal";
  if (p.window != 0) os << " window=" << p.window;
  if (p.alibi) os << " alibi";
  os << " scale=" << p.scale;
  if (p.deterministic) os << " deterministic";
  if (p.packedQkv) os << " packed-qkv";
  if (p.packedGrad) os << " packed-dqkv";
  return os.str();
}

bool AttentionKey::operator<(const AttentionKey& o) const { return keyTuple(*this) < keyTuple(o); }
bool AttentionKey::operator==(const AttentionKey& o) const { return keyTuple(*this) == keyTuple(o); }

AttentionKey attentionKey(const AttentionProblem& p) {
  AttentionKey k;
  k.B = p.B;
  k.S = p.S;
  k.nh = p.nh;
  k.nkv = p.nkv;
  k.hd = p.hd;
  k.backward = p.backward;
  k.deterministic = p.deterministic;
  k.scaleBits = bitsOf(p.scale);
  k.dtype = p.dtype;
  k.packedQkv = p.packedQkv;
  k.packedGrad = p.packedGrad;
  k.window = p.window;
  return k;
}

size_t AttentionKeyHash::operator()(const AttentionKey& k) const {
  // boost::hash_combine's mixing over every field.
  size_t h = 0;
  const auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (int64_t v : {k.B, k.S, k.nh, k.nkv, k.hd, k.window}) mix(std::hash<int64_t>()(v));
  mix(size_t(k.backward) | size_t(k.deterministic) << 1 | size_t(k.packedQkv) << 2 | size_t(k.packedGrad) << 3);
  mix(std::hash<uint32_t>()(k.scaleBits));
  mix(size_t(k.dtype));
  return h;
}

const char* attentionTensorName(AttentionTensor t) {
  switch (t) {
    case AttentionTensor::kQ: return "Q";
    case AttentionTensor::kK: return "K";
    case AttentionTensor::kV: return "V";
    case AttentionTensor::kO: return "O";
    case AttentionTensor::kStats: return "Stats";
    case AttentionTensor::kDO: return "dO";
    case AttentionTensor::kDQ: return "dQ";
    case AttentionTensor::kDK: return "dK";
    case AttentionTensor::kDV: return "dV";
  }
  return "?";
}

bool attentionTensorUsed(const AttentionProblem& p, AttentionTensor t) {
  if (p.backward) return true;
  return t == AttentionTensor::kQ || t == AttentionTensor::kK || t == AttentionTensor::kV ||
         t == AttentionTensor::kO || t == AttentionTensor::kStats;
}

AttentionLayout attentionLayout(const AttentionProblem& p, AttentionTensor t) {
  AttentionLayout l;
  if (t == AttentionTensor::kStats) {
    // lse [B,nh,S]: (b,h,s) at (b·nh + h)·S + s.
    l.dim = {p.B, p.nh, p.S, 1};
    l.stride = {p.nh * p.S, p.S, 1, 1};
    return l;
  }
  // [B,S,heads,hd] row-major: (b,h,s,d) at ((b·S + s)·heads + h)·hd + d.
  const int64_t heads = isQueryShaped(t) ? p.nh : p.nkv;
  const bool output = t == AttentionTensor::kO || t == AttentionTensor::kDO;
  const bool packed = !output && (isGradient(t) ? p.packedGrad : p.packedQkv);
  const int64_t row = (packed ? p.nh + 2 * p.nkv : heads) * p.hd;
  l.dim = {p.B, heads, p.S, p.hd};
  l.stride = {p.S * row, p.hd, row, 1};
  return l;
}

int64_t attentionElems(const AttentionProblem& p, AttentionTensor t) {
  const AttentionLayout l = attentionLayout(p, t);
  int64_t last = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (l.dim[i] <= 0) return 0;
    last += (l.dim[i] - 1) * l.stride[i];
  }
  return last + 1;
}

schema::ElemType attentionTensorType(const AttentionProblem& p, AttentionTensor t) {
  return t == AttentionTensor::kStats ? schema::ElemType::kF32 : p.dtype;
}

std::string cudnnAttentionUnsupportedReason(const AttentionProblem& p, const CudnnTarget& target) {
  const std::string hd = "head dim " + std::to_string(p.hd);
  const int major = target.smVersion / 10;
  const int64_t v = target.cudnnVersion;
  if (p.B < 1 || p.S < 1 || p.nh < 1 || p.nkv < 1 || p.hd < 1)
    return "B, S, nh, nkv and hd must all be positive";
  if (p.nh % p.nkv != 0)
    return "num_heads " + std::to_string(p.nh) + " is not a multiple of num_kv_heads " + std::to_string(p.nkv);
  if (!std::isfinite(p.scale) || p.scale <= 0.0f) return "the softmax scale must be finite and positive";
  if (p.window < 0) return "window " + std::to_string(p.window) + " must be >= 1 (a sliding window) or 0 (none)";
  if (p.window > std::numeric_limits<int32_t>::max())
    return "window " + std::to_string(p.window) + " does not fit cuDNN's int diagonal band left bound";
  if (p.alibi)
    return "ALiBi: cuDNN's alibi mask takes its slopes from the graph's head count, not the model's (a tp "
           "rank holds a slice of the heads): the own kernel adds the bias";
  if (p.dtype != schema::ElemType::kBF16)
    return "cuDNN SDPA takes bf16 (or fp16) tensors, not " + std::string(schema::elemTypeName(p.dtype));
  if (target.smVersion < 80)
    return "cuDNN SDPA needs compute capability 8.0 or newer (the device has " + std::to_string(major) + "." +
           std::to_string(target.smVersion % 10) + ")";
  if (v < 90000) return "cuDNN 9 is required (" + versionName(v) + " is loaded)";
  if (v == 91000 || v == 91001)
    return versionName(v) + " has known SDPA bugs (the frontend refuses it): use 9.10.2 or newer";
  if (p.hd % 8 != 0) return hd + " is not a multiple of 8";
  if (p.hd > 256) return hd + " is larger than 256";
  if (!p.backward) {
    if (major == 8 && v <= 90900 && p.hd > 128)
      return hd + " is larger than 128 (sm_8x with cuDNN 9.9 or older)";
    if (major == 10 && v < 90900 && p.hd > 128)
      return hd + " is larger than 128 (sm_10x with cuDNN older than 9.9)";
    return "";
  }
  if (p.S == 1) return "the backward does not take S = 1 (s_q = s_kv = 1)";
  if (major == 10 && p.deterministic && v < 91800)
    return "the deterministic backward on sm_10x needs cuDNN 9.18 or newer";
  if (major == 9) return "";
  if (major == 10 && v >= 91100) {
    if (p.hd > 128 && !(p.hd == 256 && v >= 92300))
      return hd + " is larger than 128 in the backward on sm_10x (256 needs cuDNN 9.23)";
    return "";
  }
  if (p.hd > 128) return hd + " is larger than 128 in the backward on sm_" + std::to_string(target.smVersion);
  return "";
}

Status checkAttentionPointer(AttentionTensor t, const void* p) {
  if (!p) return Status::invalidArgument(std::string("cuDNN attention: a null ") + attentionTensorName(t) + " pointer");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a % uintptr_t(kAttentionAlignment) != 0) {
    std::ostringstream os;
    os << "cuDNN attention: " << attentionTensorName(t) << " at " << p << " is not " << kAttentionAlignment
       << "-byte aligned";
    return Status::invalidArgument(os.str());
  }
  return Status::ok();
}

double attentionForwardFlops(const AttentionProblem& p) {
  return 4.0 * double(p.B) * double(p.nh) * attentionScorePairs(p.S, p.window) * double(p.hd);
}
double attentionBackwardFlops(const AttentionProblem& p) { return 2.5 * attentionForwardFlops(p); }

}  // namespace llcdist::rt::cuda
