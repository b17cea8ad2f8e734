//===- ParallelTest.cpp - the golden rule for data and tensor parallelism -===//
//
// Every parallel plan reproduces the single-device plan: for tiny GPT-2,
// tiny Llama and tiny Qwen2, (dp, tp) ∈ {(2,1), (4,1), (1,2), (1,4), (2,2), (2,4)} with the
// same global batch (with and without gradient accumulation, with and without
// sequence parallelism where tp > 1) gives the
// single-device losses and parameters (gathered from their shards) after 3
// SGD and 3 AdamW steps, within 1e-5 relative (fp32; sums run in another
// order).
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
using test::expectSame;
using test::Tolerance;
using test::Trained;

Trained train(const std::string &model, int64_t dp, int64_t tp,
              int64_t microBatch, const std::string &optimizer,
              bool replicateEmbeddings = false, bool sequenceParallel = false) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  opt.replicateEmbeddings = replicateEmbeddings;
  opt.sequenceParallel = sequenceParallel;
  std::string tag = "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-mb" +
                    std::to_string(microBatch) + optimizer +
                    (replicateEmbeddings ? "-repl" : "") + (sequenceParallel ? "-sp" : "");
  return test::trainPlan(model, opt, microBatch, tag);
}

// Tolerances: test::goldenTolerance (SGD strict; AdamW's sqrt(v) bound).
/// Also under Megatron's sequence parallelism where tp > 1.
void golden(const std::string &model, const std::string &optimizer) {
  Tolerance tol = test::goldenTolerance(optimizer);
  Trained ref = train(model, 1, 1, 8, optimizer); // one device, one microbatch
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  for (auto [dp, tp] : {std::pair<int64_t, int64_t>{2, 1}, {4, 1}, {1, 2}, {1, 4},
                        {2, 2}, {2, 4}}) {
    int64_t full = 8 / dp;
    std::string name = model + " " + optimizer + " dp=" + std::to_string(dp) +
                       " tp=" + std::to_string(tp);
    expectSame(ref, train(model, dp, tp, full, optimizer), name, tol);
    expectSame(ref, train(model, dp, tp, full / 2, optimizer),
               name + " with 2 microbatches", tol);
    if (tp > 1) { // Megatron's sequence parallelism on top
      expectSame(ref, train(model, dp, tp, full, optimizer, false, true),
                 name + " sequence-parallel", tol);
      expectSame(ref, train(model, dp, tp, full / 2, optimizer, false, true),
                 name + " sequence-parallel with 2 microbatches", tol);
    }
  }
}
} // namespace

TEST(Parallel, TinyGPT2SGD) { golden("tiny-gpt2", "sgd"); }
TEST(Parallel, TinyGPT2AdamW) { golden("tiny-gpt2", "adamw"); }
TEST(Parallel, TinyLlamaSGD) { golden("tiny-llama", "sgd"); }
TEST(Parallel, TinyLlamaAdamW) { golden("tiny-llama", "adamw"); }
// Qwen2: biases on q, k, v (column-parallel, split with their heads), tied
// embeddings; tp = 4 replicates its 2 kv heads (and their biases).
TEST(Parallel, TinyQwen2SGD) { golden("tiny-qwen2", "sgd"); }
TEST(Parallel, TinyQwen2AdamW) { golden("tiny-qwen2", "adamw"); }
// Mistral: a sliding window of 8 (9 keys) over the golden runs' 16 (tp = 4
// replicates its 2 kv heads).
TEST(Parallel, TinyMistralSGD) { golden("tiny-mistral", "sgd"); }
// Gemma: GeGLU, (1 + w) norms, scaled embeddings, head_dim 32 over hidden 64
// (q is wider than the residual stream), one kv head (replicated for tp > 1).
TEST(Parallel, TinyGemmaSGD) { golden("tiny-gemma", "sgd"); }
// Phi: attention and MLP side by side on one LayerNorm (under sequence
// parallelism both read its gathered output), partial rotary, biases
// everywhere: the two row-parallel outputs are reduced, biased and summed.
TEST(Parallel, TinyPhiSGD) { golden("tiny-phi", "sgd"); }
TEST(Parallel, TinyPhiAdamW) { golden("tiny-phi", "adamw"); }
// StarCoder2: Llama's attention (2 kv heads, replicated for tp = 4; the
// window of 8) between LayerNorms with biases, a GPT-style MLP with biases,
// a tied head.
TEST(Parallel, TinyStarcoder2SGD) { golden("tiny-starcoder2", "sgd"); }
// StableLM: Llama's layer with LayerNorms (weight and bias), partial rotary
// (4 of 16 dims), q, k, v biases; with use_parallel_residual one LayerNorm
// feeds attention and the MLP, x + attn + mlp: the two row-parallel outputs
// add up before one reduction.
TEST(Parallel, TinyStableLmSGD) { golden("tiny-stablelm", "sgd"); }
TEST(Parallel, TinyStableLmParallelResidualAdamW) {
  golden(std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-stablelm-parallel.json", "adamw");
}
// GPT-NeoX: q, k and v fused per head (tp = 4 keeps one head's q, k and v
// per rank: a plain block of query_key_value's rows), the exact GELU, two
// LayerNorms of the layer's input side by side (use_parallel_residual).
TEST(Parallel, TinyGptNeoXSGD) { golden("tiny-gpt-neox", "sgd"); }
// BLOOM: GPT-NeoX's fused q|k|v per head without rotary embeddings but ALiBi
// over 12 heads (8 slopes of the power of two, 4 from the next): each tp
// rank adds the slopes of its own heads (tp = 4: heads 6-8 cross from one
// set to the other); a LayerNorm on the embeddings (under sequence
// parallelism on each rank's slice of the tokens), the head tied.
TEST(Parallel, TinyBloomSGD) { golden("tiny-bloom", "sgd"); }
TEST(Parallel, TinyBloomAdamW) { golden("tiny-bloom", "adamw"); }
// GPTBigCode without multi_query: GPT-2's layer and learned positions with
// nn.Linear layouts and c_attn grouped per head (whole heads per tp rank).
// (Its multi_query layout has one kv head, which a fused c_attn cannot
// replicate over tp: ContextParallelTest and hf-gpt-bigcode.test run it.)
TEST(Parallel, TinyGptBigCodeSGD) {
  golden(std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-gpt-bigcode-mha.json", "sgd");
}
// MPT: GPT-2's layer with nn.Linear layouts, Wqkv [q | k | v] in three
// blocks per tp rank, ALiBi over 12 heads (each tp rank its own heads'
// slopes), LayerNorms of a weight alone (their weight gradients summed over
// the sequence-parallel slices), no biases, the exact GELU.
TEST(Parallel, TinyMptSGD) { golden("tiny-mpt", "sgd"); }
TEST(Parallel, TinyMptAdamW) { golden("tiny-mpt", "adamw"); }
// GPT-J: Phi's side-by-side layer with rotate_every_two on the first 8 dims
// of each head (adjacent pairs), no attention biases, the head's bias split
// with the vocabulary, untied.
TEST(Parallel, TinyGptJSGD) { golden("tiny-gpt-j", "sgd"); }
// OPT: StarCoder2's sequential layer without rotary embeddings, ReLU, the
// learned positions from row 2 of their table (split over tp's sequence
// slices), tied.
TEST(Parallel, TinyOptSGD) { golden("tiny-opt", "sgd"); }
TEST(Parallel, TinyOptAdamW) { golden("tiny-opt", "adamw"); }
// GPT-Neo: OPT's sequential layer with GPT-2's names and tanh GELU, no q, k, v
// biases, unscaled scores (q times sqrt(head_dim) on each tp rank's heads),
// global and local layers (two layer bodies, split over pipeline stages).
TEST(Parallel, TinyGptNeoSGD) { golden("tiny-gpt-neo", "sgd"); }
TEST(Parallel, TinyGptNeoAdamW) { golden("tiny-gpt-neo", "adamw"); }
TEST(Parallel, TinyBioGptSGD) { golden("tiny-biogpt", "sgd"); }
TEST(Parallel, TinyBioGptAdamW) { golden("tiny-biogpt", "adamw"); }
TEST(Parallel, TinyCodeGenSGD) { golden("tiny-codegen", "sgd"); }
TEST(Parallel, TinyCodeGenAdamW) { golden("tiny-codegen", "adamw"); }
// Cohere: StableLM's parallel layer on a LayerNorm of a weight alone, GQA
// (2 kv heads, one per tp rank), rotary embeddings in adjacent pairs, the
// logits' scale on each rank's sequence slice, tied.
TEST(Parallel, TinyCohereSGD) { golden("tiny-cohere", "sgd"); }
TEST(Parallel, TinyCohereAdamW) { golden("tiny-cohere", "adamw"); }
// The mixtures of experts: every token's experts whatever the rank holds its
// tokens (dp: each rank routes its own, its group sizes its own; the expert
// gradients reduced over dp), the experts whole on every tp rank (Qwen2-MoE's
// shared expert split as an MLP and gated after its all-reduce), and under
// sequence parallelism on each tp rank's own slice of the tokens (the experts'
// gradients then summed over tp).
TEST(Parallel, TinyMixtralSGD) { golden("tiny-mixtral", "sgd"); }
TEST(Parallel, TinyQwen2MoeAdamW) { golden("tiny-qwen2-moe", "adamw"); }

// Expert parallelism: the experts split over ep ranks drawn from dp (each
// rank's tokens' rows exchanged with all_to_all_v), with expert replicas
// (dp = 4, ep = 2: the experts' gradients reduced over edp), with tp, and
// with gradient accumulation, reproduce the single-device run. Qwen2-MoE's
// 8 experts at ep = 4 give each rank 2, fewer than its top-3. Under ZeRO the
// experts' blocks are over edp (dp = 4, ep = 2) or none (ep = dp), the rest
// over dp; under sequence parallelism each tp rank dispatches its own slice
// of the tokens over its ep group.
TEST(Parallel, ExpertParallel) {
  struct Case {
    const char *model, *optimizer;
    int64_t dp, tp, ep, zero = 0;
    bool sequenceParallel = false;
  };
  for (const Case &c :
       {Case{"tiny-mixtral", "sgd", 2, 1, 2}, Case{"tiny-mixtral", "sgd", 4, 1, 2},
        Case{"tiny-mixtral", "sgd", 4, 1, 4}, Case{"tiny-mixtral", "sgd", 2, 2, 2},
        Case{"tiny-qwen2-moe", "adamw", 4, 1, 4}, Case{"tiny-qwen2-moe", "adamw", 2, 2, 2},
        Case{"tiny-mixtral", "adamw", 4, 1, 2, 1}, Case{"tiny-qwen2-moe", "adamw", 4, 1, 2, 2},
        Case{"tiny-mixtral", "sgd", 4, 1, 4, 3}, Case{"tiny-qwen2-moe", "adamw", 2, 2, 2, 3},
        Case{"tiny-qwen2-moe", "adamw", 2, 2, 2, 1, true}, Case{"tiny-mixtral", "sgd", 2, 2, 2, 0, true}}) {
    Tolerance tol = test::goldenTolerance(c.optimizer);
    Trained ref = train(c.model, 1, 1, 8, c.optimizer);
    for (int64_t microBatch : {8 / c.dp, 4 / c.dp}) {
      if (microBatch < 1)
        continue;
      TrainingPipelineOptions opt = test::goldenOptions(c.optimizer);
      opt.mesh.dp = c.dp;
      opt.mesh.tp = c.tp;
      opt.mesh.ep = c.ep;
      opt.zero = c.zero;
      opt.sequenceParallel = c.sequenceParallel;
      std::string tag = "dp" + std::to_string(c.dp) + "-tp" + std::to_string(c.tp) + "-ep" + std::to_string(c.ep) +
                        "-z" + std::to_string(c.zero) + (c.sequenceParallel ? "-sp" : "") + "-mb" +
                        std::to_string(microBatch) + c.optimizer;
      expectSame(ref, test::trainPlan(c.model, opt, microBatch, tag), std::string(c.model) + " " + tag, tol);
    }
  }
}

// The MoE load-balancing loss (tiny-mixtral with output_router_logits) is
// the microbatch's: with the same microbatch on one device, tp (the experts
// whole on every rank), sequence parallelism (each tp rank's routers count
// their own slice of the tokens; the statistics all-reduced over tp where
// the loss reads them) and context parallelism (the same over cp, ring and
// all-to-all) reproduce it.
TEST(Parallel, TinyMixtralLoadBalancingLoss) {
  const std::string path = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-mixtral-aux.json";
  const Tolerance tol = test::goldenTolerance("sgd");
  Trained ref = test::trainPlan(path, test::goldenOptions("sgd"), 8, "aux-ref");
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  struct Case {
    int64_t tp, cp;
    bool sequenceParallel;
    const char *cpImpl;
  };
  for (const Case &c : {Case{2, 1, false, "ring"}, Case{2, 1, true, "ring"}, Case{4, 1, true, "ring"},
                        Case{1, 2, false, "ring"}, Case{1, 2, false, "all-to-all"}, Case{2, 2, true, "ring"}}) {
    TrainingPipelineOptions opt = test::goldenOptions("sgd");
    opt.mesh.tp = c.tp;
    opt.mesh.cp = c.cp;
    opt.sequenceParallel = c.sequenceParallel;
    opt.cpImpl = c.cpImpl;
    const std::string tag = "aux-tp" + std::to_string(c.tp) + "-cp" + std::to_string(c.cp) +
                            (c.sequenceParallel ? "-sp" : "") + "-" + c.cpImpl;
    expectSame(ref, test::trainPlan(path, opt, 8, tag), "tiny-mixtral-aux " + tag, tol);
  }
}

// Dense and sparse layers mixed (Qwen2-MoE's decoder_sparse_step 2: layers 0
// and 2 dense, 1 and 3 sparse, each kind its own layer body; the
// load-balancing loss over the sparse layers' routers): every axis and
// schedule reproduces the single device (microbatches of 2 sequences on every
// rank, as the reference's: the load-balancing loss is the microbatch's).
TEST(Parallel, TinyQwen2MoeDenseAndSparseLayers) {
  const std::string path = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-qwen2-moe-mixed.json";
  const Tolerance tol = test::goldenTolerance("adamw");
  Trained ref = test::trainPlan(path, test::goldenOptions("adamw"), 2, "mixed-ref");
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  struct Case {
    const char *tag;
    std::function<void(TrainingPipelineOptions &)> set;
    int64_t microBatch = 2;
  };
  const Case cases[] = {
      {"dp2-ep2-zero1", [](TrainingPipelineOptions &o) { o.mesh.dp = 2, o.mesh.ep = 2, o.zero = 1; }},
      {"tp2-sp", [](TrainingPipelineOptions &o) { o.mesh.tp = 2, o.sequenceParallel = true; }},
      {"cp2-ring", [](TrainingPipelineOptions &o) { o.mesh.cp = 2, o.cpImpl = "ring"; }},
      {"pp2-interleaved",
       [](TrainingPipelineOptions &o) { o.mesh.pp = 2, o.pipelineSchedule = "interleaved", o.virtualStages = 2; }},
      {"pp2-zb-h1", [](TrainingPipelineOptions &o) { o.mesh.pp = 2, o.pipelineSchedule = "zb-h1"; }},
      {"recompute-full", [](TrainingPipelineOptions &o) { o.recompute = "full"; }},
  };
  for (const Case &c : cases) {
    TrainingPipelineOptions opt = test::goldenOptions("adamw");
    c.set(opt);
    expectSame(ref, test::trainPlan(path, opt, c.microBatch, std::string("mixed-") + c.tag),
               std::string("tiny-qwen2-moe-mixed ") + c.tag, tol);
  }
}

// The strategy variant of docs/writing-a-sharding-pass.md
// (llcdist-tp-replicate-embeddings) is held to the same golden rule.
TEST(Parallel, ReplicatedEmbeddingsStrategy) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"}) {
    Trained ref = train(model, 1, 1, 8, "sgd");
    for (auto [dp, tp] : {std::pair<int64_t, int64_t>{1, 2}, {2, 4}})
      expectSame(ref, train(model, dp, tp, 8 / dp, "sgd", /*replicateEmbeddings=*/true),
                 std::string(model) + " replicated embeddings dp=" + std::to_string(dp) +
                     " tp=" + std::to_string(tp),
                 Tolerance{});
  }
}
