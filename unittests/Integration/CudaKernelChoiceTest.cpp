//===- CudaKernelChoiceTest.cpp - the CUDA backend's kernel choices -------===//
//
// The CUDA backend's kernel variants (runtime/src/cuda/host/KernelVariants.h)
// chosen by the real interpreter for real plans, on a machine without a GPU:
// a stand-in backend states the CUDA variants and options (cuDNN usable on an
// sm_90 with cuDNN 9.19, or not) and keeps its arena on the host; nothing is
// launched, only Interpreter::create binds the plan. Shipped tiny models on
// one rank, tp=2 with sequence parallelism, dp=2 with ZeRO-3 and pp=2:
//  - bf16 plans with cuDNN: no argument of any kernel op is converted (every
//    kernel takes the plan's bf16 buffers as they are); linear ops run
//    cuBLASLt, attention cuDNN;
//  - bf16 plans without cuDNN: only attention converts (the own f32 kernel:
//    q, k, v, out forward; dout, q, k, v, out, dq, dk, dv backward);
//  - f32 plans: nothing converts and attention runs the own kernel.
//
//===----------------------------------------------------------------------===//
#include "PlanTestUtil.h"

#include "cuda/host/KernelVariants.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

using namespace llcdist;

namespace {

namespace sc = rt::schema;
using K = sc::OpKind;

// The CUDA backend's variants and options over a host arena; channels are not created for real (no
// step runs).
class CudaChoiceBackend final : public rt::Backend {
public:
  explicit CudaChoiceBackend(bool cudnn) : cpu_(rt::makeCpuBackend()) {
    options_.cudnn = cudnn;
    options_.smVersion = 90;
    options_.cudnnVersion = 91900;
  }
  std::string name() const override { return "cuda-choice"; }
  rt::Status allocateArena(int64_t bytes) override { return cpu_->allocateArena(bytes); }
  std::byte *arenaAt(int64_t offset) override { return cpu_->arenaAt(offset); }
  int64_t arenaBytes() const override { return cpu_->arenaBytes(); }
  int64_t peakAllocatedBytes() const override { return cpu_->peakAllocatedBytes(); }
  rt::StatusOr<float *> allocateStaging(int64_t elems) override { return cpu_->allocateStaging(elems); }
  rt::StatusOr<void *> allocateHostInput(int64_t bytes) override { return cpu_->allocateHostInput(bytes); }
  rt::Status copyHostInput(rt::Stream, void *, const void *, int64_t) override { return unused(); }
  rt::StatusOr<rt::Stream> createStream() override { return cpu_->createStream(); }
  rt::StatusOr<rt::Event> createEvent() override { return cpu_->createEvent(); }
  rt::Status recordEvent(rt::Stream s, rt::Event e) override { return cpu_->recordEvent(s, e); }
  rt::Status waitEvent(rt::Stream s, rt::Event e) override { return cpu_->waitEvent(s, e); }
  rt::Status synchronize() override { return rt::Status::ok(); }
  rt::Status copyToDevice(rt::Stream, int64_t, const void *, int64_t) override { return unused(); }
  rt::Status copyToHost(rt::Stream, void *, int64_t, int64_t) override { return unused(); }
  rt::Status fillZero(rt::Stream, int64_t, int64_t) override { return unused(); }
  rt::Status launchHostFunc(rt::Stream, std::function<void()>) override { return unused(); }
  rt::Status launch(rt::Stream, const rt::KernelCall &) override { return unused(); }
  bool hasKernel(sc::OpKind kind) const override { return !rt::cuda::cudaKernelVariants(kind).empty(); }
  std::vector<const rt::KernelVariantInfo *> kernelVariants(sc::OpKind kind) const override {
    std::vector<const rt::KernelVariantInfo *> out;
    for (const rt::KernelVariantInfo &v : rt::cuda::cudaKernelVariants(kind))
      out.push_back(&v);
    return out;
  }
  rt::KernelSelectOptions kernelSelectOptions() const override { return options_; }
  rt::StatusOr<rt::Channel> createChannel(const std::vector<int> &) override { return rt::Channel{0}; }
  rt::StatusOr<rt::CollectiveHandle> allReduceAsync(rt::Stream, void *, int64_t, rt::CommDType, rt::ReduceOp,
                                                    rt::Channel) override {
    return unused();
  }
  rt::StatusOr<rt::CollectiveHandle> allGatherAsync(rt::Stream, const void *, void *, int64_t, int64_t, int64_t,
                                                    rt::CommDType, rt::Channel) override {
    return unused();
  }
  rt::StatusOr<rt::CollectiveHandle> reduceScatterAsync(rt::Stream, const void *, void *, int64_t, int64_t, int64_t,
                                                        rt::CommDType, rt::ReduceOp, rt::Channel) override {
    return unused();
  }
  rt::StatusOr<rt::CollectiveHandle> sendAsync(rt::Stream, const void *, int64_t, rt::CommDType, int, int64_t,
                                               int64_t) override {
    return unused();
  }
  rt::StatusOr<rt::CollectiveHandle> recvAsync(rt::Stream, void *, int64_t, rt::CommDType, int, int64_t,
                                               int64_t) override {
    return unused();
  }
  rt::Status waitCollective(rt::Stream, rt::CollectiveHandle) override { return unused(); }
  bool collectiveDone(rt::CollectiveHandle) override { return true; }

private:
  static rt::Status unused() { return rt::Status::internal("the choice test runs nothing"); }
  std::unique_ptr<rt::Backend> cpu_;
  rt::KernelSelectOptions options_;
};

struct Choices {
  // (kind, variant) -> ops, and the arguments converted per kind, over every program of the plan.
  std::map<std::pair<K, std::string>, int64_t> ops;
  std::map<K, int64_t> converted;
  int64_t totalConverted = 0;
};

Choices choicesOf(const std::string &model, int64_t dp, int64_t tp, int64_t pp, bool sp, int64_t zero,
                  const std::string &dtype, bool cudnn) {
  Choices out;
  TrainingPipelineOptions opt;
  opt.optimizer = "adamw";
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  opt.mesh.pp = pp;
  opt.sequenceParallel = sp;
  opt.zero = zero;
  TrainingShape shape;
  shape.seqLen = 32;
  shape.microBatch = 2;
  shape.globalBatch = 4 * dp;
  shape.dtype = dtype;
  const std::string tag = "choice-" + dtype + "-dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" +
                          std::to_string(pp) + "-z" + std::to_string(zero);
  const std::string dir = test::compilePlan(model, shape, opt, tag);
  EXPECT_FALSE(dir.empty()) << tag << ": compilation failed";
  if (dir.empty())
    return out;
  rt::StatusOr<rt::Plan> plan = rt::loadPlan(dir);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  if (plan.isOk())
    for (size_t p = 0; p < plan->programs.size(); ++p) {
      CudaChoiceBackend backend(cudnn);
      const int rank = int(plan->manifest.programs[p].ranks.front());
      auto in = rt::Interpreter::create(*plan, p, backend, rank);
      EXPECT_TRUE(in.isOk()) << tag << ": " << in.status().toString();
      if (!in.isOk())
        continue;
      for (const auto &c : (*in)->kernelChoices()) {
        out.ops[{c.kind, c.variant}] += c.ops;
        out.converted[c.kind] += c.convertedArgs;
        out.totalConverted += c.convertedArgs;
      }
    }
  std::filesystem::remove_all(dir);
  return out;
}

struct Mesh {
  int64_t dp, tp, pp;
  bool sp;
  int64_t zero;
};
const Mesh kMeshes[] = {{1, 1, 1, false, 0}, {1, 2, 1, true, 0}, {2, 1, 1, false, 3}, {1, 1, 2, false, 0}};

TEST(CudaKernelChoice, Bf16PlansConvertNothingWithCudnn) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (const Mesh &m : kMeshes) {
      SCOPED_TRACE(std::string(model) + " dp" + std::to_string(m.dp) + " tp" + std::to_string(m.tp) + " pp" +
                   std::to_string(m.pp));
      const Choices c = choicesOf(model, m.dp, m.tp, m.pp, m.sp, m.zero, "bf16", true);
      EXPECT_EQ(c.totalConverted, 0);
      for (const auto &[kv, n] : c.converted)
        EXPECT_EQ(n, 0) << sc::opName(kv);
      EXPECT_GT(c.ops.count({K::kLinearFwd, "cublaslt"}), 0u);
      EXPECT_GT(c.ops.count({K::kAttentionFwd, "cudnn"}), 0u);
      EXPECT_GT(c.ops.count({K::kAttentionBwd, "cudnn"}), 0u);
      EXPECT_EQ(c.ops.count({K::kAttentionFwd, "own"}), 0u);
      // The LM head and its loss as one op (llcdist-plan-fuse-classifier) where the loss is not
      // vocabulary-parallel: its three GEMMs on cuBLASLt, on the bf16 logits as they are.
      if (m.tp == 1)
        EXPECT_GT(c.ops.count({K::kClassifier, "cublaslt"}), 0u);
    }
}

TEST(CudaKernelChoice, Bf16PlansWithoutCudnnConvertOnlyAttention) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(model);
    const Choices c = choicesOf(model, 1, 1, 1, false, 0, "bf16", false);
    const int64_t fwd = c.ops.at({K::kAttentionFwd, "own"}), bwd = c.ops.at({K::kAttentionBwd, "own"});
    EXPECT_GT(fwd, 0);
    // GPT-2's attention reads the packed qkv and writes dqkv (llcdist-plan-packed-qkv): qkv, out; dout,
    // qkv, out, dqkv. Llama's: q, k, v, out; dout, q, k, v, out, dq, dk, dv.
    const bool packed = std::string(model) == "tiny-gpt2";
    const int64_t perFwd = packed ? 2 : 4, perBwd = packed ? 4 : 8;
    EXPECT_EQ(c.converted.at(K::kAttentionFwd), perFwd * fwd);
    EXPECT_EQ(c.converted.at(K::kAttentionBwd), perBwd * bwd);
    EXPECT_EQ(c.totalConverted, perFwd * fwd + perBwd * bwd);
  }
}

TEST(CudaKernelChoice, F32PlansConvertNothingAndRunTheOwnAttention) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(model);
    const Choices c = choicesOf(model, 1, 2, 1, true, 0, "f32", true);
    EXPECT_EQ(c.totalConverted, 0);
    EXPECT_GT(c.ops.count({K::kAttentionFwd, "own"}), 0u);
    EXPECT_EQ(c.ops.count({K::kAttentionFwd, "cudnn"}), 0u);
    EXPECT_GT(c.ops.count({K::kLinearBwdWeight, "cublaslt"}), 0u);
  }
}

} // namespace
