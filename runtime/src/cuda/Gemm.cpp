// The cuBLASLt GEMM runner (Gemm.h): one handle and one 32 MiB device workspace per runner (per rank),
// and per GemmKey (GemmPlan.h: the problem, its pointers' alignment class, deterministic) a cached
// matmul descriptor, the A / B / C layouts (C's layout serves D: the product is written in place) and
// the algorithm cublasLtMatmulAlgoGetHeuristic chose. f32 data computes in CUBLAS_COMPUTE_32F without
// TF32 (the CPU golden comparison needs f32 accuracy) unless the problem allows TF32 (--tf32:
// CUBLAS_COMPUTE_32F_FAST_TF32); bf16 operands compute in CUBLAS_COMPUTE_32F on tensor cores with f32
// scales, writing bf16 or f32 (GemmProblem::outType; the bias has the output's type). Under `deterministic` the heuristic is restricted to algorithms without split-K
// reductions (CUBLASLT_REDUCTION_SCHEME_NONE), so repeated runs give identical bits.
//
// Every call shares the workspace, so calls on different streams are ordered: a call on a stream other
// than the previous call's first makes its stream wait for everything enqueued on the previous one.
#include "cuda/Gemm.h"

#include "cuda/CudaKernels.h"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace llcdist::rt::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Algorithms asked of the heuristic; the first usable one (state ok, workspace within ours) is taken.
constexpr int kHeuristicCandidates = 8;

// "FILE:LINE: EXPR: CUBLAS_STATUS_X (string) on rank R [for GEMM ...]" as an Internal status.
Status cublasError(cublasStatus_t s, const char* expr, const char* file, int line, int rank,
                   const std::string& problem) {
  std::string m = std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " + cublasLtGetStatusName(s) +
                  " (" + cublasLtGetStatusString(s) + ") on rank " + std::to_string(rank);
  if (!problem.empty()) m += " for GEMM " + problem;
  return Status::internal(std::move(m));
}

#define LLCDIST_CUBLAS_TRY(expr, rank, problem)                                                     \
  do {                                                                                              \
    const cublasStatus_t llcdist_cublas_s_ = (expr);                                                \
    if (llcdist_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
      return cublasError(llcdist_cublas_s_, #expr, __FILE__, __LINE__, (rank), (problem));          \
  } while (0)

struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DescDeleter>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDeleter>;
using PreferencePtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDeleter>;

cudaDataType dataType(GemmDType t) { return t == GemmDType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

cublasLtEpilogue_t cublasEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kBiasGradA: return CUBLASLT_EPILOGUE_BGRADA;
    case GemmEpilogue::kBiasGradB: return CUBLASLT_EPILOGUE_BGRADB;
    case GemmEpilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// What is cached per key.
struct CachedGemm {
  DescPtr desc;
  LayoutPtr a, b, c;  // c serves as D too
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

class CublasLtRunner final : public GemmRunner {
public:
  explicit CublasLtRunner(int rank) : rank_(rank) {}
  ~CublasLtRunner() override {
    cache_.clear();  // descriptors before the handle
    if (handle_) cublasLtDestroy(handle_);
    if (workspace_) cudaFree(workspace_);
    if (streamOrder_) cudaEventDestroy(streamOrder_);
  }
  CublasLtRunner(const CublasLtRunner&) = delete;
  CublasLtRunner& operator=(const CublasLtRunner&) = delete;

  Status init() {
    LLCDIST_CUBLAS_TRY(cublasLtCreate(&handle_), rank_, "");
    LLCDIST_CUDA_TRY(cudaMalloc(&workspace_, kWorkspaceBytes), rank_);
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&streamOrder_, cudaEventDisableTiming), rank_);
    return Status::ok();
  }

  int64_t deviceBytes() const override { return workspace_ ? int64_t(kWorkspaceBytes) : 0; }

  Status run(const GemmProblem& g, const void* A, const void* B, void* C, const void* bias, const void* aux,
             cudaStream_t stream, bool deterministic) override {
    // Errors name the problem; the description is formatted only then.
    const auto fail = [&](Status s) { return std::move(s).withContext("GEMM " + describeGemm(g)).withRank(rank_); };
    if (Status s = checkGemmProblem(g); !s.isOk()) return std::move(s).withRank(rank_);
    if (g.m < 1 || g.n < 1 || g.k < 1) return fail(Status::invalidArgument("empty problems are not run"));
    if (!A || !B || !C) return fail(Status::invalidArgument("a null A, B or C"));
    const bool hasBias = epilogueHasBias(g.epilogue), hasAux = epilogueHasAux(g.epilogue);
    if (hasBias && !bias) return fail(Status::invalidArgument("a bias epilogue without a bias"));
    if (hasAux && !aux) return fail(Status::invalidArgument("a GELU epilogue without its aux matrix"));
    if (!hasBias) bias = nullptr;
    if (!hasAux) aux = nullptr;
    if (std::string why = gemmEpilogueUnsupportedReason(g); !why.empty()) return fail(Status::notFound(why));
    if (Status s = checkGemmAlignment(A, B, C, g.dtype, g.outType, bias, aux); !s.isOk()) return fail(std::move(s));
    const int alignment = gemmAlignmentClass(A, B, C, bias, aux);
    const GemmKey key = gemmKey(g, alignment, deterministic);

    std::lock_guard<std::mutex> lock(mu_);
    if (auto known = noAlgorithm_.find(key); known != noAlgorithm_.end()) return known->second;
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      StatusOr<std::unique_ptr<CachedGemm>> built = build(g, alignment, deterministic, bias, aux);
      if (!built.isOk()) {
        // "No algorithm" is remembered (the heuristic would answer the same); other failures are not.
        if (built.status().code() == StatusCode::kNotFound) noAlgorithm_.emplace(key, built.status());
        return built.status();
      }
      it = cache_.emplace(key, std::move(built).value()).first;
    }
    CachedGemm& cached = *it->second;
    if (hasBias)
      LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(cached.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                        sizeof(bias)),
                         rank_, describeGemm(g));
    if (hasAux)
      LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(cached.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                        &aux, sizeof(aux)),
                         rank_, describeGemm(g));
    // The workspace is shared: order this call after the previous one when the stream changes.
    if (used_ && stream != lastStream_) {
      LLCDIST_CUDA_TRY(cudaEventRecord(streamOrder_, lastStream_), rank_);
      LLCDIST_CUDA_TRY(cudaStreamWaitEvent(stream, streamOrder_, 0), rank_);
    }
    const float alpha = 1.0f, beta = g.beta;
    LLCDIST_CUBLAS_TRY(cublasLtMatmul(handle_, cached.desc.get(), &alpha, A, cached.a.get(), B, cached.b.get(), &beta,
                                      C, cached.c.get(), C, cached.c.get(), &cached.algo, workspace_, kWorkspaceBytes,
                                      stream),
                       rank_, describeGemm(g));
    used_ = true;
    lastStream_ = stream;
    return Status::ok();
  }

private:
  // Descriptor, layouts and the heuristic's algorithm for a problem whose pointers have `alignment`.
  StatusOr<std::unique_ptr<CachedGemm>> build(const GemmProblem& g, int alignment, bool deterministic,
                                              const void* bias, const void* aux) {
    const std::string problem = describeGemm(g);
    auto out = std::make_unique<CachedGemm>();
    const cudaDataType type = dataType(g.dtype), outType = dataType(g.outType);
    const cublasComputeType_t compute =
        g.tf32 && g.dtype == GemmDType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    cublasLtMatmulDesc_t desc = nullptr;
    LLCDIST_CUBLAS_TRY(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), rank_, problem);
    out->desc.reset(desc);
    const cublasOperation_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), rank_,
                       problem);
    LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), rank_,
                       problem);
    if (g.epilogue != GemmEpilogue::kNone) {
      const cublasLtEpilogue_t epilogue = cublasEpilogue(g.epilogue);
      LLCDIST_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), rank_,
          problem);
    }
    if (epilogueHasBias(g.epilogue)) {
      const int32_t biasType = int32_t(outType);
      LLCDIST_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof(biasType)),
          rank_, problem);
      // The heuristic reads the bias pointer's alignment (it does not dereference it).
      LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                         rank_, problem);
    }
    if (epilogueHasAux(g.epilogue)) {  // aux of C's dtype (the default), its pointer's alignment as the bias's
      const int64_t ld = g.ldAux;
      LLCDIST_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)),
                         rank_, problem);
      LLCDIST_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)), rank_,
          problem);
    }

    // Stored shapes: A is m×k (k×m transposed), B k×n (n×k transposed), C m×n.
    const auto layout = [&](LayoutPtr& dst, cudaDataType t, int64_t rows, int64_t cols, int64_t ld) -> Status {
      cublasLtMatrixLayout_t l = nullptr;
      LLCDIST_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld), rank_, problem);
      dst.reset(l);
      return Status::ok();
    };
    LLCDIST_RETURN_IF_ERROR(layout(out->a, type, g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda));
    LLCDIST_RETURN_IF_ERROR(layout(out->b, type, g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb));
    LLCDIST_RETURN_IF_ERROR(layout(out->c, outType, g.m, g.n, g.ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    LLCDIST_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), rank_, problem);
    PreferencePtr prefOwner(pref);
    const uint64_t workspace = kWorkspaceBytes;
    LLCDIST_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                            sizeof(workspace)),
                       rank_, problem);
    if (deterministic) {
      const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
      LLCDIST_CUBLAS_TRY(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)),
          rank_, problem);
    }
    const uint32_t align = uint32_t(alignment);
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      LLCDIST_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), rank_, problem);

    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
    int returned = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(handle_, desc, out->a.get(), out->b.get(), out->c.get(), out->c.get(), pref,
                                       kHeuristicCandidates, results, &returned);
    // NOT_SUPPORTED is how the heuristic says it has nothing for the configuration.
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED)
      return cublasError(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__, rank_, problem);
    for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= kWorkspaceBytes) {
        out->algo = results[i].algo;
        out->workspace = results[i].workspaceSize;
        return StatusOr<std::unique_ptr<CachedGemm>>(std::move(out));
      }
    return Status::notFound("cuBLASLt returned no algorithm for GEMM " + problem + " (pointer alignment " +
                            std::to_string(alignment) + " bytes" + (deterministic ? ", no split-K reduction" : "") +
                            ", workspace " + std::to_string(kWorkspaceBytes) + " bytes) on rank " +
                            std::to_string(rank_));
  }

  const int rank_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  cudaEvent_t streamOrder_ = nullptr;
  std::mutex mu_;  // guards everything below, and the cached descriptors' bias and aux pointers during a call
  std::map<GemmKey, std::unique_ptr<CachedGemm>> cache_;
  std::map<GemmKey, Status> noAlgorithm_;  // keys the heuristic had nothing for (NotFound)
  bool used_ = false;
  cudaStream_t lastStream_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<GemmRunner>> makeGemmRunner(int rank) {
  auto runner = std::make_unique<CublasLtRunner>(rank);
  LLCDIST_RETURN_IF_ERROR(runner->init());
  return std::unique_ptr<GemmRunner>(std::move(runner));
}

}  // namespace llcdist::rt::cuda
