#!/usr/bin/env python3
"""Independent reference: re-run a compiled plan's training in PyTorch.

With --transformers the forward pass is Hugging Face transformers' own model
(AutoModelForCausalLM.from_config, eager attention, float32, run on the
parameters through functional_call), so a family is checked
against the library itself (Qwen2ForCausalLM); otherwise it is the
re-implementation below.

The models below are written from Hugging Face transformers' modeling_gpt2.py
and modeling_llama.py (GPT-2: pre-LN blocks, Conv1D [in, out] weights, fused
c_attn, gelu_new, learned positions, tied head; Llama: RMSNorm in f32,
rotate-half RoPE with rope_theta, repeat_kv for GQA, SwiGLU, untied head),
with torch autograd and torch.optim doing the backward pass and the update.
The script reads the plan's manifest (batch, optimizer, schedule, clipping),
the llm.c token file in design.md's sample order, the parameters llc-dist
started from, and compares per-step losses and the final parameters llc-dist
wrote. Exit 0 on agreement, 1 with a report otherwise.

usage: hf_parity.py CONFIG.json PLAN_DIR DATA.bin INIT.safetensors \
                    FINAL.safetensors LOG.jsonl [--loss-rtol R] [--param-atol A]
                    [--transformers]
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).copy())
    return out


def read_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        assert header[0] == 20240520 and header[1] == 1
        return np.frombuffer(f.read(), dtype="<u2")[: header[2]].astype(np.int64)


# --- GPT-2, after transformers/models/gpt2/modeling_gpt2.py ---------------------
def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_attention(q, k, v):
    # q [B, nh, S, hd], k/v [B, nh, S, hd] (kv already repeated)
    S, hd = q.shape[-2], q.shape[-1]
    w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], hd ** 0.5)
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
    w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min))
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, v)


def gpt2_loss(P, cfg, ids, targets):
    B, S = ids.shape
    H, nh = cfg["n_embd"], cfg["n_head"]
    hd = H // nh
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    x = P["transformer.wte.weight"][ids] + P["transformer.wpe.weight"][torch.arange(S)]
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (H,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(H, dim=2)
        heads = lambda t: t.view(B, S, nh, hd).transpose(1, 2)
        a = causal_attention(heads(q), heads(k), heads(v)).transpose(1, 2).reshape(B, S, H)
        x = x + a @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (H,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        h = gelu_new(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (H,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    logits = x @ P["transformer.wte.weight"].t()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# --- Llama, after transformers/models/llama/modeling_llama.py --------------------
def rms_norm(x, w, eps):
    xf = x.to(torch.float32)
    var = xf.pow(2).mean(-1, keepdim=True)
    return w * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_loss(P, cfg, ids, targets):
    B, S = ids.shape
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim", H // nh)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    assert not cfg.get("rope_scaling"), "rope_scaling not covered by this reference"
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.arange(S).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = P["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].t()).view(B, S, nh, hd).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].t()).view(B, S, nkv, hd).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].t()).view(B, S, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=1)  # repeat_kv
        v = v.repeat_interleave(nh // nkv, dim=1)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, S, nh * hd)
        x = x + a @ P[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = F.silu(h @ P[p + "mlp.gate_proj.weight"].t()) * (h @ P[p + "mlp.up_proj.weight"].t())
        x = x + g @ P[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else P["lm_head.weight"]
    logits = x @ head.t()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# --- The state_dict transformers builds from the config ---------------------------
def hf_shapes(cfg):
    """Every tensor of GPT2LMHeadModel / LlamaForCausalLM(config).state_dict()
    that a checkpoint stores (tied weights once, as save_pretrained writes
    them), name -> shape: what `from_pretrained` loads without conversion.
    The vocabulary is the config's: a plan that pads it must strip it."""
    if "GPT2LMHeadModel" in cfg.get("architectures", []):
        H, V, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"]
        inner = cfg.get("n_inner") or 4 * H
        out = {"transformer.wte.weight": [V, H], "transformer.wpe.weight": [cfg["n_positions"], H],
               "transformer.ln_f.weight": [H], "transformer.ln_f.bias": [H]}
        for i in range(L):
            p = f"transformer.h.{i}."
            out.update({p + "ln_1.weight": [H], p + "ln_1.bias": [H], p + "ln_2.weight": [H], p + "ln_2.bias": [H],
                        p + "attn.c_attn.weight": [H, 3 * H], p + "attn.c_attn.bias": [3 * H],
                        p + "attn.c_proj.weight": [H, H], p + "attn.c_proj.bias": [H],
                        p + "mlp.c_fc.weight": [H, inner], p + "mlp.c_fc.bias": [inner],
                        p + "mlp.c_proj.weight": [inner, H], p + "mlp.c_proj.bias": [H]})
        return out
    arch = cfg.get("architectures", [""])[0]
    if arch in ("GemmaForCausalLM", "PhiForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                "Starcoder2ForCausalLM", "StableLmForCausalLM", "OlmoForCausalLM", "GPTNeoXForCausalLM",
                "FalconForCausalLM", "BloomForCausalLM", "GPTBigCodeForCausalLM", "MptForCausalLM",
                "GPTJForCausalLM", "OPTForCausalLM", "CohereForCausalLM", "GPTNeoForCausalLM",
                "BioGptForCausalLM", "CodeGenForCausalLM"):
        return transformers_shapes(cfg)
    H, V, L, I = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim", H // nh)
    # Qwen2: biases on q, k and v only; Llama: attention_bias (q, k, v, o), mlp_bias.
    qwen2 = "Qwen2ForCausalLM" in cfg.get("architectures", [])
    qkv_bias, o_bias = qwen2 or cfg.get("attention_bias"), cfg.get("attention_bias")
    mlp_bias = cfg.get("mlp_bias")
    out = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = [V, H]
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                    p + "self_attn.q_proj.weight": [nh * hd, H], p + "self_attn.k_proj.weight": [nkv * hd, H],
                    p + "self_attn.v_proj.weight": [nkv * hd, H], p + "self_attn.o_proj.weight": [H, nh * hd],
                    p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                    p + "mlp.down_proj.weight": [H, I]})
        if qkv_bias:
            out.update({p + "self_attn.q_proj.bias": [nh * hd], p + "self_attn.k_proj.bias": [nkv * hd],
                        p + "self_attn.v_proj.bias": [nkv * hd]})
        if o_bias:
            out[p + "self_attn.o_proj.bias"] = [H]
        if mlp_bias:
            out.update({p + "mlp.gate_proj.bias": [I], p + "mlp.up_proj.bias": [I], p + "mlp.down_proj.bias": [H]})
    return out


def with_mlp_only_layers(model, config):
    """Qwen2-MoE's mlp_only_layers (a dense MLP of intermediate_size in those
    layers' place) as later transformers releases build it; 4.40.2's
    Qwen2MoeDecoderLayer reads only decoder_sparse_step."""
    only = getattr(config, "mlp_only_layers", None) or []
    if type(model).__name__ != "Qwen2MoeForCausalLM" or not only:
        return model
    from transformers.models.qwen2_moe import modeling_qwen2_moe as q
    for i in only:
        if isinstance(model.model.layers[i].mlp, q.Qwen2MoeSparseMoeBlock):
            model.model.layers[i].mlp = q.Qwen2MoeMLP(config, intermediate_size=config.intermediate_size)
    return model


def transformers_shapes(cfg):
    """The state_dict of transformers' own model for the config (the
    families this file does not re-implement), a tied head once."""
    import transformers
    config = transformers.AutoConfig.for_model(**cfg)
    model = with_mlp_only_layers(transformers.AutoModelForCausalLM.from_config(config), config)
    out = {n: list(t.shape) for n, t in model.state_dict().items()}
    if config.tie_word_embeddings:
        out.pop(embedding_names(model)[1], None)
    return out


def embedding_names(model):
    """The input embedding's and the head's weight names (Llama's
    model.embed_tokens / lm_head, GPT-NeoX's gpt_neox.embed_in / embed_out)."""
    names = {m: n for n, m in model.named_modules()}
    return (names[model.get_input_embeddings()] + ".weight", names[model.get_output_embeddings()] + ".weight")


def transformers_loss(config_path):
    """The loss of transformers' own model for the config's architecture,
    evaluated on the parameter dict P (tied weights given once, as saved)."""
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(config_path)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                          torch_dtype=torch.float32)
    model = with_mlp_only_layers(model, cfg).eval()
    print(f"transformers {transformers.__version__}: {type(model).__name__}")

    tied = cfg.tie_word_embeddings
    embed_name, head_name = embedding_names(model)
    try:
        from torch.func import functional_call
    except ImportError:  # torch < 2.0
        from torch.nn.utils.stateless import functional_call

    def loss(P, _cfg, ids, targets):
        # A tied head is the embedding's tensor itself (one leaf, one gradient).
        params = dict(P)
        if tied and head_name not in params:
            params[head_name] = params[embed_name]
        out = functional_call(model, params, (ids,), {"use_cache": False})
        logits = out.logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        # A mixture of experts with output_router_logits: transformers adds
        # router_aux_loss_coef × its load-balancing loss (over this batch).
        if getattr(cfg, "output_router_logits", False):
            loss = loss + cfg.router_aux_loss_coef * out.aux_loss
        return loss

    return loss


def drop_past_capacity(factor, dropped):
    """Replaces transformers' sparse MoE forward (Mixtral's, Qwen2-MoE's)
    with the same computation under a capacity, the policy llc-dist states
    (docs/memory.md, --moe-capacity-factor): of the T tokens of one forward
    (one rank's microbatch), each expert keeps at most
    C = min(T, ceil(factor · T · k / E)) assignments, the first in token
    order (token t, then its j-th choice); the others are dropped (no
    contribution to the token's output). `dropped` collects the count of each
    forward. An independent re-implementation: it shares no code with
    llc-dist's kernels."""
    import math
    from transformers.models.mixtral import modeling_mixtral
    from transformers.models.qwen2_moe import modeling_qwen2_moe

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.view(-1, hidden)
        router_logits = self.gate(x)
        probs = F.softmax(router_logits, dim=1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if getattr(self, "norm_topk_prob", True):  # Mixtral always renormalizes
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        T, E, k = x.shape[0], self.num_experts, self.top_k
        cap = max(1, min(T, math.ceil(factor * T * k / E)))
        out = torch.zeros_like(x)
        lost = 0
        for e in range(E):
            tokens, picks = torch.where(chosen == e)  # row-major: token order, then choice
            lost += max(0, len(tokens) - cap)
            tokens, picks = tokens[:cap], picks[:cap]
            if len(tokens):
                out.index_add_(0, tokens, self.experts[e](x[tokens]) * weights[tokens, picks, None])
        dropped.append(lost)
        if getattr(self, "shared_expert", None) is not None:
            out = out + F.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(batch, seq, hidden), router_logits

    modeling_mixtral.MixtralSparseMoeBlock.forward = forward
    modeling_qwen2_moe.Qwen2MoeSparseMoeBlock.forward = forward


def check_hf_layout(cfg, tensors, path):
    want = hf_shapes(cfg)
    got = {n: list(t.shape) for n, t in tensors.items()}
    bad = sorted(set(want) ^ set(got)) + sorted(n for n in want if n in got and want[n] != got[n])
    for n in bad:
        print(f"{path}: {n}: transformers expects {want.get(n)}, the file has {got.get(n)}")
    return not bad


def lr_at(s, step):
    warm, mx = s["warmup_steps"], s["max_lr"]
    if step < warm:
        return mx * (step + 1) / warm
    if s["kind"] == "constant":
        return mx
    total = s["total_steps"]
    r = min(max((step - warm) / max(total - warm, 1), 0.0), 1.0)
    return s["min_lr"] + 0.5 * (1 + math.cos(math.pi * r)) * (mx - s["min_lr"])


def main():
    ap = argparse.ArgumentParser()
    for a in ["config", "plan", "data", "init", "final", "log"]:
        ap.add_argument(a)
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--param-atol", type=float, default=1e-5)
    ap.add_argument("--transformers", action="store_true",
                    help="the forward pass of transformers' own model, not the re-implementation")
    ap.add_argument("--capacity-factor", type=float, default=0.0,
                    help="a mixture of experts under llc-dist's --moe-capacity-factor drop policy")
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    dropped = []
    if args.capacity_factor > 0:
        drop_past_capacity(args.capacity_factor, dropped)
    man = json.load(open(args.plan + "/manifest.json"))
    log = [json.loads(line) for line in open(args.log)]
    if args.transformers:
        loss_fn = transformers_loss(args.config)
    elif "GPT2LMHeadModel" in cfg.get("architectures", []):
        loss_fn = gpt2_loss
    elif "LlamaForCausalLM" in cfg.get("architectures", []):
        loss_fn = llama_loss
    else:
        sys.exit(f"{args.config}: no re-implementation of {cfg.get('architectures')}; use --transformers")

    init = read_safetensors(args.init)
    ok = check_hf_layout(cfg, init, args.init)
    pad = man["model"].get("padded_vocab_size")
    if pad:
        print(f"vocabulary {man['model']['vocab_size']} padded to {pad} in the plan; "
              f"the files hold {cfg['vocab_size']} rows")
    P = {k: v.requires_grad_(True) for k, v in init.items()}
    # A mixture of experts' stacked weight ("experts.{e}.w1.weight", [E, ...])
    # is one Hugging Face tensor per expert in the files.
    decay = {}
    for p in man["params"]:
        names = [p["name"].replace("{e}", str(e)) for e in range(p["shape"][0])] if "{e}" in p["name"] else [p["name"]]
        decay.update({n: p["weight_decay"] for n in names})
    groups = [{"params": [P[n] for n in P if decay[n]], "weight_decay": man["optimizer"]["weight_decay"]},
              {"params": [P[n] for n in P if not decay[n]], "weight_decay": 0.0}]
    o, sched = man["optimizer"], dict(man["lr_schedule"])
    if sched["total_steps"] == 0:
        sched["total_steps"] = len(log)
    if o["kind"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=sched["max_lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=sched["max_lr"], momentum=o["momentum"])

    tokens = torch.from_numpy(read_tokens(args.data))
    b = man["batch"]
    T, Bm, M = b["seq_len"], b["micro_batch"], b["microbatches"]
    G = Bm * M * b["dp"]
    samples = (len(tokens) - 1) // T
    for step, rec in enumerate(log):
        for g in opt.param_groups:
            g["lr"] = lr_at(sched, step)
        opt.zero_grad()
        total = 0.0
        # The global batch's G samples (every dp rank's microbatches: sample
        # g = (j·dp + r)·Bm + i is read by dp rank r), Bm at a time: the
        # step's loss is their mean however the ranks split them.
        chunks = G // Bm
        for j in range(chunks):
            rows = []
            for i in range(Bm):
                s = (step * G + j * Bm + i) % samples
                rows.append(tokens[s * T: s * T + T + 1])
            batch = torch.stack(rows)
            loss = loss_fn(P, cfg, batch[:, :-1], batch[:, 1:])
            (loss / chunks).backward()
            total += loss.item() / chunks
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), man["grad_clip"] or float("inf"))
        if args.capacity_factor > 0:
            print(f"step {step}: {sum(dropped)} expert assignments dropped past capacity "
                  f"(factor {args.capacity_factor:g})")
            dropped.clear()
        rel = abs(total - rec["loss"]) / abs(total)
        print(f"step {step}: torch loss {total:.7f} llc-dist {rec['loss']:.7f} rel {rel:.2e} "
              f"| grad norm torch {float(norm):.6f} llc-dist {rec['grad_norm']:.6f}")
        if rel > args.loss_rtol:
            ok = False
        if abs(float(norm) - rec["grad_norm"]) > 1e-4 * max(1.0, float(norm)):
            print(f"  grad norm differs"); ok = False
        opt.step()

    final = read_safetensors(args.final)
    ok = check_hf_layout(cfg, final, args.final) and ok
    diffs = {n: (P[n].detach() - final[n]).abs().max().item() for n in P}
    worst_name = max(diffs, key=diffs.get)
    worst = diffs[worst_name]
    print(f"final parameters: max |torch - llc-dist| = {worst:.3e} in {worst_name} (atol {args.param_atol:g})")
    if worst > args.param_atol or set(final) != set(P):
        ok = False
    print("PARITY OK" if ok else "PARITY FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
