// Ring attention's CUDA kernels (src/cuda/kernels/AttentionBlock.cu) against the CPU's
// (src/kernels/AttentionBlock.cpp) on the same inputs: every step of a cp = 4 ring for the first and
// the last member, both layouts (the load-balanced one's two runs of positions on both sides: rows that
// see none, part or all of a block's keys), grouped-query heads, causal and with Mistral's sliding window
// (inside the load-balanced layout's chunks of 8, across them, wider than a rank's rows), and with
// BLOOM's ALiBi by global position (the second half of 8 heads' slopes; with a window too); and
// attention_merge with −inf sides.
#include "KernelHarness.h"

#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Positions.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;

constexpr int64_t kN = 4, kT = 64, kS = kT / kN, kB = 2, kNh = 4, kNkv = 2, kHd = 40;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The block of step `step` on member c of the ring (attr window: 0 none; alibi: none by default).
AttentionParams blockParams(CpLayout layout, int64_t c, int64_t step, int64_t window, Alibi alibi) {
  AttentionParams p{kB, kS, kNh, kNkv, kHd};
  p.qPos = contextParallelPositions(kT, kN, c, layout);
  p.kvPos = contextParallelPositions(kT, kN, (c - step + kN) % kN, layout);
  p.window = window;
  p.alibi = alibi;
  return p;
}

TEST(CudaRingAttentionTest, EveryStepsBlockMatchesTheCpu) {
  LLCDIST_REQUIRE_GPU();
  const int64_t qElems = kB * kS * kNh * kHd, kvElems = kB * kS * kNkv * kHd, rows = kB * kNh * kS;
  const std::vector<float> q = randomF32(qElems, 61), k = randomF32(kvElems, 62), v = randomF32(kvElems, 63),
                           dout = randomF32(qElems, 64);
  struct Mask {
    int64_t window;
    Alibi alibi;
  };
  for (const Mask& mask :
       {Mask{0, {}}, Mask{3, {}}, Mask{8, {}}, Mask{20, {}}, Mask{40, {}}, Mask{0, {8, 4}}, Mask{20, {8, 4}}})
    for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kLoadBalanced})
      for (int64_t c : {int64_t(0), kN - 1})
        for (int64_t step = 0; step < kN; ++step) {
          const int64_t window = mask.window;
          SCOPED_TRACE(std::string(schema::cpLayoutName(layout)) + " member " + std::to_string(c) + " step " +
                       std::to_string(step) + " window " + std::to_string(window) + " alibi heads " +
                       std::to_string(mask.alibi.heads));
          const AttentionParams p = blockParams(layout, c, step, window, mask.alibi);
          KernelCase(K::kAttentionBlockFwd, p)
              .f32("q", q)
              .f32("k", k)
              .f32("v", v)
              .f32("out", randomF32(qElems, 65))
              .f32("lse", randomF32(rows, 66))
              .expectMatch(1e-4, 1e-4);
          // The backward from this block's own (out, lse) as the CPU computes them (rows that see no key:
          // lse −inf, nothing added), onto nonzero gradients (the block's share is added).
          std::vector<float> out(static_cast<size_t>(qElems)), lse(static_cast<size_t>(rows));
          ASSERT_TRUE(attentionBlockForward(attentionBlock(attentionShape(p), p.qPos, p.kvPos), q.data(), k.data(),
                                            v.data(), out.data(), lse.data())
                          .isOk());
          KernelCase(K::kAttentionBlockBwd, p)
              .f32("dout", dout)
              .f32("q", q)
              .f32("k", k)
              .f32("v", v)
              .f32("out", out)
              .f32("lse", lse)
              .f32("dq", randomF32(qElems, 67))
              .f32("dk", randomF32(kvElems, 68))
              .f32("dv", randomF32(kvElems, 69))
              .expectMatch(1e-4, 1e-4);
        }
}

TEST(CudaRingAttentionTest, MergeMatchesTheCpu) {
  LLCDIST_REQUIRE_GPU();
  const int64_t qElems = kB * kS * kNh * kHd, rows = kB * kNh * kS;
  std::vector<float> lse = randomF32(rows, 71, -3.0f, 3.0f), lseB = randomF32(rows, 72, -3.0f, 3.0f);
  for (int64_t i = 0; i < rows; i += 5) lse[size_t(i)] = kNegInf;   // this side saw no key of the row
  for (int64_t i = 1; i < rows; i += 7) lseB[size_t(i)] = kNegInf;  // the other side saw none
  lse[10] = lseB[10] = kNegInf;                                     // neither
  AttentionParams p;                                                // merge reads B, S, nh, hd
  p.B = kB;
  p.S = kS;
  p.nh = kNh;
  p.hd = kHd;
  KernelCase(K::kAttentionMerge, p)
      .f32("out", randomF32(qElems, 73))
      .f32("lse", lse)
      .f32("out_b", randomF32(qElems, 74))
      .f32("lse_b", lseB)
      .expectMatch(1e-6, 1e-6);
}

// Key positions that do not increase (the second run inside the first) are the CPU's InvalidArgument, and
// the CUDA kernels' too (their key ranges assume increasing positions), before anything is launched.
TEST(CudaRingAttentionTest, KeyPositionsThatDoNotIncreaseAreAnError) {
  LLCDIST_REQUIRE_GPU();
  AttentionParams p{kB, kS, kNh, kNkv, kHd};
  p.qPos = PositionRuns::from(kS);
  p.kvPos = {10, kS / 2, 12};  // rows [0, 8) at 10.., rows [8, 16) at 12..: inside the first run
  const AttentionBlock block = attentionBlock({kB, kS, kNh, kNkv, kHd, 0}, p.qPos, p.kvPos);
  EXPECT_EQ(attentionBlockForward(block, nullptr, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  for (K kind : {K::kAttentionBlockFwd, K::kAttentionBlockBwd}) {
    const CudaKernel* kernel = cudaKernel(kind);
    ASSERT_NE(kernel, nullptr);
    KernelCall call;
    call.kind = kind;
    call.params = p;
    call.args.resize(schema::opSpec(call.kind).numArgs);
    call.argElems.resize(call.args.size());
    CudaKernelContext ctx;  // nothing is launched: the checks come first
    const Status s = (*kernel)(call, ctx);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
    EXPECT_NE(s.message().find("key positions must increase"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
