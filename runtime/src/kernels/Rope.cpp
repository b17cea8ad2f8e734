// Rotary position embedding, HF Llama convention (rotate_half): the CPU kernels over a RopeTable
// (src/ops/Rope.cpp builds it). See Kernels.h for the contract.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <cmath>
#include <string>

namespace llcdist::rt {

namespace {


// sign = +1: y = x*cos + rotate_half(x)*sin; sign = -1: the transpose (rotation by -angle). The first
// rd dims of each head rotate (rotate_half within them, the table's rows rd wide); dims [rd, hd) are
// copied (Phi's partial rotary embedding: its pass-through half, and that half's gradient).
void rotate(const RopeTable& t, const float* x, float* y, int64_t B, int64_t S, int64_t n, int64_t hd, int64_t rd,
            float sign) {
  const int64_t half = rd / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* c = t.cos.data() + s * rd;
      const float* sn = t.sin.data() + s * rd;
      for (int64_t h = 0; h < n; ++h) {
        const int64_t off = ((b * S + s) * n + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float lo = x[off + i], hi = x[off + half + i];
          y[off + i] = lo * c[i] + (-hi) * (sign * sn[i]);
          y[off + half + i] = hi * c[half + i] + lo * (sign * sn[half + i]);
        }
        if (x != y)
          for (int64_t i = rd; i < hd; ++i) y[off + i] = x[off + i];
      }
    }
}

}  // namespace

Status ropeForward(const RopeTable& table, const float* x, float* y, int64_t B, int64_t S, int64_t n,
                   int64_t hd, int64_t rotaryDim) {
  LLCDIST_RETURN_IF_ERROR(checkRopeTable(table, S, hd, rotaryDim));
  rotate(table, x, y, B, S, n, hd, rotaryDim == 0 ? hd : rotaryDim, 1.0f);
  return Status::ok();
}

Status ropeBackward(const RopeTable& table, const float* dy, float* dx, int64_t B, int64_t S, int64_t n,
                    int64_t hd, int64_t rotaryDim) {
  LLCDIST_RETURN_IF_ERROR(checkRopeTable(table, S, hd, rotaryDim));
  rotate(table, dy, dx, B, S, n, hd, rotaryDim == 0 ? hd : rotaryDim, -1.0f);
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuRopeKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = RopeParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kRopeFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (!p.table) return Status::internal("rope_fwd without a rope table");
    return ropeForward(*p.table, c.F("x"), c.F("y"), p.B, p.S, p.n, p.hd, p.rotaryDim);
  });
  addCpuKernel<P>(t, K::kRopeBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (!p.table) return Status::internal("rope_bwd without a rope table");
    return ropeBackward(*p.table, c.F("dy"), c.F("dx"), p.B, p.S, p.n, p.hd, p.rotaryDim);
  });
}

}  // namespace llcdist::rt
