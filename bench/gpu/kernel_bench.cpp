// GEMM and attention throughput of the CUDA backend on a GPU (scripts/test-gpu.sh, check 4;
// bench/README.md states the targets). One line per shape:
//  - GEMM (bf16 and f32 data, f32 accumulation), M = N = K at large sizes, and every distinct GEMM of
//    GPT-2 124M's and Llama-3.2-1B's bf16 training steps (forward, dX, dW of each projection, through
//    GemmPlan's mapping, at the benchmark batches' 8192 tokens): the runner the linear ops use
//    (src/cuda/Gemm.h: cuBLASLt's first heuristic algorithm, cached) beside the best of cuBLASLt's top
//    16 algorithms timed one by one on the same problem (a MAMF-style sweep: the best the library
//    gives); target: >= 0.90 of it;
//  - causal attention forward and backward through the kernel table, in TFLOP/s (causal FLOPs: half
//    the dense 4·B·nh·S²·hd forward, 2.5× that backward; cuda/host/AttentionPlan.h);
//  - cuDNN fused attention (src/cuda/CudnnAttention.h) on bf16 tensors at GPT-2 124M's and
//    Llama-3.2-1B's shapes (B=8 S=1024 nh=12 hd=64; B=4 S=2048 nh=32 nkv=8 hd=64), beside the own
//    kernel at the same shapes: forward, backward and the deterministic backward (target: forward >=
//    250 TFLOP/s at Llama-3.2-1B's shape). A build or device without it prints one SKIP line.
// Times are medians of 20 launches after 3 warm-ups (7 for each candidate of a sweep), by CUDA events.
// Without a device it prints one SKIP line and exits 0.
#include "cuda/CudaKernels.h"
#include "cuda/CudnnAttention.h"
#include "cuda/DeviceMemory.h"
#include "cuda/Gemm.h"
#include "llcdist/runtime/Bf16.h"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
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

// Median milliseconds of `reps` launches of fn() on `stream`, after 3 warm-ups.
double timeIt(cudaStream_t stream, const std::function<bool()>& fn, int reps = 20) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i)
    if (!fn()) return -1;
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
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

// cuBLASLt's best of its top 16 algorithms for the problem (the runner's layouts, transposes and types,
// f32 compute), each timed alone: the best the library gives on this GEMM. -1 when none ran.
double bestCublasLt(cudaStream_t stream, const GemmProblem& g, const void* A, const void* B, void* C, void* ws,
                    size_t wsBytes, int* tried) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  const cudaDataType_t t = g.dtype == GemmDType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t tc = g.outType == GemmDType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, t, uint64_t(g.transA ? g.k : g.m), uint64_t(g.transA ? g.m : g.k), g.lda);
  cublasLtMatrixLayoutCreate(&lb, t, uint64_t(g.transB ? g.n : g.k), uint64_t(g.transB ? g.k : g.n), g.ldb);
  cublasLtMatrixLayoutCreate(&lc, tc, uint64_t(g.m), uint64_t(g.n), g.ldc);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof(wsBytes));
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 16, res, &found);
  const float alpha = 1, beta = g.beta;
  double best = -1;
  *tried = 0;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const double ms = timeIt(  // 7 launches each: 16 candidates at the LM head's size stay within seconds
        stream,
        [&] {
          return cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res[i].algo, ws, wsBytes, stream) ==
                 CUBLAS_STATUS_SUCCESS;
        },
        7);
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

// The runner (what the linear ops run: its cached heuristic choice, split-K allowed as in a run without
// --deterministic) beside bestCublasLt on problem `g`: one PASS / MISS line against the target of
// 0.90 of the best. `what` names the problem.
bool benchProblem(cudaStream_t stream, GemmRunner& runner, const GemmProblem& g, const std::string& what) {
  const int64_t ab = gemmElemSize(g.dtype), cb = gemmElemSize(g.outType);
  const size_t bytesA = size_t(gemmElemsA(g) * ab), bytesB = size_t(gemmElemsB(g) * ab),
               bytesC = size_t(gemmElemsC(g) * cb), wsBytes = 32u << 20;
  void *A, *B, *C, *ws;
  if (!ok(cudaMalloc(&A, bytesA), "cudaMalloc") || !ok(cudaMalloc(&B, bytesB), "cudaMalloc") ||
      !ok(cudaMalloc(&C, bytesC), "cudaMalloc") || !ok(cudaMalloc(&ws, wsBytes), "cudaMalloc"))
    return false;
  cudaMemset(A, 0, bytesA);  // zeros: the throughput of a GEMM does not depend on its values (MAMF uses
  cudaMemset(B, 0, bytesB);  // random data to avoid power-state artefacts; zero is the conservative case)
  cudaMemset(C, 0, bytesC);
  std::string err;
  const double ours = timeIt(stream, [&] {
    const Status st = runner.run(g, A, B, C, nullptr, nullptr, stream, /*deterministic=*/false);
    if (!st.isOk()) err = st.toString();
    return st.isOk();
  });
  int tried = 0;
  const double best = bestCublasLt(stream, g, A, B, C, ws, wsBytes, &tried);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(ws);
  if (ours < 0) {
    std::printf("FAIL gemm %s: %s\n", what.c_str(), err.c_str());
    return false;
  }
  const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k);
  const double tOurs = flops / (ours * 1e-3) / 1e12, tBest = best > 0 ? flops / (best * 1e-3) / 1e12 : 0;
  const double ratio = tBest > 0 ? tOurs / tBest : 0;
  std::printf("%s gemm %s: %.0f TFLOP/s (%.3f ms), cuBLASLt's best of %d algorithms %.0f TFLOP/s, ratio %.2f "
              "(target >= 0.90)\n",
              ratio >= 0.9 ? "PASS" : "MISS", what.c_str(), tOurs, ours, tried, tBest, ratio);
  return true;
}

// Every distinct GEMM of a model's bf16 training step (linear_fwd, linear_bwd_input and
// linear_bwd_weight of each projection, as the compiled plans have them: M tokens, the weight's layout,
// dW accumulated over microbatches), through GemmPlan's mapping.
struct Projection {
  const char* name;
  int64_t K, N;
  WeightLayout layout;
};
bool benchModelGemms(cudaStream_t stream, GemmRunner& runner, const char* model, int64_t M,
                     const std::vector<Projection>& projections) {
  bool good = true;
  for (const Projection& pr : projections) {
    LinearParams p;
    p.M = M;
    p.K = pr.K;
    p.N = pr.N;
    p.layout = pr.layout;
    p.accumulate = false;
    const std::string shape = std::string(model) + " " + pr.name + " (M " + std::to_string(M) + ", K " +
                              std::to_string(pr.K) + ", N " + std::to_string(pr.N) + ")";
    good = benchProblem(stream, runner, linearForwardGemm(p, false, GemmDType::kBF16, GemmDType::kBF16),
                        shape + " fwd") && good;
    good = benchProblem(stream, runner, linearBackwardInputGemm(p, GemmDType::kBF16, GemmDType::kBF16),
                        shape + " dX") && good;
    p.accumulate = true;  // the plans accumulate dW over microbatches
    good = benchProblem(stream, runner, linearBackwardWeightGemm(p, GemmDType::kBF16, GemmDType::kBF16),
                        shape + " dW") && good;
  }
  return good;
}

bool benchGemm(cudaStream_t stream, GemmRunner& runner, int64_t n, bool bf16) {
  GemmProblem p;
  p.m = p.n = p.k = n;
  p.lda = p.ldb = p.ldc = n;
  p.dtype = p.outType = bf16 ? GemmDType::kBF16 : GemmDType::kF32;
  return benchProblem(stream, runner, p, std::string(bf16 ? "bf16 " : "f32 ") + std::to_string(n) + "^3");
}

bool benchAttention(cudaStream_t stream, GemmRunner* runner, int64_t B, int64_t S, int64_t nh, int64_t nkv,
                    int64_t hd) {
  const int64_t q = B * S * nh * hd, kv = B * S * nkv * hd, lse = B * nh * S;
  std::vector<void*> bufs;
  auto alloc = [&](int64_t elems) {
    void* p = nullptr;
    if (cudaMalloc(&p, size_t(elems) * 4) != cudaSuccess) return static_cast<void*>(nullptr);
    cudaMemset(p, 0, size_t(elems) * 4);
    bufs.push_back(p);
    return p;
  };
  void *Q = alloc(q), *K = alloc(kv), *V = alloc(kv), *O = alloc(q), *L = alloc(lse), *dO = alloc(q),
       *dQ = alloc(q), *dK = alloc(kv), *dV = alloc(kv);
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
    c.params = AttentionParams{B, S, nh, nkv, hd};
    for (size_t i = 0; i < args.size(); ++i) {
      c.args.push_back({args[i]});
      c.argElems.push_back({elems[i]});
    }
    return c;
  };
  const KernelCall fwd = call(schema::OpKind::kAttentionFwd, {Q, K, V, O, L}, {q, kv, kv, q, lse});
  const KernelCall bwd =
      call(schema::OpKind::kAttentionBwd, {dO, Q, K, V, O, L, dQ, dK, dV}, {q, q, kv, kv, q, lse, q, kv, kv});
  const CudaKernel* f = cudaKernel(schema::OpKind::kAttentionFwd);
  const CudaKernel* b = cudaKernel(schema::OpKind::kAttentionBwd);
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
    std::printf("FAIL attention B=%lld S=%lld nh=%lld nkv=%lld hd=%lld: %s\n", (long long)B, (long long)S,
                (long long)nh, (long long)nkv, (long long)hd, err.c_str());
    return false;
  }
  const double flopsF = 4.0 * double(B) * double(nh) * double(S) * double(S) * double(hd) / 2;
  const double tF = flopsF / (msF * 1e-3) / 1e12, tB = 2.5 * flopsF / (msB * 1e-3) / 1e12;
  std::printf("%s attention f32 causal B=%lld S=%lld nh=%lld nkv=%lld hd=%lld: forward %.1f TFLOP/s (%.2f ms; target "
              ">= 350 TFLOP/s, FlashAttention-2 class in bf16), backward %.1f TFLOP/s (%.2f ms)\n",
              tF >= 350 ? "PASS" : "MISS", (long long)B, (long long)S, (long long)nh, (long long)nkv, (long long)hd, tF,
              msF, tB, msB);
  return true;
}

// cuDNN fused attention on bf16 tensors (random values: softmax work does not depend on them, but the
// data stays realistic): graphs prepared first (not timed), one workspace for the three graphs.
// `target` > 0: forward TFLOP/s to reach (PASS / MISS); 0: reported (INFO).
bool benchCudnnAttention(cudaStream_t stream, CudnnAttention& att, const char* model, int64_t B, int64_t S, int64_t nh,
                         int64_t nkv, int64_t hd, double target) {
  const AttentionParams params{B, S, nh, nkv, hd};
  const AttentionProblem fwd = attentionProblem(params, false, false), bwd = attentionProblem(params, true, false),
                         det = attentionProblem(params, true, true);
  std::string shape = std::string(model) + " B=" + std::to_string(B) + " S=" + std::to_string(S) +
                      " nh=" + std::to_string(nh) + " nkv=" + std::to_string(nkv) + " hd=" + std::to_string(hd);
  int64_t wsBytes = 0;
  for (const AttentionProblem* p : {&fwd, &bwd, &det}) {
    StatusOr<int64_t> ws = att.prepare(*p);
    if (!ws.isOk()) {
      std::printf("FAIL cudnn attention %s: %s\n", shape.c_str(), ws.status().toString().c_str());
      return false;
    }
    wsBytes = std::max(wsBytes, *ws);
  }
  std::vector<void*> bufs;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto alloc = [&](AttentionTensor t) -> void* {
    const int64_t n = attentionElems(fwd, t);
    const size_t bytes = size_t(n) * (t == AttentionTensor::kStats ? 4 : 2);
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    bufs.push_back(p);
    if (t == AttentionTensor::kStats) return p;
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = dist(gen);
    std::vector<uint16_t> b(f.size());
    convertF32ToBf16(f.data(), b.data(), n);
    cudaMemcpy(p, b.data(), bytes, cudaMemcpyHostToDevice);
    return p;
  };
  using T = AttentionTensor;
  void *Q = alloc(T::kQ), *K = alloc(T::kK), *V = alloc(T::kV), *O = alloc(T::kO), *L = alloc(T::kStats),
       *dO = alloc(T::kDO), *dQ = alloc(T::kDQ), *dK = alloc(T::kDK), *dV = alloc(T::kDV), *ws = nullptr;
  if (wsBytes > 0 && cudaMalloc(&ws, size_t(wsBytes)) == cudaSuccess) bufs.push_back(ws);
  if (bufs.size() != 9 + (wsBytes > 0 ? 1 : 0)) {
    for (void* p : bufs) cudaFree(p);
    std::printf("FAIL cudnn attention %s: cannot allocate the tensors and %lld bytes of workspace\n", shape.c_str(),
                (long long)wsBytes);
    return false;
  }
  std::string err;
  auto check = [&](const Status& st) {
    if (!st.isOk()) err = st.toString();
    return st.isOk();
  };
  float* lse = static_cast<float*>(L);
  const double msF = timeIt(stream, [&] { return check(att.forward(fwd, Q, K, V, O, lse, ws, wsBytes, stream)); });
  const auto backward = [&](const AttentionProblem& p) {
    return timeIt(stream,
                  [&] { return check(att.backward(p, dO, Q, K, V, O, lse, dQ, dK, dV, ws, wsBytes, stream)); });
  };
  const double msB = msF < 0 ? -1 : backward(bwd), msD = msB < 0 ? -1 : backward(det);
  for (void* p : bufs) cudaFree(p);
  if (msF < 0 || msB < 0 || msD < 0) {
    std::printf("FAIL cudnn attention %s: %s\n", shape.c_str(), err.c_str());
    return false;
  }
  const double tF = attentionForwardFlops(fwd) / (msF * 1e-3) / 1e12;
  const double tB = attentionBackwardFlops(bwd) / (msB * 1e-3) / 1e12;
  const double tD = attentionBackwardFlops(det) / (msD * 1e-3) / 1e12;
  const std::string goal = target > 0 ? "; target >= " + std::to_string(int(target)) + " TFLOP/s" : "";
  std::printf("%s cudnn attention bf16 causal %s: forward %.1f TFLOP/s (%.2f ms%s), backward %.1f TFLOP/s (%.2f ms), "
              "deterministic backward %.1f TFLOP/s (%.2f ms; workspace %.1f MiB)\n",
              target <= 0 ? "INFO" : tF >= target ? "PASS" : "MISS", shape.c_str(), tF, msF, goal.c_str(), tB, msB, tD,
              msD, double(wsBytes) / (1 << 20));
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
  // The models' own GEMMs (bench/gpu_step.py's batches: 8 × 1024 and 4 × 2048 tokens).
  const WeightLayout conv = WeightLayout::kInOut, lin = WeightLayout::kOutIn;
  good = benchModelGemms(stream, **runner, "GPT-2 124M", 8192,
                         {{"c_attn", 768, 2304, conv}, {"attn.c_proj", 768, 768, conv}, {"c_fc", 768, 3072, conv},
                          {"mlp.c_proj", 3072, 768, conv}, {"lm_head", 768, 50304, lin}}) && good;
  good = benchModelGemms(stream, **runner, "Llama-3.2-1B", 8192,
                         {{"q_proj", 2048, 2048, lin}, {"k_proj", 2048, 512, lin}, {"gate_proj", 2048, 8192, lin},
                          {"down_proj", 8192, 2048, lin}, {"lm_head", 2048, 128256, lin}}) && good;
  good = benchAttention(stream, runner->get(), 4, 2048, 16, 16, 128) && good;
  good = benchAttention(stream, runner->get(), 1, 8192, 16, 16, 64) && good;
  // cuDNN fused attention at the models' shapes, each beside the own kernel at the same shape.
  std::string why;
  std::unique_ptr<CudnnAttention> att;
  if (!cudnnAttentionUsable(&why)) {
    std::printf("SKIP cudnn attention: %s\n", why.c_str());
  } else if (StatusOr<std::unique_ptr<CudnnAttention>> a = CudnnAttention::create(0); !a.isOk()) {
    std::printf("FAIL cudnn attention: %s\n", a.status().toString().c_str());
    good = false;
  } else {
    att = std::move(a).value();
  }
  struct ModelShape {
    const char* model;
    int64_t B, S, nh, nkv, hd;
    double target;  // forward TFLOP/s; 0: none
  };
  for (const ModelShape& m : {ModelShape{"GPT-2 124M", 8, 1024, 12, 12, 64, 0},
                              ModelShape{"Llama-3.2-1B", 4, 2048, 32, 8, 64, 250}}) {
    good = benchAttention(stream, runner->get(), m.B, m.S, m.nh, m.nkv, m.hd) && good;
    if (att) good = benchCudnnAttention(stream, *att, m.model, m.B, m.S, m.nh, m.nkv, m.hd, m.target) && good;
  }
  cudaStreamDestroy(stream);
  return good ? 0 : 1;
}
