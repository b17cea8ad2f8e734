"""GPT-2 and Llama in plain PyTorch, for the GPU check (bench/gpu/torch_parity.py, bench/gpu_step.py).

Self-contained: torch and the standard library only (the GPU machine has no transformers and no
safetensors package is guaranteed; torch >= 1.12, so the CPU machines' Debian torch runs it too).
The models follow Hugging Face transformers' modeling_gpt2.py and modeling_llama.py, as
test/reference/hf_parity.py does, with the same parameter names and layouts (a state_dict loads
a file `llc-dist run --save-params` wrote, and the reverse):

  GPT-2: pre-LN, learned positions, fused c_attn, Conv1D weights [in, out], GELU tanh
         (gelu_new == F.gelu(approximate="tanh")), tied LM head;
  Llama: RMSNorm computed in f32 (LlamaRMSNorm), rotate-half RoPE with rope_theta and the "llama3"
         rope_scaling, GQA, SwiGLU, tie_word_embeddings from the config.

Attention is F.scaled_dot_product_attention (causal) where torch has it (>= 2.0; GQA through
enable_gqa where supported, else repeat_kv), else the eager softmax(QK^T/sqrt(d))V. Under
torch.autocast(bfloat16) these are the ops Hugging Face's sdpa models run.

Also here: safetensors read/write, llm.c token files, design.md §4's sample order, the plan's
learning-rate schedule and an AdamW / SGD set up from a plan's manifest.json, and one training
step with gradient accumulation and global-norm clipping (torch.optim semantics, as llc-dist's).
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def attention(q, k, v):
    """Causal attention; q [B, nh, S, hd], k / v [B, nkv, S, hd]."""
    nh, nkv = q.shape[1], k.shape[1]
    if _HAS_SDPA:
        if nkv != nh:
            try:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except (TypeError, RuntimeError):
                pass
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if nkv != nh:
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
    S, hd = q.shape[-2], q.shape[-1]
    w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    w = w.masked_fill(~mask, torch.finfo(w.dtype).min)
    w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


# --- GPT-2 --------------------------------------------------------------------------------------
class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: y = x @ W + b, W [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, H, nh):
        super().__init__()
        self.nh = nh
        self.c_attn = Conv1D(H, 3 * H)
        self.c_proj = Conv1D(H, H)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.c_attn(x).split(H, dim=2)
        heads = lambda t: t.view(B, S, self.nh, H // self.nh).transpose(1, 2)
        a = attention(heads(q), heads(k), heads(v))
        return self.c_proj(a.transpose(1, 2).reshape(B, S, H))


class GPT2MLP(nn.Module):
    def __init__(self, H, inner):
        super().__init__()
        self.c_fc = Conv1D(H, inner)
        self.c_proj = Conv1D(inner, H)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, H, nh, inner, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(H, eps=eps)
        self.attn = GPT2Attention(H, nh)
        self.ln_2 = nn.LayerNorm(H, eps=eps)
        self.mlp = GPT2MLP(H, inner)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, L = cfg["n_embd"], cfg["n_layer"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.wte = nn.Embedding(cfg["vocab_size"], H)
        self.wpe = nn.Embedding(cfg["n_positions"], H)
        self.h = nn.ModuleList(GPT2Block(H, cfg["n_head"], cfg.get("n_inner") or 4 * H, eps) for _ in range(L))
        self.ln_f = nn.LayerNorm(H, eps=eps)


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Body(cfg)

    def forward(self, ids, targets):
        t = self.transformer
        x = t.wte(ids) + t.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in t.h:
            x = block(x)
        logits = F.linear(t.ln_f(x), t.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


# --- Llama --------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """LlamaRMSNorm: normalized in f32, cast back to the input dtype, then scaled."""

    def __init__(self, H, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rope_inv_freq(cfg, hd):
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling {kind!r} is not implemented here (llama3 only, as llc-dist)")
    # transformers' _compute_llama3_parameters
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, out)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, H, nh, nkv, hd):
        super().__init__()
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.q_proj = nn.Linear(H, nh * hd, bias=False)
        self.k_proj = nn.Linear(H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = attention(q, k, v)
        return self.o_proj(a.transpose(1, 2).reshape(B, S, self.nh * self.hd))


class LlamaMLP(nn.Module):
    def __init__(self, H, inner):
        super().__init__()
        self.gate_proj = nn.Linear(H, inner, bias=False)
        self.up_proj = nn.Linear(H, inner, bias=False)
        self.down_proj = nn.Linear(inner, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, cfg, hd):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        nh = cfg["num_attention_heads"]
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = LlamaAttention(H, nh, cfg.get("num_key_value_heads", nh), hd)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = LlamaMLP(H, cfg["intermediate_size"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg, hd):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(LlamaLayer(cfg, hd) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.model = LlamaBody(cfg, self.hd)
        self.tied = bool(cfg.get("tie_word_embeddings"))
        if not self.tied:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(cfg, self.hd), persistent=False)

    def forward(self, ids, targets):
        m = self.model
        x = m.embed_tokens(ids)
        # LlamaRotaryEmbedding: cos / sin in f32 (autocast off), cast to the hidden states' dtype.
        with torch.autocast(device_type=ids.device.type, enabled=False):
            pos = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
            freqs = pos[:, None] * self.inv_freq.float()[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in m.layers:
            x = layer(x, cos, sin)
        head = m.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = F.linear(m.norm(x), head)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def is_gpt2(cfg):
    return "GPT2LMHeadModel" in cfg.get("architectures", []) or cfg.get("model_type") == "gpt2"


def build(cfg):
    """The model of a Hugging Face config.json (dict), parameters uninitialized (init_normal or load)."""
    return GPT2(cfg) if is_gpt2(cfg) else Llama(cfg)


def init_normal(model, std=0.02, seed=0):
    """A random init for the benchmark (weights N(0, std), norms 1, biases 0): the values do not
    change the step time."""
    gens = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                if p.device not in gens:
                    gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)
                p.normal_(0.0, std, generator=gens[p.device])


def load(model, tensors):
    """Loads a {HF name: tensor} dict; every parameter must be in it with its shape, and nothing else."""
    own = dict(model.named_parameters())
    missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    if missing or extra:
        raise ValueError(f"parameter names differ: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        for n, p in own.items():
            if tuple(tensors[n].shape) != tuple(p.shape):
                raise ValueError(f"{n}: file {tuple(tensors[n].shape)}, model {tuple(p.shape)}")
            p.copy_(tensors[n].to(p.dtype))


# --- files ----------------------------------------------------------------------------------------
_ST_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2),
              "F64": (torch.float64, 8)}


def read_safetensors(path):
    """{name: tensor} of a safetensors file (F32 / BF16 / F16 / F64), without the safetensors package."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, size = _ST_DTYPES[info["dtype"]]
        a, b = info["data_offsets"]
        count = (b - a) // size
        t = torch.frombuffer(data, dtype=dtype, count=count, offset=a) if count else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """Writes {name: tensor} as F32 safetensors (metadata {"format": "pt"})."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.float32).contiguous()
        blob = t.numpy().tobytes() if hasattr(t, "numpy") else bytes(t.untyped_storage())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_tokens(path):
    """The tokens of an llm.c token file (256 int32 header: magic 20240520, version 1, count)."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            raise ValueError(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
        raw = bytearray(f.read(2 * header[2]))
    return torch.frombuffer(raw, dtype=torch.int16).to(torch.int64) & 0xFFFF


def microbatch(tokens, batch, step, j, rank=0):
    """Inputs and targets of microbatch j of dp rank `rank` at `step`, shuffle off (design.md §4,
    runtime TokenData.h): sample g = (j·dp + rank)·B + i of step k starts at token
    ((k·G + g) mod Ns)·T, G = B·M·dp, Ns = (count - 1) // T."""
    T, B, M, dp = batch["seq_len"], batch["micro_batch"], batch["microbatches"], batch["dp"]
    G, Ns = B * M * dp, (len(tokens) - 1) // T
    rows = []
    for i in range(B):
        s = ((step * G + (j * dp + rank) * B + i) % Ns) * T
        rows.append(tokens[s: s + T + 1])
    rows = torch.stack(rows)
    return rows[:, :-1], rows[:, 1:]


# --- optimizer and step, from a plan's manifest ----------------------------------------------------
def lr_at(schedule, step, steps):
    """Kernels.h learningRate: linear warmup to max_lr over warmup_steps, then constant or cosine to
    min_lr at total_steps (0: the run's steps)."""
    warm, mx = schedule.get("warmup_steps", 0), schedule["max_lr"]
    if step < warm:
        return mx * (step + 1) / warm
    if schedule["kind"] == "constant":
        return mx
    total = schedule.get("total_steps", 0) or steps
    r = min(max((step - warm) / max(total - warm, 1), 0.0), 1.0)
    return schedule["min_lr"] + 0.5 * (1 + math.cos(math.pi * r)) * (mx - schedule["min_lr"])


def make_optimizer(model, manifest, fused=False):
    """torch.optim.AdamW / SGD with the plan's hyper-parameters; weight decay on the params the
    manifest marks (params[].weight_decay), none on the others."""
    decay = {p["name"]: p["weight_decay"] for p in manifest["params"]}
    named = list(model.named_parameters())
    unknown = [n for n, _ in named if n not in decay]
    if unknown:
        raise ValueError(f"the plan has no parameter {unknown[0]}")
    o = manifest["optimizer"]
    groups = [{"params": [p for n, p in named if decay[n]], "weight_decay": o.get("weight_decay", 0.0)},
              {"params": [p for n, p in named if not decay[n]], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    lr = manifest["lr_schedule"]["max_lr"]
    if o["kind"] == "adamw":
        kw = {"fused": True} if fused else {}
        return torch.optim.AdamW(groups, lr=lr, betas=(o["beta1"], o["beta2"]), eps=o["eps"], **kw)
    if o["kind"] == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=o.get("momentum", 0.0))
    raise ValueError(f"optimizer {o['kind']!r}")


def train_step(model, opt, manifest, tokens_or_batches, step, steps, device, autocast_dtype=None, fwd=None):
    """One training step as llc-dist runs it: the schedule's lr, M microbatches with the loss / M
    accumulated, global-norm clipping (grad_clip 0: the norm is still computed), the update.
    tokens_or_batches: the token tensor (batches from design.md's order) or a callable
    j -> (inputs, targets). Returns (mean loss over the microbatches, grad norm before clipping)."""
    b = manifest["batch"]
    M = b["microbatches"]
    for g in opt.param_groups:
        g["lr"] = lr_at(manifest["lr_schedule"], step, steps)
    opt.zero_grad(set_to_none=True)
    fwd = fwd or model
    total = torch.zeros((), dtype=torch.float64, device=device)
    for j in range(M):
        if callable(tokens_or_batches):
            x, y = tokens_or_batches(j)
        else:
            x, y = microbatch(tokens_or_batches, b, step, j)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if autocast_dtype is not None:
            with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype):
                loss = fwd(x, y)
        else:
            loss = fwd(x, y)
        (loss / M).backward()
        total += loss.detach().double() / M
    clip = manifest.get("grad_clip") or float("inf")
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return total, norm
