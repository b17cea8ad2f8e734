// Row-major linear ops as column-major GEMMs (GemmPlan.h). CUDA-free.
#include "cuda/host/GemmPlan.h"

#include <cmath>

#include <cstdint>
#include <sstream>
#include <tuple>

namespace llcdist::rt::cuda {
namespace {

// A stored matrix of `rows`×`cols` with leading dimension ld: elements up to the last one, plus one.
int64_t storedElems(int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return (cols - 1) * ld + rows;
}

int64_t rowsA(const GemmProblem& g) { return g.transA ? g.k : g.m; }
int64_t colsA(const GemmProblem& g) { return g.transA ? g.m : g.k; }
int64_t rowsB(const GemmProblem& g) { return g.transB ? g.n : g.k; }
int64_t colsB(const GemmProblem& g) { return g.transB ? g.k : g.n; }

// GELU, tanh approximation, and its derivative, in double: the reference's own (the kernels' are f32).
constexpr double kSqrt2OverPi = 0.79788456080286535588, kGeluCoef = 0.044715;
double geluTanh(double v) { return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCoef * v * v * v))); }
double geluTanhGrad(double v) {
  const double t = std::tanh(kSqrt2OverPi * (v + kGeluCoef * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCoef * v * v);
}

auto keyTuple(const GemmKey& k) {
  return std::make_tuple(k.transA, k.transB, k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.beta, int(k.epilogue), k.ldAux,
                         int(k.dtype), int(k.outType), k.tf32, int(k.a), int(k.b), k.alignment, k.deterministic);
}

}  // namespace

// Wnk below is the weight as the [N,K] matrix of Kernels.h (W for kOutIn, Wᵀ for kInOut):
// y = x·Wnkᵀ, dx = dy·Wnk.
//
// linear_fwd: y[M,N] = x[M,K]·Wnkᵀ. Column-major: C = yᵀ (N×M, ldc N) = Wnk (N×K) · xᵀ (K×M).
//   xᵀ: x row-major [M,K] read column-major is K×M with ld K: B = x, no transpose, ldb = K.
//   Wnk: kOutIn: W row-major [N,K] read column-major is Wᵀ (K×N, ld K), so Wnk = W is A = w
//   transposed, lda = K. kInOut: W row-major [K,N] read column-major is Wᵀ (N×K, ld N) = Wnk, so A = w
//   as it is, lda = N.
GemmProblem linearForwardGemm(const LinearParams& p, bool hasBias, GemmDType dtype, GemmDType outType, bool gelu) {
  GemmProblem g;
  g.m = p.N;
  g.n = p.M;
  g.k = p.K;
  g.a = GemmOperand::kW;
  g.b = GemmOperand::kX;
  g.transA = p.layout == WeightLayout::kOutIn;
  g.lda = p.layout == WeightLayout::kOutIn ? p.K : p.N;
  g.transB = false;
  g.ldb = p.K;
  g.ldc = p.N;
  g.beta = 0.0f;
  g.epilogue = gelu ? (hasBias ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluAux)
                   : (hasBias ? GemmEpilogue::kBias : GemmEpilogue::kNone);
  g.ldAux = gelu ? g.ldc : 0;  // y, shaped as C
  g.dtype = dtype;
  g.outType = outType;
  return g;
}

// linear_bwd_input: dx[M,K] = dy[M,N]·Wnk. Column-major: C = dxᵀ (K×M, ldc K) = Wnkᵀ (K×N) · dyᵀ (N×M).
//   dyᵀ: dy row-major [M,N] read column-major is N×M with ld N: B = dy, no transpose, ldb = N.
//   Wnkᵀ: kOutIn: W row-major [N,K] read column-major is Wᵀ = Wnkᵀ (K×N, ld K): A = w, no transpose,
//   lda = K. kInOut: W row-major [K,N] read column-major is Wᵀ (N×K, ld N) = Wnk: A = w transposed,
//   lda = N.
GemmProblem linearBackwardInputGemm(const LinearParams& p, GemmDType dtype, GemmDType outType, bool dgelu) {
  GemmProblem g;
  g.m = p.K;
  g.n = p.M;
  g.k = p.N;
  g.a = GemmOperand::kW;
  g.b = GemmOperand::kDy;
  g.transA = p.layout == WeightLayout::kInOut;
  g.lda = p.layout == WeightLayout::kOutIn ? p.K : p.N;
  g.transB = false;
  g.ldb = p.N;
  g.ldc = p.K;
  g.beta = p.accumulate ? 1.0f : 0.0f;
  g.epilogue = dgelu ? GemmEpilogue::kDGelu : GemmEpilogue::kNone;
  g.ldAux = dgelu ? g.ldc : 0;  // gelu_x, shaped as dx
  g.dtype = dtype;
  g.outType = outType;
  return g;
}

// kOutIn: dw[N,K] = dyᵀ·x. Column-major C = dwᵀ (K×N, ldc K) = xᵀ (K×M) · dy (M×N).
//   xᵀ: x row-major [M,K] read column-major is K×M (ld K): A = x, no transpose, lda = K.
//   dy: dy row-major [M,N] read column-major is dyᵀ (N×M, ld N): B = dy transposed, ldb = N.
// kInOut: dw[K,N] = xᵀ·dy. Column-major C = dwᵀ (N×K, ldc N) = dyᵀ (N×M) · x (M×K).
//   dyᵀ: A = dy, no transpose, lda = N.  x: x read column-major is xᵀ (K×M, ld K): B = x transposed,
//   ldb = K.
GemmProblem linearBackwardWeightGemm(const LinearParams& p, GemmDType dtype, GemmDType outType, bool biasGrad) {
  GemmProblem g;
  if (p.layout == WeightLayout::kOutIn) {
    g.m = p.K;
    g.n = p.N;
    g.k = p.M;
    g.a = GemmOperand::kX;
    g.transA = false;
    g.lda = p.K;
    g.b = GemmOperand::kDy;
    g.transB = true;
    g.ldb = p.N;
    g.ldc = p.K;
  } else {
    g.m = p.N;
    g.n = p.K;
    g.k = p.M;
    g.a = GemmOperand::kDy;
    g.transA = false;
    g.lda = p.N;
    g.b = GemmOperand::kX;
    g.transB = true;
    g.ldb = p.K;
    g.ldc = p.N;
  }
  g.beta = p.accumulate ? 1.0f : 0.0f;
  g.epilogue = !biasGrad                   ? GemmEpilogue::kNone
               : g.a == GemmOperand::kDy ? GemmEpilogue::kBiasGradA
                                         : GemmEpilogue::kBiasGradB;
  g.dtype = dtype;
  g.outType = outType;
  return g;
}

int64_t gemmElemsA(const GemmProblem& g) { return storedElems(rowsA(g), colsA(g), g.lda); }
int64_t gemmElemsB(const GemmProblem& g) { return storedElems(rowsB(g), colsB(g), g.ldb); }
int64_t gemmElemsC(const GemmProblem& g) { return storedElems(g.m, g.n, g.ldc); }

const char* gemmOperandName(GemmOperand o) {
  switch (o) {
    case GemmOperand::kX: return "x";
    case GemmOperand::kW: return "w";
    case GemmOperand::kDy: return "dy";
  }
  return "?";
}

const char* gemmDTypeName(GemmDType t) { return t == GemmDType::kBF16 ? "bf16" : "f32"; }
int64_t gemmElemSize(GemmDType t) { return t == GemmDType::kBF16 ? 2 : 4; }

std::string describeGemm(const GemmProblem& g) {
  std::ostringstream s;
  s << "m=" << g.m << " n=" << g.n << " k=" << g.k << " A=" << gemmOperandName(g.a) << (g.transA ? "^T" : "")
    << "(lda=" << g.lda << ") B=" << gemmOperandName(g.b) << (g.transB ? "^T" : "") << "(ldb=" << g.ldb
    << ") C(ldc=" << g.ldc << ") beta=" << g.beta
    << (g.epilogue == GemmEpilogue::kBias          ? " bias "
        : g.epilogue == GemmEpilogue::kBiasGradA   ? " bgradA "
        : g.epilogue == GemmEpilogue::kBiasGradB   ? " bgradB "
        : g.epilogue == GemmEpilogue::kGeluAux     ? " gelu_aux "
        : g.epilogue == GemmEpilogue::kGeluAuxBias ? " gelu_aux_bias "
        : g.epilogue == GemmEpilogue::kDGelu       ? " dgelu "
                                                   : " ");
  if (epilogueHasAux(g.epilogue)) s << "(ldaux=" << g.ldAux << ") ";
  s << gemmDTypeName(g.dtype);
  if (g.outType != g.dtype) s << "->" << gemmDTypeName(g.outType);
  if (g.tf32) s << " tf32";
  return s.str();
}

Status checkGemmProblem(const GemmProblem& g) {
  auto bad = [&](const std::string& why) {
    return Status::invalidArgument("GEMM " + describeGemm(g) + ": " + why);
  };
  if (g.m < 0 || g.n < 0 || g.k < 0) return bad("negative size");
  const auto ldOk = [](int64_t ld, int64_t rows) { return ld >= (rows > 1 ? rows : 1); };
  if (!ldOk(g.lda, rowsA(g))) return bad("lda is smaller than A's stored rows (" + std::to_string(rowsA(g)) + ")");
  if (!ldOk(g.ldb, rowsB(g))) return bad("ldb is smaller than B's stored rows (" + std::to_string(rowsB(g)) + ")");
  if (!ldOk(g.ldc, g.m)) return bad("ldc is smaller than m");
  if (g.beta != 0.0f && g.beta != 1.0f) return bad("beta must be 0 or 1");
  if (epilogueHasAux(g.epilogue)) {
    if (!ldOk(g.ldAux, g.m)) return bad("ldAux is smaller than m");
    if (g.beta != 0.0f) return bad("the GELU epilogues need beta 0 (they write C, they cannot accumulate)");
  }
  if (g.outType != g.dtype && !(g.dtype == GemmDType::kBF16 && g.outType == GemmDType::kF32))
    return bad("cuBLASLt has no " + std::string(gemmDTypeName(g.dtype)) + " GEMM writing " +
               gemmDTypeName(g.outType) + " (f32 -> f32, bf16 -> bf16 or f32)");
  return Status::ok();
}

std::string gemmEpilogueUnsupportedReason(const GemmProblem& g) {
  if (epilogueHasAux(g.epilogue) && g.ldAux % 8 != 0)
    return "the GELU epilogue's aux leading dimension " + std::to_string(g.ldAux) +
           " is not a multiple of 8 (cuBLASLt's CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)";
  return "";
}

int gemmAlignmentClass(const void* a, const void* b, const void* c, const void* bias, const void* aux) {
  uintptr_t bits = 0;
  for (const void* p : {a, b, c, bias, aux})
    if (p) bits |= reinterpret_cast<uintptr_t>(p);
  for (int align : {16, 8, 4, 2})
    if (bits % uintptr_t(align) == 0) return align;
  return 1;
}

Status checkGemmAlignment(const void* a, const void* b, const void* c, GemmDType dtype, const void* bias) {
  return checkGemmAlignment(a, b, c, dtype, dtype, bias);
}

Status checkGemmAlignment(const void* a, const void* b, const void* c, GemmDType dtype, GemmDType outType,
                          const void* bias, const void* aux) {
  const struct {
    const char* name;
    const void* p;
    GemmDType type;
  } operands[] = {{"A", a, dtype}, {"B", b, dtype}, {"C", c, outType}, {"bias", bias, outType}, {"aux", aux, outType}};
  for (const auto& o : operands) {
    const uintptr_t need = uintptr_t(gemmElemSize(o.type));
    if (o.p && reinterpret_cast<uintptr_t>(o.p) % need != 0) {
      std::ostringstream s;
      s << "GEMM operand " << o.name << " at " << o.p << " is not " << need << "-byte aligned, as cuBLASLt needs for "
        << gemmDTypeName(o.type) << " data";
      return Status::invalidArgument(s.str());
    }
  }
  return Status::ok();
}

bool GemmKey::operator<(const GemmKey& o) const { return keyTuple(*this) < keyTuple(o); }
bool GemmKey::operator==(const GemmKey& o) const { return keyTuple(*this) == keyTuple(o); }

GemmKey gemmKey(const GemmProblem& g, int alignment, bool deterministic) {
  GemmKey k;
  k.transA = g.transA;
  k.transB = g.transB;
  k.m = g.m;
  k.n = g.n;
  k.k = g.k;
  k.lda = g.lda;
  k.ldb = g.ldb;
  k.ldc = g.ldc;
  k.beta = g.beta;
  k.epilogue = g.epilogue;
  k.ldAux = g.ldAux;
  k.dtype = g.dtype;
  k.outType = g.outType;
  k.tf32 = g.tf32;
  k.a = g.a;
  k.b = g.b;
  k.alignment = alignment;
  k.deterministic = deterministic;
  return k;
}

void referenceColumnMajorGemm(const GemmProblem& g, const float* A, const float* B, float* C, float* bias,
                              float* aux) {
  // op(A)(i, p) and op(B)(p, j) from the stored matrices: element (r, c) at r + c·ld.
  const auto opA = [&](int64_t i, int64_t p) { return g.transA ? A[p + i * g.lda] : A[i + p * g.lda]; };
  const auto opB = [&](int64_t p, int64_t j) { return g.transB ? B[j + p * g.ldb] : B[p + j * g.ldb]; };
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) s += double(opA(i, p)) * double(opB(p, j));
      float& c = C[i + j * g.ldc];
      if (g.beta != 0.0f) s += double(g.beta) * double(c);
      if (g.epilogue == GemmEpilogue::kBias || g.epilogue == GemmEpilogue::kGeluAuxBias) s += double(bias[i]);
      if (g.epilogue == GemmEpilogue::kGeluAux || g.epilogue == GemmEpilogue::kGeluAuxBias) {
        aux[i + j * g.ldAux] = float(s);
        s = geluTanh(s);
      }
      if (g.epilogue == GemmEpilogue::kDGelu) s *= geluTanhGrad(double(aux[i + j * g.ldAux]));
      c = float(s);
    }
  if (g.epilogue == GemmEpilogue::kBiasGradA)
    for (int64_t i = 0; i < g.m; ++i) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) s += double(opA(i, p));
      bias[i] = float(s);
    }
  if (g.epilogue == GemmEpilogue::kBiasGradB)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) s += double(opB(p, j));
      bias[j] = float(s);
    }
}

}  // namespace llcdist::rt::cuda
