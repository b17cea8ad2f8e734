// Rotary position embedding, HF Llama convention (rotate_half; GPT-J's rotate_every_two when interleaved): the CPU
// kernels over a RopeTable
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
// copied (Phi's partial rotary embedding: its pass-through half, and that half's gradient). Pair i is
// dims (i, i + rd/2), or (2i, 2i + 1) when interleaved (GPT-J), by the angle of the table's column i.
void rotate(const RopeTable& t, const float* x, float* y, int64_t B, int64_t S, int64_t n, int64_t hd, int64_t rd,
            float sign, bool interleaved) {
  const int64_t half = rd / 2;
  const int64_t loStride = interleaved ? 2 : 1, hiOffset = interleaved ? 1 : half;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* c = t.cos.data() + s * rd;
      const float* sn = t.sin.data() + s * rd;
      for (int64_t h = 0; h < n; ++h) {
        const int64_t off = ((b * S + s) * n + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t l = off + loStride * i, h = l + hiOffset;
          const float lo = x[l], hi = x[h];
          y[l] = lo * c[i] + (-hi) * (sign * sn[i]);
          y[h] = hi * c[half + i] + lo * (sign * sn[half + i]);
        }
        if (x != y)
          for (int64_t i = rd; i < hd; ++i) y[off + i] = x[off + i];
      }
    }
}

}  // namespace

Status ropeForward(const RopeTable& table, const float* x, float* y, int64_t B, int64_t S, int64_t n, int64_t hd,
                   int64_t rotaryDim, bool interleaved) {
  LLCDIST_RETURN_IF_ERROR(checkRopeTable(table, S, hd, rotaryDim));
  rotate(table, x, y, B, S, n, hd, rotaryDim == 0 ? hd : rotaryDim, 1.0f, interleaved);
  return Status::ok();
}

Status ropeBackward(const RopeTable& table, const float* dy, float* dx, int64_t B, int64_t S, int64_t n, int64_t hd,
                    int64_t rotaryDim, bool interleaved) {
  LLCDIST_RETURN_IF_ERROR(checkRopeTable(table, S, hd, rotaryDim));
  rotate(table, dy, dx, B, S, n, hd, rotaryDim == 0 ? hd : rotaryDim, -1.0f, interleaved);
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuRopeKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = RopeParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kRopeFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (!p.table) return Status::internal("rope_fwd without a rope table");
    return ropeForward(*p.table, c.F("x"), c.F("y"), p.B, p.S, p.n, p.hd, p.rotaryDim, p.interleaved);
  });
  addCpuKernel<P>(t, K::kRopeBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (!p.table) return Status::internal("rope_bwd without a rope table");
    return ropeBackward(*p.table, c.F("dy"), c.F("dx"), p.B, p.S, p.n, p.hd, p.rotaryDim, p.interleaved);
  });
}

}  // namespace llcdist::rt
