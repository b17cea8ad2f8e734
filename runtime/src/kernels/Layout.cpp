// The layout family's CPU kernels: fill_zero (any dtype), split_fwd / split_bwd (column blocks of a row-
// major matrix) and shard_slice (ZeRO: this rank's block of every row; no communication).
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace llcdist::rt {
namespace {

using P = LayoutParams;
using Ctx = CpuKernelContext;

Status fillZero(const KernelCall& c, const P&, const Ctx&) {
  const size_t x = c.role("x");
  for (size_t k = 0; k < c.args[x].size(); ++k)
    std::memset(c.args[x][k], 0, size_t(c.argElems[x][k] * schema::elemTypeSize(c.type(x, k))));
  return Status::ok();
}

// x [rows, Σsizes] <-> parts [rows, sizes[p]].
Status split(const KernelCall& c, const P& p, const Ctx&) {
  const bool fwd = c.kind == schema::OpKind::kSplitFwd;
  const std::vector<void*>& parts = c.list(fwd ? "outs" : "douts");
  float* whole = c.F(fwd ? "x" : "dx");
  int64_t width = 0;
  for (int64_t s : p.sizes) width += s;
  int64_t col = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    float* part = static_cast<float*>(parts[i]);
    const int64_t w = p.sizes[i];
    for (int64_t r = 0; r < p.rows; ++r) {
      float* wr = whole + r * width + col;
      float* pr = part + r * w;
      if (fwd) std::memcpy(pr, wr, size_t(w) * 4);
      else std::memcpy(wr, pr, size_t(w) * 4);
    }
    col += w;
  }
  return Status::ok();
}

// y[o, k] = x[o, member·inner + k]: this rank's block of every row. With padded blocks x has `total`
// elements a row and y's elements past them are zero.
Status shardSlice(const KernelCall& c, const P& p, const Ctx&) {
  LLCDIST_ASSIGN_OR_RETURN(const int64_t total, checkShardSlice(c, p));
  const float* x = c.F("x");
  float* y = c.F("y");
  const int64_t begin = p.member * p.inner;
  const int64_t real = std::clamp<int64_t>(total - begin, 0, p.inner);
  for (int64_t o = 0; o < p.outer; ++o) {
    if (real > 0) std::memcpy(y + o * p.inner, x + o * total + begin, size_t(real) * 4);
    std::fill(y + o * p.inner + real, y + (o + 1) * p.inner, 0.0f);
  }
  return Status::ok();
}

}  // namespace

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------
void registerCpuLayoutKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  addCpuKernel<P>(t, K::kFillZero, fillZero);
  addCpuKernel<P>(t, K::kSplitFwd, split);
  addCpuKernel<P>(t, K::kSplitBwd, split);
  addCpuKernel<P>(t, K::kShardSlice, shardSlice);
}

}  // namespace llcdist::rt
