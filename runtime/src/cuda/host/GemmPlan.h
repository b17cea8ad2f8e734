// Private to the CUDA backend, but free of CUDA (standard library and runtime headers only, so it
// builds and is tested on machines without a toolkit: runtime/test/GemmPlanTest.cpp): how each
// row-major linear op (Kernels.h: linearForward, linearBackwardInput, linearBackwardWeight) becomes one
// column-major GEMM as cuBLASLt takes it, the key the GEMM runner (Gemm.cpp) caches its descriptors
// and algorithm under, the alignment check, and a naive column-major reference GEMM that defines
// what the problem means.
//
// The mapping. A row-major [R,C] matrix is, read column-major, its transpose: a C×R matrix with leading
// dimension C. So a row-major product Y[M,N] = X·Z is computed as the column-major
// Yᵀ (N×M, ldc = N) = Zᵀ·Xᵀ: cuBLAS's C is the op's output buffer as it is, and its A and B are
// the op's operands with the transposes that the layouts need (the fields below say which operand).
//
// cuBLAS semantics (as cublasLtMatmul with alpha = 1): C(m×n) = op(A)(m×k) · op(B)(k×n) + beta·C
// [+ bias broadcast along the columns, bias[i] added to row i, i < m]. A is stored column-major as
// m×k (transA false) or k×m (transA true) with leading dimension lda >= its row count; B likewise
// k×n / n×k with ldb; C is m×n with ldc >= m. Element (r, c) of a stored matrix with leading
// dimension ld is at r + c·ld.
#pragma once

#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {

enum class GemmDType { kF32, kBF16 };      // an element type of the operands or of the output
// kBias: CUBLASLT_EPILOGUE_BIAS, bias[m] added per row of C. kBiasGradA / kBiasGradB:
// CUBLASLT_EPILOGUE_BGRADA / BGRADB, the bias gradient written (not added) to `bias`: the sums over k of
// op(A)'s rows (bias[m]) / op(B)'s columns (bias[n]), in C's dtype. The GELU epilogues (tanh
// approximation, as gelu_tanh_fwd / _bwd) with the aux matrix (m×n, leading dimension ldAux, C's dtype):
// kGeluAux / kGeluAuxBias: CUBLASLT_EPILOGUE_GELU_AUX(_BIAS), aux = the product (+ bias), C = GELU of it;
// kDGelu: CUBLASLT_EPILOGUE_DGELU, C = the product × GELU'(aux), aux read.
enum class GemmEpilogue { kNone, kBias, kBiasGradA, kBiasGradB, kGeluAux, kGeluAuxBias, kDGelu };
constexpr bool isBiasGradEpilogue(GemmEpilogue e) { return e == GemmEpilogue::kBiasGradA || e == GemmEpilogue::kBiasGradB; }
// Whether the epilogue reads or writes the bias vector / the aux matrix.
constexpr bool epilogueHasBias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || isBiasGradEpilogue(e) || e == GemmEpilogue::kGeluAuxBias;
}
constexpr bool epilogueHasAux(GemmEpilogue e) {
  return e == GemmEpilogue::kGeluAux || e == GemmEpilogue::kGeluAuxBias || e == GemmEpilogue::kDGelu;
}
// Which of the linear op's buffers feeds cuBLAS's A or B (C is always the op's output: y, dx or dw).
enum class GemmOperand { kX, kW, kDy };

struct GemmProblem {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float beta = 0.0f;  // 0 (overwrite C; C is not read) or 1 (accumulate into C)
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  int64_t ldAux = 0;  // the aux matrix's leading dimension (the GELU epilogues; else 0)
  // A and B's element type, and C's (D's and the bias's): cuBLASLt's combinations with f32 accumulation
  // (CUBLAS_COMPUTE_32F): f32 × f32 -> f32, bf16 × bf16 -> bf16 or f32 (checkGemmProblem).
  GemmDType dtype = GemmDType::kF32;
  GemmDType outType = GemmDType::kF32;
  // f32 GEMMs may run on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32; --tf32); no effect on bf16.
  bool tf32 = false;
  GemmOperand a = GemmOperand::kW;  // the buffer passed as A
  GemmOperand b = GemmOperand::kX;  // the buffer passed as B
};

// Wnk: the weight as the [N,K] matrix of Kernels.h (W for kOutIn, Wᵀ for kInOut). `dtype` is the
// operands' element type, `outType` the output's (the op's y, dx or dw).
// linear_fwd: y[M,N] = x·Wnkᵀ (+ bias[N]); C = yᵀ (N×M), A = w, B = x; the bias (per output feature)
// is the epilogue's per-row bias. Never accumulates (linear_fwd has no accumulate attr).
// With `gelu` (linear_fwd's gelu role): kGeluAux(Bias), C = the gelu buffer, aux = y (ldAux = ldc).
GemmProblem linearForwardGemm(const LinearParams& p, bool hasBias, GemmDType dtype = GemmDType::kF32,
                              GemmDType outType = GemmDType::kF32, bool gelu = false);
// linear_bwd_input: dx[M,K] (+)= dy[M,N]·Wnk; C = dxᵀ (K×M), A = w, B = dy; beta = accumulate. With
// `dgelu` (linear_bwd_input's gelu_x role): kDGelu, aux = gelu_x (ldAux = ldc).
GemmProblem linearBackwardInputGemm(const LinearParams& p, GemmDType dtype = GemmDType::kF32,
                                    GemmDType outType = GemmDType::kF32, bool dgelu = false);
// linear_bwd_weight: dw in W's layout (kOutIn dw[N,K] = dyᵀ·x; kInOut dw[K,N] = xᵀ·dy), beta =
// accumulate. kOutIn: C = dwᵀ (K×N), A = x, B = dy; kInOut: C = dwᵀ (N×K), A = dy, B = x. With
// `biasGrad`, the epilogue also writes linear_bwd_bias's column sums of dy (N of them, k = M summed):
// BGRADB where dy is B (kOutIn), BGRADA where it is A (kInOut).
GemmProblem linearBackwardWeightGemm(const LinearParams& p, GemmDType dtype = GemmDType::kF32,
                                     GemmDType outType = GemmDType::kF32, bool biasGrad = false);

// The elements A, B and C must hold for the problem (the last element read or written, plus one).
int64_t gemmElemsA(const GemmProblem& g);
int64_t gemmElemsB(const GemmProblem& g);
int64_t gemmElemsC(const GemmProblem& g);

// Ok when the problem is well formed: sizes >= 0, leading dimensions >= max(1, the stored row count)
// (ldAux too, with the GELU epilogues, which need beta 0), beta 0 or 1, and a dtype combination
// cuBLASLt runs (f32 -> f32, bf16 -> bf16 or f32). (m, n or k 0 are well formed; the runner refuses
// them, the linear kernels never pass them.) The error names the problem.
Status checkGemmProblem(const GemmProblem& g);
// Why cuBLASLt cannot run the problem's epilogue as it is, or "" (the runner answers NotFound then, and
// the caller runs it another way): the aux matrix's leading dimension must be a multiple of 8.
std::string gemmEpilogueUnsupportedReason(const GemmProblem& g);

// "m=19 n=5 k=37 A=w^T(lda=37) B=x(ldb=37) C(ldc=19) beta=0 bias f32" ("bf16->f32" when the output
// differs from the operands, " tf32" when allowed): for errors.
std::string describeGemm(const GemmProblem& g);
const char* gemmOperandName(GemmOperand o);
const char* gemmDTypeName(GemmDType t);
int64_t gemmElemSize(GemmDType t);

// The largest of 16, 8, 4, 2, 1 bytes that divides every non-null pointer (16 when all are null): the
// alignment the heuristic is told about (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), so an algorithm
// cached for it is valid for every call with the same key.
int gemmAlignmentClass(const void* a, const void* b, const void* c, const void* bias = nullptr,
                       const void* aux = nullptr);

// cuBLASLt needs every matrix (and the bias) aligned to its element size at least: 4 bytes for f32, 2
// for bf16. InvalidArgument naming the first misaligned operand (A, B, C or bias) and its address.
Status checkGemmAlignment(const void* a, const void* b, const void* c, GemmDType dtype, const void* bias = nullptr);
// The same with A and B of `dtype` and C, the bias and the aux matrix of `outType`.
Status checkGemmAlignment(const void* a, const void* b, const void* c, GemmDType dtype, GemmDType outType,
                          const void* bias, const void* aux = nullptr);

// The cache key of the runner: every field of the problem, the alignment class of its pointers and
// whether the algorithm was restricted to non-split-K reductions (deterministic).
struct GemmKey {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  int64_t ldAux = 0;
  GemmDType dtype = GemmDType::kF32, outType = GemmDType::kF32;
  bool tf32 = false;
  GemmOperand a = GemmOperand::kW, b = GemmOperand::kX;
  int alignment = 16;
  bool deterministic = true;

  bool operator<(const GemmKey& o) const;
  bool operator==(const GemmKey& o) const;
  bool operator!=(const GemmKey& o) const { return !(*this == o); }
};
GemmKey gemmKey(const GemmProblem& g, int alignment, bool deterministic);

// The reference: C = op(A)·op(B) + beta·C (+ bias[i] on row i with kBias), column-major with leading
// dimensions exactly as cuBLAS defines them, in f32 data with double accumulation. With beta 0, C is
// not read (it may hold NaN). `bias` is required with the epilogues and ignored otherwise: read with
// kBias, written with kBiasGradA (bias[i] = Σ_p op(A)(i, p)) and kBiasGradB (bias[j] = Σ_p op(B)(p, j)).
// With the GELU epilogues, `aux` (m×n, ldAux): written with kGeluAux(Bias) (the product + bias, C = its
// GELU), read with kDGelu (C = the product × GELU'(aux)); GELU with the tanh approximation, in double.
// Only dtype kF32.
void referenceColumnMajorGemm(const GemmProblem& g, const float* A, const float* B, float* C,
                              float* bias = nullptr, float* aux = nullptr);

}  // namespace llcdist::rt::cuda
