// The CUDA backend's row-major -> column-major GEMM mapping (cuda/host/GemmPlan.h), checked on the CPU:
// every linear op kind, both weight layouts, accumulate on and off, with and without bias, computed
// through its GemmProblem and the naive column-major reference (leading dimensions as cuBLAS defines
// them) and compared with the CPU reference kernels (Kernels.h). What the cuBLASLt runner is handed is
// exactly such a problem, so this proves the mapping without a GPU. Also the cache key and the
// alignment check.
#include "llcdist/runtime/Kernels.h"

#include "cuda/host/GemmPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

std::vector<float> random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

void expectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::fabs(double(got[i]) - double(want[i])) <= 1e-5 + 1e-5 * std::fabs(double(want[i]));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: gemm " << got[i] << " vs cpu " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

struct Sizes {
  int64_t M, K, N;
};
struct MappingCase {
  Sizes sizes;
  WeightLayout layout;
  bool accumulate;
  bool bias;
};
void PrintTo(const MappingCase& c, std::ostream* os) {
  *os << "M" << c.sizes.M << "_K" << c.sizes.K << "_N" << c.sizes.N
      << (c.layout == WeightLayout::kOutIn ? "_out_in" : "_in_out") << (c.accumulate ? "_acc" : "")
      << (c.bias ? "_bias" : "");
}

class GemmMappingTest : public ::testing::TestWithParam<MappingCase> {
protected:
  LinearParams params() const {
    LinearParams p;
    p.M = GetParam().sizes.M;
    p.K = GetParam().sizes.K;
    p.N = GetParam().sizes.N;
    p.layout = GetParam().layout;
    p.accumulate = GetParam().accumulate;
    return p;
  }
  const LinearParams p = params();
  const std::vector<float> x = random(p.M * p.K, 1), w = random(p.N * p.K, 2), b = random(p.N, 3),
                           dy = random(p.M * p.N, 4);

  const float* operand(GemmOperand o) const {
    switch (o) {
      case GemmOperand::kX: return x.data();
      case GemmOperand::kW: return w.data();
      case GemmOperand::kDy: return dy.data();
    }
    return nullptr;
  }
  int64_t operandElems(GemmOperand o) const { return int64_t(o == GemmOperand::kX ? x.size() : o == GemmOperand::kW ? w.size() : dy.size()); }

  // The output buffer's start: NaN where the op overwrites (beta 0 must not read C), random values to
  // accumulate into otherwise.
  std::vector<float> initialOutput(int64_t n, bool accumulate) const {
    return accumulate ? random(n, 5) : std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN());
  }

  // C through the problem: checks the problem's shape first (well formed, operands exactly their
  // buffers, C exactly the output), then runs the reference.
  void runGemm(const GemmProblem& g, float* bias, std::vector<float>& out, std::vector<float>* aux = nullptr) const {
    ASSERT_TRUE(checkGemmProblem(g).isOk()) << checkGemmProblem(g).toString();
    EXPECT_NE(g.a, g.b) << describeGemm(g);
    EXPECT_EQ(gemmElemsA(g), operandElems(g.a)) << describeGemm(g);
    EXPECT_EQ(gemmElemsB(g), operandElems(g.b)) << describeGemm(g);
    EXPECT_EQ(gemmElemsC(g), int64_t(out.size())) << describeGemm(g);
    if (aux) {  // the aux matrix is shaped as C
      EXPECT_EQ(g.ldAux, g.ldc) << describeGemm(g);
      EXPECT_EQ(int64_t(aux->size()), gemmElemsC(g)) << describeGemm(g);
    }
    referenceColumnMajorGemm(g, operand(g.a), operand(g.b), out.data(), bias, aux ? aux->data() : nullptr);
  }
};

// linear_fwd: bias or not (and the accumulate flag, which it ignores); the backward ops: accumulate or
// not (they have no bias).
class ForwardGemmTest : public GemmMappingTest {};
class BackwardGemmTest : public GemmMappingTest {};

TEST_P(ForwardGemmTest, MatchesCpuKernel) {
  const bool hasBias = GetParam().bias;
  const GemmProblem g = linearForwardGemm(p, hasBias);
  EXPECT_EQ(g.beta, 0.0f);  // linear_fwd never accumulates, whatever the params say
  EXPECT_EQ(g.epilogue, hasBias ? GemmEpilogue::kBias : GemmEpilogue::kNone);
  EXPECT_EQ(g.m, p.N);  // the bias is per row of the column-major C: per output feature
  std::vector<float> want(size_t(p.M * p.N)), got = initialOutput(p.M * p.N, false);
  linearForward(x.data(), w.data(), hasBias ? b.data() : nullptr, want.data(), p.M, p.K, p.N, p.layout);
  std::vector<float> bias = b;
  ASSERT_NO_FATAL_FAILURE(runGemm(g, hasBias ? bias.data() : nullptr, got));
  expectClose(got, want, "y");
}

// linear_fwd with gelu (the GELU_AUX(_BIAS) epilogue): C is the gelu buffer, the aux matrix y; both as
// the CPU's linear_fwd, then gelu_tanh_fwd of y.
TEST_P(ForwardGemmTest, WithGeluMatchesCpuKernels) {
  const bool hasBias = GetParam().bias;
  const GemmProblem g = linearForwardGemm(p, hasBias, GemmDType::kF32, GemmDType::kF32, /*gelu=*/true);
  EXPECT_EQ(g.epilogue, hasBias ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluAux);
  std::vector<float> wantY(size_t(p.M * p.N)), wantGelu(wantY.size());
  linearForward(x.data(), w.data(), hasBias ? b.data() : nullptr, wantY.data(), p.M, p.K, p.N, p.layout);
  geluTanhForward(wantY.data(), wantGelu.data(), p.M * p.N);
  std::vector<float> bias = b, gotGelu = initialOutput(p.M * p.N, false), gotY = gotGelu;
  ASSERT_NO_FATAL_FAILURE(runGemm(g, hasBias ? bias.data() : nullptr, gotGelu, &gotY));
  expectClose(gotY, wantY, "y (aux)");
  expectClose(gotGelu, wantGelu, "gelu");
}

// linear_bwd_input with gelu_x (the DGELU epilogue, written, never accumulated): the CPU's
// linear_bwd_input, then gelu_tanh_bwd of it with gelu_x.
TEST_P(BackwardGemmTest, InputWithGeluGradientMatchesCpuKernels) {
  const GemmProblem g = linearBackwardInputGemm(p, GemmDType::kF32, GemmDType::kF32, /*dgelu=*/true);
  if (p.accumulate) {  // the GELU epilogues write C: an accumulating one is malformed
    EXPECT_FALSE(checkGemmProblem(g).isOk()) << describeGemm(g);
    return;
  }
  EXPECT_EQ(g.epilogue, GemmEpilogue::kDGelu);
  std::vector<float> geluX = random(p.M * p.K, 6), want(size_t(p.M * p.K));
  linearBackwardInput(dy.data(), w.data(), want.data(), p.M, p.K, p.N, p.layout, false);
  geluTanhBackward(want.data(), geluX.data(), want.data(), p.M * p.K);
  std::vector<float> got = initialOutput(p.M * p.K, false), aux = geluX;
  ASSERT_NO_FATAL_FAILURE(runGemm(g, nullptr, got, &aux));
  expectClose(got, want, "dx");
  EXPECT_EQ(aux, geluX) << "DGELU reads its aux matrix";
}

TEST_P(BackwardGemmTest, InputMatchesCpuKernel) {
  const GemmProblem g = linearBackwardInputGemm(p);
  EXPECT_EQ(g.beta, p.accumulate ? 1.0f : 0.0f);
  EXPECT_EQ(g.epilogue, GemmEpilogue::kNone);
  std::vector<float> want = initialOutput(p.M * p.K, p.accumulate), got = want;
  linearBackwardInput(dy.data(), w.data(), want.data(), p.M, p.K, p.N, p.layout, p.accumulate);
  ASSERT_NO_FATAL_FAILURE(runGemm(g, nullptr, got));
  expectClose(got, want, "dx");
}

// The fused bias gradient (linear_bwd_weight with db): the epilogue sums dy over the GEMM's k, which is
// linear_bwd_bias's column sums: BGRADB where dy is B (out_in), BGRADA where it is A (in_out). (The
// epilogue writes the sums; the kernel adds them into db.)
TEST_P(BackwardGemmTest, WeightWithBiasGradientMatchesCpuKernels) {
  const GemmProblem g = linearBackwardWeightGemm(p, GemmDType::kF32, GemmDType::kF32, /*biasGrad=*/true);
  EXPECT_EQ(g.epilogue, p.layout == WeightLayout::kOutIn ? GemmEpilogue::kBiasGradB : GemmEpilogue::kBiasGradA);
  EXPECT_EQ(g.epilogue == GemmEpilogue::kBiasGradA ? g.a : g.b, GemmOperand::kDy);
  EXPECT_EQ(g.epilogue == GemmEpilogue::kBiasGradA ? g.m : g.n, p.N);  // one sum per output feature
  EXPECT_EQ(g.k, p.M);                                                  // over the tokens
  std::vector<float> want = initialOutput(p.N * p.K, p.accumulate), got = want;
  linearBackwardWeight(dy.data(), x.data(), want.data(), p.M, p.K, p.N, p.layout, p.accumulate);
  std::vector<float> wantDb(size_t(p.N)), gotDb(size_t(p.N), std::numeric_limits<float>::quiet_NaN());
  linearBackwardBias(dy.data(), wantDb.data(), p.M, p.N, /*accumulate=*/false);
  ASSERT_NO_FATAL_FAILURE(runGemm(g, gotDb.data(), got));
  expectClose(got, want, "dw");
  expectClose(gotDb, wantDb, "db");
}

TEST_P(BackwardGemmTest, WeightMatchesCpuKernel) {
  const GemmProblem g = linearBackwardWeightGemm(p);
  EXPECT_EQ(g.beta, p.accumulate ? 1.0f : 0.0f);
  EXPECT_EQ(g.epilogue, GemmEpilogue::kNone);
  std::vector<float> want = initialOutput(p.N * p.K, p.accumulate), got = want;
  linearBackwardWeight(dy.data(), x.data(), want.data(), p.M, p.K, p.N, p.layout, p.accumulate);
  ASSERT_NO_FATAL_FAILURE(runGemm(g, nullptr, got));
  expectClose(got, want, "dw");
}

std::vector<MappingCase> mappingCases(bool withBias) {
  std::vector<MappingCase> out;
  for (Sizes s : {Sizes{5, 37, 19}, Sizes{1, 3, 2}, Sizes{16, 8, 24}, Sizes{7, 1, 1}, Sizes{1, 1, 9}})
    for (WeightLayout l : {WeightLayout::kOutIn, WeightLayout::kInOut})
      for (bool acc : {false, true})
        for (bool bias : {false, true})
          if (withBias || !bias) out.push_back({s, l, acc, bias});
  return out;
}
INSTANTIATE_TEST_SUITE_P(LinearFwd, ForwardGemmTest, ::testing::ValuesIn(mappingCases(true)));
INSTANTIATE_TEST_SUITE_P(LinearBwd, BackwardGemmTest, ::testing::ValuesIn(mappingCases(false)));

// The reference against an independent triple loop: transposes and leading dimensions larger than the
// row counts (padded columns must be neither read nor written).
// The GELU epilogues write C (beta 0) through an aux matrix of at least m rows whose leading dimension
// cuBLASLt wants a multiple of 8: a problem that breaks the first two is malformed, the third is one the
// runner answers NotFound for (the kernels then run the GEMM and the own GELU map).
TEST(GemmEpilogueTest, GeluAuxRules) {
  LinearParams p;
  p.M = 4;
  p.K = 16;
  p.N = 24;
  GemmProblem g = linearForwardGemm(p, true, GemmDType::kBF16, GemmDType::kBF16, /*gelu=*/true);
  EXPECT_TRUE(checkGemmProblem(g).isOk()) << checkGemmProblem(g).toString();
  EXPECT_EQ(gemmEpilogueUnsupportedReason(g), "");
  EXPECT_NE(describeGemm(g).find("gelu_aux_bias (ldaux=24)"), std::string::npos) << describeGemm(g);
  g.ldAux = 12;
  EXPECT_FALSE(checkGemmProblem(g).isOk());
  g.ldAux = 28;
  EXPECT_TRUE(checkGemmProblem(g).isOk());
  EXPECT_NE(gemmEpilogueUnsupportedReason(g).find("not a multiple of 8"), std::string::npos);
  p.accumulate = true;
  g = linearBackwardInputGemm(p, GemmDType::kBF16, GemmDType::kBF16, /*dgelu=*/true);
  EXPECT_EQ(g.ldAux, p.K);
  EXPECT_NE(checkGemmProblem(g).toString().find("beta 0"), std::string::npos) << checkGemmProblem(g).toString();
  // The aux matrix counts in the alignment and the cache key.
  alignas(16) static uint16_t buf[64];
  EXPECT_EQ(gemmAlignmentClass(buf, buf, buf, nullptr, buf + 1), 2);
  EXPECT_FALSE(checkGemmAlignment(buf, buf, buf, GemmDType::kF32, GemmDType::kF32, nullptr, buf + 1).isOk());
  GemmProblem a = linearForwardGemm(p, false, GemmDType::kBF16, GemmDType::kBF16, true), b = a;
  b.ldAux = 32;
  EXPECT_NE(gemmKey(a, 16, true), gemmKey(b, 16, true));
}

TEST(ReferenceGemmTest, HonoursTransposesAndLeadingDimensions) {
  const int64_t m = 3, n = 4, k = 5, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      GemmProblem g;
      g.transA = ta;
      g.transB = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.lda = (ta ? k : m) + pad;
      g.ldb = (tb ? n : k) + pad;
      g.ldc = m + pad;
      g.beta = 1.0f;
      g.epilogue = GemmEpilogue::kBias;
      ASSERT_TRUE(checkGemmProblem(g).isOk());
      const std::vector<float> A = random(g.lda * (ta ? m : k), 10), B = random(g.ldb * (tb ? k : n), 11);
      std::vector<float> bias = random(m, 12);
      std::vector<float> C = random(g.ldc * n, 13);
      const std::vector<float> C0 = C;
      referenceColumnMajorGemm(g, A.data(), B.data(), C.data(), bias.data());
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < g.ldc; ++i) {
          if (i >= m) {
            EXPECT_EQ(C[i + j * g.ldc], C0[i + j * g.ldc]) << "padding written";
            continue;
          }
          double s = C0[i + j * g.ldc] + double(bias[i]);
          for (int64_t p = 0; p < k; ++p) {
            const float a = ta ? A[p + i * g.lda] : A[i + p * g.lda];
            const float b = tb ? B[j + p * g.ldb] : B[p + j * g.ldb];
            s += double(a) * b;
          }
          EXPECT_NEAR(C[i + j * g.ldc], s, 1e-5) << "ta=" << ta << " tb=" << tb << " i=" << i << " j=" << j;
        }
    }
}

TEST(GemmProblemTest, RejectsMalformedProblems) {
  LinearParams p;
  p.M = 5;
  p.K = 37;
  p.N = 19;
  GemmProblem g = linearForwardGemm(p, false);
  EXPECT_TRUE(checkGemmProblem(g).isOk());
  GemmProblem bad = g;
  bad.lda = 1;
  EXPECT_FALSE(checkGemmProblem(bad).isOk());
  bad = g;
  bad.ldc = g.m - 1;
  EXPECT_FALSE(checkGemmProblem(bad).isOk());
  bad = g;
  bad.beta = 0.5f;
  EXPECT_FALSE(checkGemmProblem(bad).isOk());
  bad = g;
  bad.k = -1;
  const Status s = checkGemmProblem(bad);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("m=19 n=5 k=-1"), std::string::npos) << s.message();
  EXPECT_NE(describeGemm(g).find("A=w^T(lda=37) B=x(ldb=37) C(ldc=19)"), std::string::npos) << describeGemm(g);
}

// The dtypes of the linear ops' GEMMs (a bf16 plan: bf16 operands, bf16 or f32 output) and the
// combinations cuBLASLt runs with f32 accumulation.
TEST(GemmProblemTest, DtypeCombinations) {
  LinearParams p;
  p.M = 8;
  p.K = 64;
  p.N = 16;
  const GemmProblem bf16 = linearForwardGemm(p, true, GemmDType::kBF16, GemmDType::kBF16);
  EXPECT_EQ(bf16.dtype, GemmDType::kBF16);
  EXPECT_EQ(bf16.outType, GemmDType::kBF16);
  EXPECT_TRUE(checkGemmProblem(bf16).isOk());
  EXPECT_NE(describeGemm(bf16).find(" bias bf16"), std::string::npos) << describeGemm(bf16);
  const GemmProblem toF32 = linearBackwardWeightGemm(p, GemmDType::kBF16, GemmDType::kF32);
  EXPECT_EQ(toF32.outType, GemmDType::kF32);
  EXPECT_TRUE(checkGemmProblem(toF32).isOk());
  EXPECT_NE(describeGemm(toF32).find("bf16->f32"), std::string::npos) << describeGemm(toF32);
  const GemmProblem f32 = linearBackwardInputGemm(p);
  EXPECT_EQ(f32.dtype, GemmDType::kF32);
  EXPECT_EQ(f32.outType, GemmDType::kF32);
  GemmProblem tf32 = f32;
  tf32.tf32 = true;
  EXPECT_NE(describeGemm(tf32).find(" tf32"), std::string::npos) << describeGemm(tf32);
  // f32 operands cannot write bf16 (no such cuBLASLt combination with f32 accumulation).
  GemmProblem bad = f32;
  bad.outType = GemmDType::kBF16;
  const Status s = checkGemmProblem(bad);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("no f32 GEMM writing bf16"), std::string::npos) << s.message();
}

// ---- Cache key ---------------------------------------------------------------------------------------

TEST(GemmKeyTest, EqualProblemsHaveEqualKeys) {
  LinearParams p;
  p.M = 5;
  p.K = 37;
  p.N = 19;
  const GemmKey a = gemmKey(linearForwardGemm(p, true), 16, true);
  const GemmKey b = gemmKey(linearForwardGemm(p, true), 16, true);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_FALSE(a < b);
  EXPECT_FALSE(b < a);
}

TEST(GemmKeyTest, EveryFieldDistinguishesKeys) {
  LinearParams p;
  p.M = 5;
  p.K = 37;
  p.N = 19;
  const GemmProblem base = linearBackwardInputGemm(p);
  const GemmKey k0 = gemmKey(base, 16, true);
  std::vector<std::pair<std::string, std::function<GemmKey()>>> variants = {
      {"transA", [&] { GemmProblem g = base; g.transA = !g.transA; return gemmKey(g, 16, true); }},
      {"transB", [&] { GemmProblem g = base; g.transB = !g.transB; return gemmKey(g, 16, true); }},
      {"m", [&] { GemmProblem g = base; g.m += 1; return gemmKey(g, 16, true); }},
      {"n", [&] { GemmProblem g = base; g.n += 1; return gemmKey(g, 16, true); }},
      {"k", [&] { GemmProblem g = base; g.k += 1; return gemmKey(g, 16, true); }},
      {"lda", [&] { GemmProblem g = base; g.lda += 1; return gemmKey(g, 16, true); }},
      {"ldb", [&] { GemmProblem g = base; g.ldb += 1; return gemmKey(g, 16, true); }},
      {"ldc", [&] { GemmProblem g = base; g.ldc += 1; return gemmKey(g, 16, true); }},
      {"beta", [&] { GemmProblem g = base; g.beta = 1.0f; return gemmKey(g, 16, true); }},
      {"epilogue", [&] { GemmProblem g = base; g.epilogue = GemmEpilogue::kBias; return gemmKey(g, 16, true); }},
      {"dtype", [&] { GemmProblem g = base; g.dtype = GemmDType::kBF16; return gemmKey(g, 16, true); }},
      {"outType", [&] { GemmProblem g = base; g.outType = GemmDType::kBF16; return gemmKey(g, 16, true); }},
      {"tf32", [&] { GemmProblem g = base; g.tf32 = true; return gemmKey(g, 16, true); }},
      {"a", [&] { GemmProblem g = base; g.a = GemmOperand::kX; return gemmKey(g, 16, true); }},
      {"b", [&] { GemmProblem g = base; g.b = GemmOperand::kX; return gemmKey(g, 16, true); }},
      {"alignment", [&] { return gemmKey(base, 4, true); }},
      {"deterministic", [&] { return gemmKey(base, 16, false); }},
  };
  std::vector<GemmKey> all = {k0};
  for (const auto& [field, make] : variants) {
    const GemmKey k = make();
    EXPECT_FALSE(k == k0) << field;
    EXPECT_TRUE(k != k0) << field;
    EXPECT_TRUE((k < k0) != (k0 < k)) << field << ": operator< is not a strict order";
    all.push_back(k);
  }
  // All pairwise distinct, and operator< agrees with == (a strict weak order usable by std::map).
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < all.size(); ++j) {
      EXPECT_EQ(i == j, all[i] == all[j]) << i << " " << j;
      EXPECT_EQ(i == j, !(all[i] < all[j]) && !(all[j] < all[i])) << i << " " << j;
    }
}

// ---- Alignment -----------------------------------------------------------------------------------------

TEST(GemmAlignmentTest, ClassIsTheLargestCommonPowerOfTwo) {
  alignas(64) static unsigned char buf[256];
  EXPECT_EQ(gemmAlignmentClass(buf, buf + 32, buf + 64), 16);
  EXPECT_EQ(gemmAlignmentClass(buf, buf + 8, buf + 64), 8);
  EXPECT_EQ(gemmAlignmentClass(buf + 4, buf + 32, buf + 64), 4);
  EXPECT_EQ(gemmAlignmentClass(buf, buf + 32, buf + 64, buf + 2), 2);  // the bias counts
  EXPECT_EQ(gemmAlignmentClass(buf, buf + 32, buf + 1), 1);
  EXPECT_EQ(gemmAlignmentClass(buf, buf + 16, buf + 48, nullptr), 16);  // an absent bias does not
  EXPECT_EQ(gemmAlignmentClass(nullptr, nullptr, nullptr), 16);
}

TEST(GemmAlignmentTest, NamesTheMisalignedOperand) {
  alignas(64) static unsigned char buf[256];
  EXPECT_TRUE(checkGemmAlignment(buf, buf + 4, buf + 8, GemmDType::kF32).isOk());
  EXPECT_TRUE(checkGemmAlignment(buf, buf + 2, buf + 6, GemmDType::kBF16).isOk());
  EXPECT_TRUE(checkGemmAlignment(buf, buf + 4, buf + 8, GemmDType::kF32, nullptr).isOk());

  Status s = checkGemmAlignment(buf, buf + 2, buf + 8, GemmDType::kF32);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("operand B"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4-byte aligned"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("f32"), std::string::npos) << s.message();

  s = checkGemmAlignment(buf + 1, buf, buf, GemmDType::kBF16);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("operand A"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2-byte aligned"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();

  s = checkGemmAlignment(buf, buf, buf + 6, GemmDType::kF32);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("operand C"), std::string::npos) << s.message();

  s = checkGemmAlignment(buf, buf, buf, GemmDType::kF32, buf + 3);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("operand bias"), std::string::npos) << s.message();

  // bf16 operands writing f32: A and B need 2 bytes, C and the bias 4.
  EXPECT_TRUE(checkGemmAlignment(buf + 2, buf + 6, buf + 8, GemmDType::kBF16, GemmDType::kF32, buf + 12).isOk());
  s = checkGemmAlignment(buf + 2, buf + 6, buf + 10, GemmDType::kBF16, GemmDType::kF32, nullptr);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("operand C"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4-byte aligned"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace llcdist::rt::cuda
