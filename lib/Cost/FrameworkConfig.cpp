//===- FrameworkConfig.cpp - a configuration in Megatron's and DeepSpeed's words -===//
//
// The table of FrameworkConfig.h. Megatron-LM's flags are those of
// megatron/training/arguments.py; DeepSpeed's fields those of its JSON config
// (docs: deepspeed.ai/docs/config-json, "tensor_parallel" is AutoTP's).
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/FrameworkConfig.h"
#include "llcdist/Cost/Planner.h"

#include <algorithm>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

void flag(FrameworkArgs &a, const std::string &name, const std::string &value = "") {
  a.megatron.push_back(value.empty() ? name : name + " " + value);
}

void renderMoe(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  const ModelConfig &m = w.model;
  // Megatron-Core's MoE layer, dropless unless the workload has a capacity factor (then each expert's
  // capacity and the position drop policy: the later assignments in token order go, as llc-dist's), with transformers'
  // load-balancing loss where the config turns it on (output_router_logits); the experts split over ep ranks of the
  // data-parallel group (Megatron's expert parallelism, drawn from dp as llc-dist's).
  const MoeConfig &e = *m.moe;
  flag(a, "--num-experts", num(e.experts));
  flag(a, "--moe-router-topk", num(e.topK));
  flag(a, "--moe-ffn-hidden-size", num(e.intermediate));
  if (!e.denseLayers.empty()) { // Qwen2-MoE's dense layers: 1 a mixture of experts, 0 a dense MLP (--ffn-hidden-size)
    std::string freq = "[";
    for (int64_t i = 0; i < m.layers; ++i)
      freq += std::string(i ? "," : "") + (m.sparseLayer(i) ? "1" : "0");
    flag(a, "--moe-layer-freq", "'" + freq + "]'"); // quoted: a shell would glob [...]
  }
  if (e.sharedIntermediate) {
    flag(a, "--moe-shared-expert-intermediate-size", num(e.sharedIntermediate));
    a.megatronNotes.push_back("the shared expert scaled by sigmoid(shared_expert_gate(x)) (Qwen2-MoE): Megatron-"
                              "Core's shared-expert gate (set in the model spec, no command-line flag)");
  }
  // Softmax over every expert then top-k, weights not renormalized (Qwen2-MoE's norm_topk_prob false);
  // Megatron's default (top-k logits, then their softmax) is Mixtral's renormalized top-k.
  if (!e.normalizeTopK)
    flag(a, "--moe-router-pre-softmax");
  if (e.auxLossCoef > 0) {
    flag(a, "--moe-router-load-balancing-type", "aux_loss");
    std::ostringstream coef;
    coef << e.auxLossCoef; // the shortest form: 0.02
    flag(a, "--moe-aux-loss-coeff", coef.str());
    a.megatronNotes.push_back("the load-balancing loss: transformers' (and llc-dist's) sums every layer's "
                              "router statistics over the batch before the product; Megatron-Core's aux_loss "
                              "is per layer and microbatch, averaged over the layers");
  } else {
    flag(a, "--moe-router-load-balancing-type", "none");
    flag(a, "--moe-aux-loss-coeff", "0");
  }
  if (w.moeCapacityFactor > 0) {
    std::ostringstream factor;
    factor << w.moeCapacityFactor;
    flag(a, "--moe-expert-capacity-factor", factor.str());
    flag(a, "--moe-token-drop-policy", "position");
    a.deepspeedNotes.push_back("capacity factor " + factor.str() +
                               ": DeepSpeed's is the model's (deepspeed.moe.layer.MoE(..., capacity_factor=" +
                               factor.str() + ", drop_tokens=True)), no config field");
  }
  flag(a, "--moe-grouped-gemm");
  flag(a, "--moe-token-dispatcher-type", "alltoall");
  flag(a, "--expert-model-parallel-size", num(c.ep));
  if (c.ep > 1)
    a.deepspeedNotes.push_back("ep " + num(c.ep) +
                               ": DeepSpeed's expert parallelism is the model's "
                               "(deepspeed.moe.layer.MoE(..., ep_size=" +
                               num(c.ep) + ")), no config field");
}

void renderModel(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  const ModelConfig &m = w.model;
  flag(a, "--num-layers", num(m.layers));
  flag(a, "--hidden-size", num(m.hidden));
  flag(a, "--ffn-hidden-size", num(m.intermediate));
  flag(a, "--num-attention-heads", num(m.heads));
  if (m.kvHeads != m.heads) {
    flag(a, "--group-query-attention");
    flag(a, "--num-query-groups", num(m.kvHeads));
  }
  if (m.headDim * m.heads != m.hidden)
    flag(a, "--kv-channels", num(m.headDim));
  flag(a, "--max-position-embeddings", num(m.maxPositions));
  if (m.alibi) { // BLOOM, MPT: no position embedding at all (ALiBi, in the note below)
    flag(a, "--position-embedding-type", "none");
  } else if (!learnedPositions(m.arch)) { // rotary embeddings (Phi's on part of each head)
    flag(a, "--position-embedding-type", "rope");
    std::ostringstream theta;
    theta << m.ropeTheta;
    flag(a, "--rotary-base", theta.str());
    if (m.rotaryDim) {
      std::ostringstream percent;
      percent << double(m.rotaryDim) / double(m.headDim);
      flag(a, "--rotary-percent", percent.str());
    }
    if (m.ropeInterleaved) // GPT-J's rotate_every_two
      flag(a, "--rotary-interleaved");
  }
  if (llamaLayout(m.arch)) {
    if (!layerNorms(m.arch)) // StableLM's LayerNorm is Megatron-LM's default
      flag(a, "--normalization", "RMSNorm");
    if (m.gatedGelu) // Gemma
      a.megatronNotes.push_back("GeGLU (tanh GELU gate): Megatron-LM's --swiglu with the gated activation set to "
                                "gelu in the model spec (no command-line flag)");
    else
      flag(a, "--swiglu");
    if (m.normWeightOffset != 0)
      a.megatronNotes.push_back("RMSNorm scaled by (1 + w): Megatron-LM's --apply-layernorm-1p (zero-centered gamma)");
    if (m.clipQkv > 0) // OLMo-7B-0424
      a.megatronNotes.push_back("q, k and v clamped to [-clip_qkv, clip_qkv] (OLMo's clip_qkv): no Megatron-LM flag");
    if (m.normParams == NormParams::None) // OLMo
      a.megatronNotes.push_back("LayerNorms without weight or bias (OLMo's): no Megatron-LM flag (its LayerNorm "
                                "always has both; a model spec with a non-parametric norm)");
    if (!m.outputBias && !m.mlpBias)
      flag(a, "--disable-bias-linear");
    if (m.qkvBias && !m.outputBias) // Qwen2: Megatron-LM's separate switch for q, k, v
      flag(a, "--add-qkv-bias");
    if (m.ropeScaling)
      a.megatronNotes.push_back("rope_scaling (llama3): Megatron-LM's --use-rope-scaling");
  } else {
    // GPT-2's, Phi's and StarCoder2's MLP: the tanh GELU (Megatron-LM's
    // default is the exact one, GPT-NeoX's); LayerNorm is its default
    // normalization.
    if (m.mlpActivation == MlpActivation::GeluTanh)
      flag(a, "--openai-gelu");
    else if (m.mlpActivation == MlpActivation::Relu) // OPT
      a.megatronNotes.push_back("ReLU in the MLP (OPT's): no Megatron-LM flag (Megatron-Core's activation_func in the "
                                "model spec; --squared-relu is another function)");
    if (m.arch == Arch::GptNeoX && !m.outputBias) // attention_bias off, the MLP's biases on
      a.megatronNotes.push_back("no biases on query_key_value and dense (attention_bias false) but on the MLP: no "
                                "Megatron-LM flag (--disable-bias-linear drops both)");
    else if (!m.outputBias && m.mlpBias) // GPT-J
      a.megatronNotes.push_back("no biases on q, k, v and out_proj but on the MLP (GPT-J's): no Megatron-LM flag "
                                "(--disable-bias-linear drops both)");
    if (!m.outputBias && !m.mlpBias) // StarCoder2 without use_bias
      flag(a, "--disable-bias-linear");
    if (!m.qkvBias && m.outputBias && !groupedQkv(m.arch)) // GPT-Neo
      a.megatronNotes.push_back("no biases on q, k and v but on out_proj and the MLP (GPT-Neo's): no Megatron-LM flag "
                                "(--disable-bias-linear drops all of them)");
  }
  if (m.qkvBlocks) // CodeGen
    a.megatronNotes.push_back("q, v and k from one GEMM in " + num(m.qkvBlocks) +
                              " blocks of [q | v | k] (CodeGen's qkv_proj): Megatron-LM's fused QKV is grouped per "
                              "head; convert by permuting the rows");
  if (m.scaleEmbeddings) // Gemma, BioGPT
    a.megatronNotes.push_back("token embeddings multiplied by sqrt(hidden_size) (Gemma's, BioGPT's): no Megatron-LM "
                              "flag (a model spec's embedding)");
  if (m.positionOffset) // OPT, BioGPT
    a.megatronNotes.push_back("position p read from row p + " + num(m.positionOffset) + " of a table of " +
                              num(m.maxPositions + m.positionOffset) +
                              " rows (OPT's and BioGPT's learned positions): Megatron-LM's table starts at row 0; "
                              "convert by dropping the first " +
                              num(m.positionOffset) + " rows");
  if (m.slidingWindow > 0 && m.slidingWindow + 1 < w.seqLen) // the band matters at this length
    a.megatronNotes.push_back("sliding_window " + num(m.slidingWindow) + ": Megatron-LM's --window-size " +
                              num(m.slidingWindow) + " 0 (each query sees the " + num(m.slidingWindow) +
                              " tokens before it and itself)");
  if (!m.localLayers.empty() && m.localWindow < w.seqLen) // GPT-Neo
    a.megatronNotes.push_back(
        "local attention (each query sees the last " + num(m.localWindow) + " keys) in " +
        num(int64_t(m.localLayers.size())) + " of " + num(m.layers) +
        " layers (GPT-Neo's attention_types): Megatron-LM's --window-size " + num(m.localWindow - 1) +
        " 0 in those layers; which layers keep full attention has no flag that matches GPT-Neo's pattern");
  if (m.unscaledAttention) // GPT-Neo
    a.megatronNotes.push_back("attention scores not divided by sqrt(head_dim) (GPT-Neo's): no Megatron-LM flag "
                              "(Megatron-Core's softmax_scale in the model spec)");
  if (m.alibi && m.embeddingNorm) // BLOOM: trained with Megatron-DeepSpeed, whose flag Megatron-LM dropped
    a.megatronNotes.push_back("ALiBi instead of position embeddings, and a LayerNorm on the embeddings (BLOOM's): no "
                              "Megatron-LM flag (Megatron-DeepSpeed's --position-embedding-type alibi and "
                              "--embed-layernorm)");
  else if (m.alibi) // MPT
    a.megatronNotes.push_back("ALiBi instead of position embeddings (MPT's): no Megatron-LM flag (Megatron-DeepSpeed's "
                              "--position-embedding-type alibi)");
  if (m.normParams == NormParams::WeightOnly) // MPT, Cohere
    a.megatronNotes.push_back("LayerNorms with a weight and no bias (MPT's, Cohere's): no Megatron-LM flag (its "
                              "LayerNorm always has both)");
  if (m.logitScale != 1) { // Cohere
    std::ostringstream scale;
    scale << m.logitScale;
    a.megatronNotes.push_back("logits multiplied by logit_scale " + scale.str() + " (Cohere's): no Megatron-LM flag");
  }
  if (phiLayer(m.arch))
    a.megatronNotes.push_back("attention and MLP in parallel on one LayerNorm (x + attn(ln x) + mlp(ln x)): no "
                              "Megatron-LM flag; the LM head's bias: none either");
  if (m.parallelResidual && m.parallelNorms)
    a.megatronNotes.push_back("attention and MLP in parallel, each on its own LayerNorm (use_parallel_residual: x + "
                              "attn(ln1 x) + mlp(ln2 x)): no Megatron-LM flag (GPT-NeoX's own fork calls it "
                              "gpt_j_residual; Falcon's new_decoder_architecture)");
  else if (m.parallelResidual)
    a.megatronNotes.push_back("attention and MLP in parallel on one LayerNorm (use_parallel_residual: x + attn(ln x) + "
                              "mlp(ln x)): no Megatron-LM flag");
  if (m.moe)
    renderMoe(w, c, a);
  if (!m.tieEmbeddings)
    flag(a, "--untie-embeddings-and-output-weights");
  // The compiler's default vocabulary padding (Megatron-LM's own default).
  flag(a, "--make-vocab-size-divisible-by", "128");
}

void renderSeqLen(const Workload &w, const ParallelConfig &, FrameworkArgs &a) {
  flag(a, "--seq-length", num(w.seqLen));
}

void renderDp(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  // Neither framework takes dp: it is the world size over tp × pp (× cp).
  std::string launch =
      "launch on " + num(c.gpus()) + " GPUs: dp = world / (tp x pp" + (c.cp > 1 ? " x cp" : "") + ") = " + num(c.dp);
  a.megatronNotes.push_back(launch);
  a.deepspeedNotes.push_back(launch);
}

void renderTp(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  flag(a, "--tensor-model-parallel-size", num(c.tp));
  if (c.tp > 1) {
    a.deepspeed["tensor_parallel"] = {{"autotp_size", c.tp}};
    if (c.zero == 3)
      a.deepspeedNotes.push_back("DeepSpeed's AutoTP does not combine with ZeRO-3");
  }
}

void renderPp(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  flag(a, "--pipeline-model-parallel-size", num(c.pp));
  if (c.pp > 1)
    a.deepspeed["pipeline"]["stages"] = c.pp; // PipelineModule(num_stages=...)
}

void renderCp(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  if (c.cp == 1)
    return;
  flag(a, "--context-parallel-size", num(c.cp));
  // Megatron-Core's names: p2p is the ring (load-balanced causal chunks,
  // as llc-dist's), a2a Ulysses.
  flag(a, "--cp-comm-type", c.cpImpl == "ring" ? "p2p" : "a2a");
  a.deepspeed["sequence_parallel_size"] = c.cp;
  if (c.cpImpl == "ring")
    a.deepspeedNotes.push_back("cp ring: DeepSpeed's sequence_parallel_size is Ulysses (all-to-all); it has no "
                               "ring attention");
}

void renderSchedule(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  if (c.pp == 1)
    return;
  if (c.schedule == "interleaved") {
    int64_t chunks = c.pp * c.virtualStages;
    if (w.model.layers % chunks == 0)
      flag(a, "--num-layers-per-virtual-pipeline-stage", num(w.model.layers / chunks));
    else
      flag(a, "--virtual-pipeline-model-parallel-size", num(c.virtualStages));
    a.deepspeedNotes.push_back("DeepSpeed's pipeline engine runs 1F1B only: no interleaved "
                               "schedule (virtual stages " + num(c.virtualStages) + ")");
  } else if (c.schedule == "gpipe") {
    a.megatronNotes.push_back("schedule gpipe: Megatron-LM has no GPipe schedule (it runs 1F1B, "
                              "which holds fewer microbatches' activations)");
    a.deepspeedNotes.push_back("schedule gpipe: DeepSpeed's pipeline engine runs 1F1B only");
  } else if (c.schedule == "zb-h1") {
    a.megatronNotes.push_back("schedule zb-h1: not in Megatron-LM; the zero-bubble fork "
                              "(sail-sg/zero-bubble-pipeline-parallelism) runs it with "
                              "--enable-zero-bubble");
    a.deepspeedNotes.push_back("schedule zb-h1: DeepSpeed's pipeline engine runs 1F1B only");
  }
}

void renderMicroBatch(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  flag(a, "--micro-batch-size", num(c.microBatch));
  a.deepspeed["train_micro_batch_size_per_gpu"] = c.microBatch;
}

void renderGlobalBatch(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  flag(a, "--global-batch-size", num(w.globalBatch));
  a.deepspeed["train_batch_size"] = w.globalBatch;
  a.deepspeed["gradient_accumulation_steps"] = c.microbatches(w.globalBatch);
}

void renderSequenceParallel(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  if (!c.sequenceParallel)
    return;
  flag(a, "--sequence-parallel");
  a.deepspeedNotes.push_back("sequence parallelism: DeepSpeed's sequence_parallel_size is "
                             "Ulysses (all-to-all over heads), not Megatron's; use "
                             "Megatron-DeepSpeed's --sequence-parallel");
}

void renderRecompute(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  if (c.recompute == "selective") {
    flag(a, "--recompute-granularity", "selective");
    a.deepspeedNotes.push_back("recompute selective: DeepSpeed's activation checkpointing is "
                               "whole layers (the model calls deepspeed.checkpointing."
                               "checkpoint); Megatron-DeepSpeed's --recompute-granularity "
                               "selective");
  } else if (c.recompute == "full") {
    flag(a, "--recompute-granularity", "full");
    flag(a, "--recompute-method", "uniform");
    flag(a, "--recompute-num-layers", "1");
    a.deepspeed["activation_checkpointing"] = {{"partition_activations", false},
                                               {"contiguous_memory_optimization", false},
                                               {"cpu_checkpointing", false},
                                               {"number_checkpoints", w.model.layers / c.pp}};
    if (c.pp > 1)
      a.deepspeed["pipeline"]["activation_checkpoint_interval"] = 1;
  }
}

void renderZero(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  a.deepspeed["zero_optimization"]["stage"] = c.zero;
  if (c.zero == 1 || c.zero == 2)
    flag(a, "--use-distributed-optimizer");
  if (c.zero == 2)
    a.megatronNotes.push_back("zero 2: Megatron-LM's distributed optimizer shards the optimizer "
                              "state and reduce-scatters the gradients, but keeps the whole "
                              "gradient buffer (ZeRO-1's memory)");
  if (c.zero == 3) {
    flag(a, "--use-torch-fsdp2");
    if (c.pp > 1)
      a.megatronNotes.push_back("zero 3: Megatron-LM's --use-torch-fsdp2 does not work with "
                                "pipeline parallelism");
  }
}

void renderGradBucket(const Workload &, const ParallelConfig &c, FrameworkArgs &a) {
  bool on = c.gradBucket > 0;
  if (on) {
    flag(a, "--overlap-grad-reduce");
    if (c.gradBucket != autoGradBucket(c.dataParallelGroup())) // Megatron-LM's default is the auto size
      flag(a, "--ddp-bucket-size", num(c.gradBucket));
  }
  a.deepspeed["zero_optimization"]["overlap_comm"] = on;
  if (on)
    a.deepspeed["zero_optimization"]["reduce_bucket_size"] = c.gradBucket;
}

void renderFsdpPrefetch(const Workload &w, const ParallelConfig &c, FrameworkArgs &a) {
  if (c.zero != 3)
    return;
  // Prefetch N layers: N layers' parameters (elements, as DeepSpeed counts).
  a.deepspeed["zero_optimization"]["stage3_prefetch_bucket_size"] = c.fsdpPrefetch * w.model.layerParameters() / c.tp;
  if (c.fsdpPrefetch == 0)
    a.megatronNotes.push_back("fsdp prefetch 0: FSDP2 prefetches the next layer by default; "
                              "Megatron-LM has no flag to turn it off");
  else if (c.fsdpPrefetch > 1)
    a.megatronNotes.push_back("fsdp prefetch " + num(c.fsdpPrefetch) +
                              ": FSDP2 prefetches one layer by default; Megatron-LM has no flag "
                              "for more");
}

void renderDtype(const Workload &w, const ParallelConfig &, FrameworkArgs &a) {
  bool bf16 = w.precision == Precision::BF16;
  if (bf16)
    flag(a, "--bf16");
  a.deepspeed["bf16"] = {{"enabled", bf16}};
}

} // namespace

const std::vector<KnobMapping> &cost::knobMappings() {
  static const std::vector<KnobMapping> table = {
      {"model", "MODEL (config.json)",
       "--num-layers --hidden-size --ffn-hidden-size --num-attention-heads "
       "[--group-query-attention --num-query-groups] --max-position-embeddings [llama: "
       "--position-embedding-type rope --rotary-base --normalization RMSNorm --swiglu "
       "--disable-bias-linear] [GPT-2, Phi, StarCoder2: --openai-gelu] [mixture of experts: --num-experts "
       "--moe-router-topk --moe-ffn-hidden-size "
       "[--moe-shared-expert-intermediate-size] [--moe-router-pre-softmax] --moe-grouped-gemm ... "
       "--expert-model-parallel-size EP] "
       "[--untie-embeddings-and-output-weights] --make-vocab-size-divisible-by 128",
       "(the model is code)", renderModel},
      {"seq-len", "--seq-len", "--seq-length", "(the data loader's)", renderSeqLen},
      {"dp", "--mesh dp=N", "(world size / (tp x pp x cp))", "(world size / (tp x pp x cp))", renderDp},
      {"tp", "--mesh tp=N", "--tensor-model-parallel-size N", "tensor_parallel.autotp_size", renderTp},
      {"pp", "--mesh pp=N", "--pipeline-model-parallel-size N", "pipeline.stages", renderPp},
      {"cp", "--mesh cp=N --cp-impl ring|all-to-all", "--context-parallel-size N --cp-comm-type p2p|a2a",
       "sequence_parallel_size (Ulysses; a note for the ring)", renderCp},
      {"schedule", "--schedule S --virtual-stages V",
       "interleaved: --num-layers-per-virtual-pipeline-stage L/(pp*V) (or "
       "--virtual-pipeline-model-parallel-size V); 1f1b: default; gpipe, zb-h1: a note",
       "1f1b only (a note otherwise)", renderSchedule},
      {"micro-batch", "--micro-batch", "--micro-batch-size", "train_micro_batch_size_per_gpu", renderMicroBatch},
      {"global-batch", "--global-batch", "--global-batch-size", "train_batch_size, gradient_accumulation_steps",
       renderGlobalBatch},
      {"sequence-parallel", "--sequence-parallel", "--sequence-parallel", "(a note)", renderSequenceParallel},
      {"recompute", "--recompute",
       "--recompute-granularity selective|full (full: "
       "--recompute-method uniform --recompute-num-layers 1)",
       "full: activation_checkpointing, pipeline.activation_checkpoint_interval 1", renderRecompute},
      {"zero", "--zero", "1, 2: --use-distributed-optimizer; 3: --use-torch-fsdp2", "zero_optimization.stage",
       renderZero},
      {"grad-bucket", "--grad-bucket-size", "--overlap-grad-reduce [--ddp-bucket-size N]",
       "zero_optimization.overlap_comm, reduce_bucket_size", renderGradBucket},
      {"fsdp-prefetch", "--fsdp-prefetch", "(FSDP2's default: one layer; a note otherwise)",
       "zero_optimization.stage3_prefetch_bucket_size", renderFsdpPrefetch},
      {"dtype", "--dtype bf16", "--bf16", "bf16.enabled", renderDtype},
  };
  return table;
}

FrameworkArgs cost::frameworkArgs(const Workload &w, const ParallelConfig &c) {
  FrameworkArgs a;
  for (const KnobMapping &k : knobMappings())
    k.render(w, c, a);
  return a;
}

std::string cost::megatronCommand(const FrameworkArgs &a) {
  std::string s;
  for (const std::string &n : a.megatronNotes)
    s += "# " + n + "\n";
  s += "pretrain_gpt.py";
  for (const std::string &f : a.megatron)
    s += " \\\n    " + f;
  s += "\n";
  return s;
}

std::string cost::deepspeedText(const FrameworkArgs &a) { return a.deepspeed.dump(2) + "\n"; }

bool cost::hasFlag(const std::vector<std::string> &args, const std::string &flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}
