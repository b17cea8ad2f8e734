#!/usr/bin/env python3
"""Writes the generated seeds of fuzz/corpus/ and the dictionaries of fuzz/dicts/
(docs/fuzzing.md); standard library only.

  python3 fuzz/make_seeds.py                     safetensors and token-file seeds, dictionaries
  python3 fuzz/make_seeds.py build/bin/llc-dist  ... and the plan and xf-module seeds, compiled with it

Safetensors (https://github.com/huggingface/safetensors) and llm.c token files
(runtime/include/llcdist/runtime/TokenData.h) are written byte by byte. A plan seed is a compiled
plan's manifest.json, a NUL byte and its program-0.json (fuzz/plan_fuzzer.cpp), both re-serialized
without indentation (same documents, a fifth of the bytes: a seed must stay under the 64 KiB
-max_len of scripts/fuzz.sh). The other seeds are copies of shipped files or typed by hand.
A dictionary (libFuzzer's -dict) holds the string literals of the parser's sources (the field
names and values it knows), JSON's punctuation and numbers at the edges of the integer and double
ranges. Deterministic: rerunning rewrites the same bytes."""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
MODELS = os.path.join(HERE, "..", "models")
MAX_LEN = 65536

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
         "BOOL": 1}


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape)] packed in name order, the header padded to 8 bytes."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in sorted(tensors):
        n = 1
        for d in shape:
            n *= d
        size = n * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 37 + 11) % 251 for i in range(size))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def token_file(tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    return struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens)


def write(target, name, blob):
    assert len(blob) <= MAX_LEN, (target, name, len(blob))
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(blob)


def binary_seeds():
    write("safetensors", "f32-two-tensors.safetensors",
          safetensors([("wte.weight", "F32", [4, 3]), ("ln_f.bias", "F32", [3])]))
    write("safetensors", "bf16-f16-metadata.safetensors",
          safetensors([("a", "BF16", [2, 2]), ("b", "F16", [5])], {"format": "pt"}))
    write("safetensors", "f64-int-scalar.safetensors",
          safetensors([("x", "F64", [2]), ("i", "I64", [3]), ("s", "F32", []), ("m", "BOOL", [4])]))
    write("safetensors", "empty-tensor.safetensors",
          safetensors([("e", "F32", [0, 4]), ("u", "U8", [3])]))
    write("safetensors", "no-tensors.safetensors", safetensors([]))
    write("token_file", "twenty-tokens.bin", token_file([(i * 7919) % 50257 for i in range(20)]))
    write("token_file", "two-tokens.bin", token_file([50256, 1]))
    write("token_file", "no-tokens.bin", token_file([]))


# (seed name, model, layers, compile flags): one of each plan feature the loader checks.
PLANS = [
    ("gpt2-single", "tiny-gpt2.json", 1, []),
    ("llama-dp2-tp2", "tiny-llama.json", 1, ["--mesh", "dp=2,tp=2"]),
    ("gpt2-pp2-1f1b", "tiny-gpt2.json", 2, ["--mesh", "pp=2", "--global-batch", "4"]),
    ("llama-zero3-dp2", "tiny-llama.json", 1, ["--mesh", "dp=2", "--zero", "3"]),
    ("gpt2-zero1-overlap", "tiny-gpt2.json", 1,
     ["--mesh", "dp=2", "--zero", "1", "--overlap-param-gather", "--grad-bucket-size", "auto"]),
    ("llama-bf16-dp2", "tiny-llama.json", 1, ["--mesh", "dp=2", "--dtype", "bf16"]),
    ("gpt2-tp2-sp-overlap", "tiny-gpt2.json", 1,
     ["--mesh", "tp=2", "--sequence-parallel", "--tp-comm-overlap"]),
    ("gpt2-tp2-vocab-padded", "tiny-gpt2.json", 1,
     ["--mesh", "tp=2", "--make-vocab-size-divisible-by", "100"]),
    ("llama-dp2-cp2", "tiny-llama.json", 1, ["--mesh", "dp=2,cp=2"]),
    ("llama-sgd-cosine", "tiny-llama.json", 1,
     ["--optimizer", "sgd", "--momentum", "0.9", "--lr-schedule", "cosine", "--warmup", "2",
      "--grad-clip", "1.0"]),
    ("mixtral-dp2", "tiny-mixtral.json", 1, ["--mesh", "dp=2"]),
    ("mixtral-dp2-ep2", "tiny-mixtral.json", 1, ["--mesh", "dp=2,ep=2"]),
    ("mixtral-capacity", "tiny-mixtral.json", 1, ["--moe-capacity-factor", "0.5"]),
    ("mixtral-dp4-ep2-zero1", "tiny-mixtral.json", 1, ["--mesh", "dp=4,ep=2", "--zero", "1", "--global-batch", "4"]),
    ("qwen2-moe-tp2-sp", "tiny-qwen2-moe.json", 1, ["--mesh", "tp=2", "--sequence-parallel"]),
    # The load-balancing loss: its statistics sent between stages (i32 counts), all-reduced over tp.
    ("mixtral-aux-pp2", "tiny-mixtral.json", 2, ["--mesh", "pp=2"], {"output_router_logits": True}),
    ("mixtral-aux-tp2-sp", "tiny-mixtral.json", 1, ["--mesh", "tp=2", "--sequence-parallel"],
     {"output_router_logits": True}),
    # Learned positions under SP inside cp (shard_axis "tp+cp"); Qwen2-MoE's dense layer beside a sparse one.
    ("gpt2-cp2-tp2-sp", "tiny-gpt2.json", 1, ["--mesh", "cp=2,tp=2", "--sequence-parallel"]),
    ("qwen2-moe-mixed", "tiny-qwen2-moe.json", 2, [], {"decoder_sparse_step": 2, "output_router_logits": True}),
]


def compact(path):
    with open(path) as f:
        return json.dumps(json.load(f), separators=(",", ":")).encode()


def plan_seeds(llc_dist):
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, layers, flags, *overrides in PLANS:  # overrides: config fields set first
            with open(os.path.join(MODELS, model)) as f:
                config = json.load(f)
            config.update(*overrides)
            config["n_layer" if "n_layer" in config else "num_hidden_layers"] = layers
            model_path = os.path.join(tmp, name + ".json")
            with open(model_path, "w") as f:
                json.dump(config, f, indent=2)
            out = os.path.join(tmp, name)
            # Compiled from inside the temporary directory by a relative name, so the plan's
            # locations never hold the directory's random name (the seeds stay deterministic).
            subprocess.run([os.path.abspath(llc_dist), "compile", name + ".json", "--seq-len", "8", "--quiet",
                            "-o", out] + flags, check=True, cwd=tmp)
            write("plan", name + ".plan",
                  compact(os.path.join(out, "manifest.json")) + b"\0" +
                  compact(os.path.join(out, "program-0.json")))


# xf_module seeds: the tiny models' forward graph (`compile --emit xf`) for each mesh, the mesh on the
# first line as xf_module_fuzzer.cpp reads it.
XF_SEEDS = [("tiny-gpt2", "dp=1,tp=1,pp=1"), ("tiny-llama", "dp=1,tp=1,pp=1"),
            ("tiny-gpt2", "dp=2,tp=1,pp=1"), ("tiny-llama", "dp=1,tp=2,pp=1"),
            ("tiny-llama", "dp=1,tp=1,pp=2"), ("tiny-gpt2", "dp=1,tp=2,pp=2"),
            ("tiny-llama", "dp=1,tp=1,pp=1,cp=2"), ("tiny-qwen2-moe", "dp=1,tp=1,pp=1"),
            ("tiny-mixtral", "dp=2,tp=1,pp=1,ep=2"), ("tiny-mixtral", "dp=1,tp=1,pp=1,cp=2")]


def xf_seeds(llc_dist):
    with tempfile.TemporaryDirectory() as tmp:
        for model, mesh in XF_SEEDS:
            out = os.path.join(tmp, "xf.mlir")
            # Run from the repository root, so the locations name models/<model>.json.
            subprocess.run([llc_dist, "compile", "models/%s.json" % model, "--mesh", mesh, "--emit", "xf",
                            "--quiet", "-o", out], check=True, cwd=ROOT)
            with open(out, "rb") as f:
                write("xf_module", "%s-%s.mlir" % (model, mesh.replace(",", "-").replace("=", "")),
                      ("// mesh %s\n" % mesh).encode() + f.read())


ROOT = os.path.join(HERE, "..")
# target -> (the sources whose literals it gets, whether its input is JSON)
DICTS = {
    "model_config": (["include/llcdist/Frontend/ModelConfig.h", "lib/Frontend/ModelConfig.cpp",
                      "lib/Frontend/ModelFamilies.cpp", "lib/Frontend/GptFamilies.cpp",
                      "lib/Frontend/ConfigFields.h"], True),
    "device": (["lib/Support/Device.cpp"], True),
    "topology": (["lib/Support/Topology.cpp"], True),
    "plan": (["runtime/src/Plan.cpp", "runtime/src/PlanOps.cpp",
              "runtime/include/llcdist/runtime/PlanSchema.h", "runtime/src/ops/*.cpp"], True),
    "safetensors": (["runtime/src/Safetensors.cpp"], True),
    "checkpoint_manifest": (["runtime/src/CheckpointManifest.cpp"], True),
    "mesh_spec": (["lib/Support/MeshSpec.cpp"], False),
    "cli_flags": (["tools/llc-dist/Cli.h"], False),
    "run_command": (["runtime/src/cli/RunCommandLine.cpp"], False),
    "xf_module": (["include/llcdist/Dialect/XF/IR/*.td"], False),
}
JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "\"\"", "null", "true", "false", "{}", "[]"]
NUMBERS = ["0", "-0", "1", "-1", "2", "0.5", "1e-300", "5e-324", "1e300", "1e400", "-1e300",
           "65536", "4294967295", "4294967296", "2147483647", "2147483648", "16777216", "16777217",
           "9007199254740993", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
           "18446744073709551615", "18446744073709551616"]
EXTRA = {
    "mesh_spec": ["dp=", "tp=", "pp=", "cp=", "ep=", "=", ","],
    "cli_flags": ["\n", "=", "--mesh", "--rank-order", "--steps", "--seq-len", "--micro-batch",
                  "--lr", "--weight-decay", "--device", "--memory-budget", "dp=", "tp=", "pp=", "cp=", "ep=",
                  "--moe-capacity-factor",
                  "GiB", "MiB", "inf", "nan", "0x1p4", "e"],
    "run_command": ["\n", "=", "env=", "cuda", "cpu", "on", "off", "synthetic", ",", "0,1", "1e6", "inf",
                    "nan", "-1", "1024", "16777216"],
    "xf_module": ["xf.", "tensor<", "x", "f32>", "bf16>", "i64", ": i64", " = ", "loc(", "#loc", "%", "@",
                  "{", "}", "(", ")", "<", ">", "[", "]", ",", "// mesh dp=2,tp=2,pp=2\n", "shape = ",
                  "hidden_size", "num_layers", "vocab_size", "seq_len", "micro_batch", "num_heads",
                  "num_kv_heads", "intermediate_size", "head_dim", "max_positions", "func.func", "return",
                  "shard.grid", "dense<", "\n"],
    "byte_size": ["TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB", "B", ".", "e", "e-", "e+",
                  "inf", "nan", "0x", "p", " ", "-"],
}


def dict_entry(token):
    out = ""
    for ch in token.encode():
        c = chr(ch)
        out += c if 32 <= ch < 127 and c not in "\\\"" else "\\x%02X" % ch
    return '"' + out + '"'


def dictionaries():
    targets = sorted(set(DICTS) | set(EXTRA))
    for target in targets:
        sources, is_json = DICTS.get(target, ([], False))
        literals = set()
        for pattern in sources:
            for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
                with open(path) as f:
                    for m in re.finditer(r'"([A-Za-z_][A-Za-z0-9_.]{0,40})"', f.read()):
                        literals.add(m.group(1))
        tokens = []
        for lit in sorted(literals):
            tokens.append('"%s"' % lit if is_json else lit)
        tokens += (JSON_TOKENS if is_json else []) + EXTRA.get(target, []) + NUMBERS
        os.makedirs(os.path.join(HERE, "dicts"), exist_ok=True)
        with open(os.path.join(HERE, "dicts", target + ".dict"), "w") as f:
            f.write("# libFuzzer dictionary of %s_fuzzer: written by fuzz/make_seeds.py\n" % target)
            seen = set()
            for t in tokens:
                if t not in seen:
                    seen.add(t)
                    f.write(dict_entry(t) + "\n")


def main(argv):
    binary_seeds()
    dictionaries()
    if len(argv) > 1:
        shutil.rmtree(os.path.join(CORPUS, "plan"), ignore_errors=True)
        plan_seeds(argv[1])
        shutil.rmtree(os.path.join(CORPUS, "xf_module"), ignore_errors=True)
        xf_seeds(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
