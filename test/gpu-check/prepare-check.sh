#!/usr/bin/env bash
# ctest gpu-check.prepare (test/CMakeLists.txt): the GPU check's two halves on the CPU machine.
#   1. `scripts/test-gpu.sh --no-build --prepare DIR` works, and DIR stays under the 64 MiB a device
#      call carries;
#   2. without a GPU, `bash DIR/run.sh` prints exactly one line, "FAIL gpu: ...", and exits non-zero;
#   3. the prepared golden suite runs on the CPU backend (--backend cpu) and agrees exactly with the
#      references it recorded (skipped while llcdist-run has no --backend flag);
#   4. the PyTorch model of the check (bench/gpu/torch_model.py) reproduces the prepared f32 CPU
#      references (within 1e-5: model, data order, AdamW, schedule and clipping), and PyTorch's CPU
#      bf16 autocast the bf16 ones within the check's documented bf16 tolerance (needs torch);
#   5. bench/gpu_step.py's whole path on tiny models, llc-dist and PyTorch on the CPU.
# Skips (exit 77) where the CUDA backend is not built. About 40 s on 2 cores (the xz of OpenBLAS
# dominates). usage: prepare-check.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: prepare-check.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -x "$build/runtime/llcdist_cuda_tests" ]; then
  echo "SKIP: the CUDA backend is not built here (CMake found no CUDA toolkit): there is no GPU check to prepare"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llcdist-prepare-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dir=$tmp/gpu-check
bad=0
fail() { echo "FAIL: $*"; bad=1; }

# 1. prepare, and the size.
if ! BUILD_DIR="$build" bash "$root/scripts/test-gpu.sh" --no-build --prepare "$dir" > "$tmp/prepare.log" 2>&1; then
  cat "$tmp/prepare.log"
  echo "FAIL: scripts/test-gpu.sh --prepare failed"
  exit 1
fi
tail -1 "$tmp/prepare.log"
size=$(du -sb "$dir" | cut -f1)
[ "$size" -lt $((64 << 20)) ] && echo "ok: $dir is $size bytes (< 64 MiB)" || fail "$dir is $size bytes (>= 64 MiB)"
for f in run.sh golden.json parity.json prepare.json bin/llcdist-run.xz bin/llcdist_cuda_tests.xz \
    bin/llcdist_gpu_kernel_bench.xz plans/bench/gpt2/manifest.json plans/bench/llama3.2-1b/manifest.json \
    info/gpt2.json params/parity-llama-bf16.safetensors ref/llama-dp2-tp2-pp2-sp-bf16.jsonl; do
  [ -s "$dir/$f" ] || fail "DIR/$f is missing"
done
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["plans"]))' "$dir/golden.json")" = 78 ] ||
  fail "golden.json does not list the 78 plans (37 configurations and 2 parity plans, f32 and bf16)"

# 2. no GPU: one line, non-zero. (A PATH without nvidia-smi: also where the CI machine has one.)
nogpu=$tmp/nogpu-bin
mkdir -p "$nogpu"
for t in bash sh env mktemp dirname cat tr sed cut head grep timeout rm; do
  p=$(command -v "$t") && ln -sf "$p" "$nogpu/$t"
done
ln -sf "$(python3 -c 'import sys; print(sys.executable)')" "$nogpu/python3"  # not a pyenv shim
(cd / && env PATH="$nogpu" bash "$dir/run.sh" > "$tmp/nogpu.out" 2>&1)
rc=$?
lines=$(wc -l < "$tmp/nogpu.out")
if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && grep -q '^FAIL gpu: ' "$tmp/nogpu.out"; then
  echo "ok: without a GPU run.sh prints one line and exits $rc: $(cat "$tmp/nogpu.out")"
else
  fail "without a GPU run.sh exited $rc with $lines lines:"; sed 's/^/  | /' "$tmp/nogpu.out"
fi

# 3. the golden suite on the CPU backend: exactly the references (the CPU backend is deterministic).
runner=$build/runtime/llcdist-run
[ -x "$runner" ] || runner=$build/llcdist-run
if "$runner" --help 2>&1 | grep -q -- '--backend'; then
  sed 's/"rtol": [0-9.e-]*/"rtol": 0/' "$dir/golden.json" > "$tmp/golden0.json" && cp "$tmp/golden0.json" "$dir/golden.json"
  if python3 "$root/scripts/gpu_golden.py" suite "$dir" --runner "$runner" --backend cpu --jobs 2 \
      --logs "$tmp/golden-logs" > "$tmp/golden.out" 2>&1; then
    echo "ok: the prepared golden suite passes on the CPU backend at rtol 0 ($(grep -c '^PASS' "$tmp/golden.out") plans)"
  else
    fail "the golden suite on the CPU backend:"; cat "$tmp/golden.out"
  fi
else
  echo "note: $runner has no --backend flag yet: the golden suite's CPU run is not checked"
fi

# 4. the PyTorch reference on the CPU against the prepared CPU references.
torch_py=""
for c in /usr/bin/python3 "$(command -v python3)"; do
  if [ -n "$c" ] && "$c" -c 'import torch' > /dev/null 2>&1; then torch_py=$c; break; fi
done
if [ -n "$torch_py" ]; then
  "$torch_py" - "$dir/parity.json" "$tmp/parity-cpu.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))
for c in cases:
    c["device"] = "cpu"
    if c["autocast"] == "off":   # f32: as tight as test/reference/hf-parity.test
        c["loss_rtol"] = c["grad_rtol"] = 1e-5
    else:                        # bf16 autocast on the CPU against the CPU backend's bf16 run
        c["log"] = c["log"].replace("LOGS/", "ref/")
json.dump(cases, open(sys.argv[2], "w"))
PY
  if "$torch_py" "$dir/bench/gpu/torch_parity.py" --suite "$tmp/parity-cpu.json" --root "$dir" > "$tmp/parity.out" 2>&1; then
    sed 's/^/ok: /' "$tmp/parity.out"
  else
    fail "PyTorch on the CPU against the prepared references:"; cat "$tmp/parity.out"
  fi
elif [ "${LLCDIST_REQUIRE_TORCH:-0}" = 1 ]; then
  fail "LLCDIST_REQUIRE_TORCH=1 but no python3 can import torch"
else
  echo "note: no python3 with torch: the PyTorch comparison is not checked"
fi

# 5. the benchmark script's device file for the GPU nvidia-smi names (its MFU's peak), then the script
# end to end on tiny models (nothing timed that matters).
if python3 - "$root/bench" "$root/devices" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
from gpu_step import device_file_for
want = {"NVIDIA H100 80GB HBM3": "h100-80gb.json", "NVIDIA H200": "h200.json",
        "NVIDIA A100-SXM4-40GB": "a100-40gb.json", "NVIDIA A100-SXM4-80GB": "a100-80gb.json",
        "Tesla V100-SXM2-32GB": "h200.json", "": "h200.json"}
got = {n: os.path.basename(device_file_for(n, sys.argv[2])) for n in want}
sys.exit(0 if got == want else f"device_file_for: {got}")
PY
then
  echo "ok: bench/gpu_step.py prices an H100 with devices/h100-80gb.json and an H200 with h200.json"
else
  fail "bench/gpu_step.py's device file by GPU name"
fi
if [ -n "$torch_py" ] && [ -x "$build/bin/llc-dist" ]; then
  if "$torch_py" "$root/bench/gpu_step.py" --build "$build" --cases tiny-gpt2=2x32,tiny-llama=2x32 --steps 3 \
      --warmup 1 --backend cpu --torch-device cpu --skip-compile --json "$tmp/gpu-step.json" > "$tmp/bench.out" 2>&1 &&
      [ "$(grep -c '^INFO bench [^ ]* [a-z-]*: bf16 ' "$tmp/bench.out")" = 6 ] && [ "$(grep -c ' target: ' "$tmp/bench.out")" = 2 ] &&
      [ "$(grep -c '^INFO bench [^ ]* graphs: ' "$tmp/bench.out")" = 2 ] &&
      grep -q '^INFO bench device file: h200.json' "$tmp/bench.out"; then
    echo "ok: bench/gpu_step.py runs end to end on the CPU"
  else
    fail "bench/gpu_step.py on the CPU:"; cat "$tmp/bench.out"
  fi
fi
[ "$bad" = 0 ] && echo "GPU CHECK PREPARE OK"
exit "$bad"
