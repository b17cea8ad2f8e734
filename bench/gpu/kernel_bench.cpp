// GEMM and attention throughput of the CUDA backend on a GPU (scripts/test-gpu.sh, check 4;
// bench/README.md states the targets). One line per shape:
//  - GEMM (bf16 and f32 data, f32 accumulation), M = N = K at large sizes: the runner the linear ops use
//    (src/cuda/Gemm.h: cuBLASLt's first heuristic algorithm) beside the best of cuBLASLt's top 16
//    algorithms timed one by one on the same problem (a MAMF-style sweep: the best the library gives);
//  - causal attention forward and backward through the kernel table, in TFLOP/s (causal FLOPs: half
//    the dense 4·B·nh·S²·hd forward, 2.5× that backward).
// Times are medians of 20 launches after 3 warm-ups, by CUDA events. Without a device it prints one
// SKIP line and exits 0.
#include "cuda/CudaKernels.h"
#include "cuda/DeviceMemory.h"
#include "cuda/Gemm.h"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace llcdist::rt;
using namespace llcdist::rt::cuda;

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL kernel-bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Median milliseconds of fn() launched on `stream`.
double timeIt(cudaStream_t stream, const std::function<bool()>& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i)
    if (!fn()) return -1;
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a, stream);
    if (!fn()) return -1;
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// cuBLASLt's best of its top algorithms for a square NN GEMM (column-major, f32 compute).
double bestCublasLt(cudaStream_t stream, int64_t n, bool bf16, void* A, void* B, void* C, void* ws, size_t wsBytes,
                    int* tried) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, t, uint64_t(n), uint64_t(n), n);
  cublasLtMatrixLayoutCreate(&lb, t, uint64_t(n), uint64_t(n), n);
  cublasLtMatrixLayoutCreate(&lc, t, uint64_t(n), uint64_t(n), n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof(wsBytes));
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 16, res, &found);
  const float alpha = 1, beta = 0;
  double best = -1;
  *tried = 0;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const double ms = timeIt(stream, [&] {
      return cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res[i].algo, ws, wsBytes, stream) ==
             CUBLAS_STATUS_SUCCESS;
    });
    if (ms > 0) {
      ++*tried;
      best = best < 0 ? ms : std::min(best, ms);
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  return best;
}

bool benchGemm(cudaStream_t stream, GemmRunner& runner, int64_t n, bool bf16) {
  const size_t elem = bf16 ? 2 : 4, bytes = size_t(n * n) * elem, wsBytes = 32u << 20;
  void *A, *B, *C, *ws;
  if (!ok(cudaMalloc(&A, bytes), "cudaMalloc") || !ok(cudaMalloc(&B, bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&C, bytes), "cudaMalloc") || !ok(cudaMalloc(&ws, wsBytes), "cudaMalloc"))
    return false;
  cudaMemset(A, 0, bytes);  // zeros: the throughput of a GEMM does not depend on its values (MAMF uses
  cudaMemset(B, 0, bytes);  // random data to avoid power-state artefacts; zero is the conservative case)
  GemmProblem p;
  p.m = p.n = p.k = n;
  p.lda = p.ldb = p.ldc = n;
  p.dtype = bf16 ? GemmDType::kBF16 : GemmDType::kF32;
  std::string err;
  const double ours = timeIt(stream, [&] {
    const Status st = runner.run(p, A, B, C, nullptr, stream, true);
    if (!st.isOk()) err = st.toString();
    return st.isOk();
  });
  int tried = 0;
  const double best = bestCublasLt(stream, n, bf16, A, B, C, ws, wsBytes, &tried);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(ws);
  if (ours < 0) {
    std::printf("FAIL gemm %s %lld^3: %s\n", bf16 ? "bf16" : "f32", (long long)n, err.c_str());
    return false;
  }
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const double tOurs = flops / (ours * 1e-3) / 1e12, tBest = best > 0 ? flops / (best * 1e-3) / 1e12 : 0;
  const double ratio = tBest > 0 ? tOurs / tBest : 0;
  std::printf("%s gemm %s %lld^3: %.0f TFLOP/s, cuBLASLt's best of %d algorithms %.0f TFLOP/s, ratio %.2f "
              "(target >= 0.90)\n",
              ratio >= 0.9 ? "PASS" : "MISS", bf16 ? "bf16" : "f32", (long long)n, tOurs, tried, tBest, ratio);
  return true;
}

bool benchAttention(cudaStream_t stream, GemmRunner* runner, int64_t B, int64_t S, int64_t nh, int64_t hd) {
  const int64_t q = B * S * nh * hd, lse = B * nh * S;
  std::vector<void*> bufs;
  auto alloc = [&](int64_t elems) {
    void* p = nullptr;
    if (cudaMalloc(&p, size_t(elems) * 4) != cudaSuccess) return static_cast<void*>(nullptr);
    cudaMemset(p, 0, size_t(elems) * 4);
    bufs.push_back(p);
    return p;
  };
  void *Q = alloc(q), *K = alloc(q), *V = alloc(q), *O = alloc(q), *L = alloc(lse), *dO = alloc(q), *dQ = alloc(q),
       *dK = alloc(q), *dV = alloc(q);
  int* flag = static_cast<int*>(alloc(1));
  if (bufs.size() != 10 || !flag) {
    std::printf("FAIL attention: cannot allocate the tensors\n");
    return false;
  }
  StreamScratch scratch(stream, 0);
  TableCache tables(0);
  CudaKernelContext ctx;
  ctx.stream = stream;
  ctx.gemm = runner;
  ctx.scratch = &scratch;
  ctx.tables = &tables;
  ctx.deviceError = flag;
  auto call = [&](schema::OpKind kind, std::vector<void*> args, std::vector<int64_t> elems) {
    KernelCall c;
    c.kind = kind;
    c.params = AttentionParams{B, S, nh, nh, hd};
    for (size_t i = 0; i < args.size(); ++i) {
      c.args.push_back({args[i]});
      c.argElems.push_back({elems[i]});
    }
    return c;
  };
  const KernelCall fwd = call(schema::OpKind::kAttentionFwd, {Q, K, V, O, L}, {q, q, q, q, lse});
  const KernelCall bwd = call(schema::OpKind::kAttentionBwd, {dO, Q, K, V, O, L, dQ, dK, dV}, {q, q, q, q, q, lse, q, q, q});
  const CudaKernel* f = cudaKernelTable().find(schema::OpKind::kAttentionFwd);
  const CudaKernel* b = cudaKernelTable().find(schema::OpKind::kAttentionBwd);
  std::string err;
  auto run = [&](const CudaKernel* k, const KernelCall& c) {
    const Status st = (*k)(c, ctx);
    if (!st.isOk()) err = st.toString();
    return st.isOk();
  };
  const double msF = timeIt(stream, [&] { return run(f, fwd); });
  const double msB = timeIt(stream, [&] { return run(b, bwd); });
  for (void* p : bufs) cudaFree(p);
  if (msF < 0 || msB < 0) {
    std::printf("FAIL attention B=%lld S=%lld nh=%lld hd=%lld: %s\n", (long long)B, (long long)S, (long long)nh,
                (long long)hd, err.c_str());
    return false;
  }
  const double flopsF = 4.0 * double(B) * double(nh) * double(S) * double(S) * double(hd) / 2;
  const double tF = flopsF / (msF * 1e-3) / 1e12, tB = 2.5 * flopsF / (msB * 1e-3) / 1e12;
  std::printf("%s attention f32 causal B=%lld S=%lld nh=%lld hd=%lld: forward %.1f TFLOP/s (%.2f ms; target >= 350 "
              "TFLOP/s, FlashAttention-2 class in bf16), backward %.1f TFLOP/s (%.2f ms)\n",
              tF >= 350 ? "PASS" : "MISS", (long long)B, (long long)S, (long long)nh, (long long)hd, tF, msF, tB, msB);
  return true;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP kernel-bench: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("INFO kernel-bench: %s, sm_%d%d\n", prop.name, prop.major, prop.minor);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  StatusOr<std::unique_ptr<GemmRunner>> runner = makeGemmRunner(0);
  if (!runner.isOk()) {
    std::printf("FAIL kernel-bench: %s\n", runner.status().toString().c_str());
    return 1;
  }
  bool good = true;
  for (int64_t n : {4096, 8192}) good = benchGemm(stream, **runner, n, true) && good;
  good = benchGemm(stream, **runner, 8192, false) && good;
  good = benchAttention(stream, runner->get(), 4, 2048, 16, 128) && good;
  good = benchAttention(stream, runner->get(), 1, 8192, 16, 64) && good;
  cudaStreamDestroy(stream);
  return good ? 0 : 1;
}
