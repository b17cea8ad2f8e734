#!/usr/bin/env bash
# The GPU check of the CUDA backend (docs/gpu.md): run it as is on a machine with an NVIDIA GPU
# (sm_80 or sm_90), after scripts/setup-deps.sh; about 10 minutes on one H200. It builds what is
# missing, then prints one line per check -- PASS, FAIL, SKIP or INFO -- and exits non-zero when a
# check fails:
#   1. every CUDA kernel against the CPU reference on seeded inputs, f32 and bf16, and the backend
#      itself (build/runtime/llcdist_cuda_tests: one line per test);
#   2. the golden rule on the GPU: tiny GPT-2 and Llama plans on one rank and on virtual ranks
#      (dp=2, tp=2 with SP, pp=2 1F1B, ZeRO-3) against the CPU backend's run of the same plan;
#   3. bench/gpu_step.py: step time, tokens/s and MFU for GPT-2 124M and Llama-3.2-1B in bf16 beside
#      PyTorch (torch.compile + SDPA) on the same GPU;
#   4. GEMM and attention TFLOP/s at large shapes beside cuBLASLt's best algorithm
#      (build/runtime/llcdist_gpu_kernel_bench).
# BUILD_DIR (default build) selects the build; QUICK=1 skips 3 and 4.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
LLC="$BUILD_DIR/bin/llc-dist"
TESTS="$BUILD_DIR/runtime/llcdist_cuda_tests"
BENCH="$BUILD_DIR/runtime/llcdist_gpu_kernel_bench"
fails=0
tmp=$(mktemp -d /tmp/llcdist-gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

if ! gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); then
  echo "FAIL gpu: nvidia-smi: $gpu"
  exit 1
fi
echo "INFO gpu: $gpu"
if [ ! -x "$LLC" ] || [ ! -x "$TESTS" ]; then
  echo "INFO build: building llc-dist and the CUDA tests into $BUILD_DIR"
  if ! bash scripts/build.sh llc-dist llcdist_cuda_tests llcdist_gpu_kernel_bench > "$tmp/build.log" 2>&1; then
    echo "FAIL build: $(tail -5 "$tmp/build.log" | tr '\n' ' ')"
    exit 1
  fi
fi
[ -x "$TESTS" ] || { echo "FAIL build: $TESTS missing (CMake found no CUDA toolkit?)"; exit 1; }

# 1. kernels and backend: one line per GoogleTest case.
"$TESTS" --gtest_output=json:"$tmp/kernels.json" > "$tmp/kernels.log" 2>&1
python3 - "$tmp/kernels.json" "$tmp/kernels.log" <<'PY' || fails=$((fails + 1))
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL kernels: no test report ({e}); log tail: {open(sys.argv[2]).read()[-300:]!r}")
    sys.exit(1)
bad = 0
for suite in report["testsuites"]:
    for t in suite["testsuite"]:
        name = f"{suite['name']}.{t['name']}"
        if t.get("failures"):
            bad += 1
            msg = t["failures"][0]["failure"].replace("\n", " ")[:200]
            print(f"FAIL kernel {name}: {msg}")
        elif t.get("result") == "SKIPPED":
            print(f"SKIP kernel {name}")
        else:
            print(f"PASS kernel {name} ({t.get('time', '?')})")
sys.exit(1 if bad else 0)
PY

# 2. the golden rule: each plan on the CPU backend and on the GPU, the same losses.
golden() {  # NAME RTOL MODEL FLAGS...
  local name=$1 rtol=$2
  shift 2
  python3 scripts/gpu_golden.py "$LLC" models "$name" --a cpu --b cuda --steps 3 --rtol "$rtol" -- "$@" ||
    fails=$((fails + 1))
}
golden gpt2-1rank 2e-4 tiny-gpt2 --seq-len 64 --global-batch 4
golden llama-1rank 2e-4 tiny-llama --seq-len 64 --global-batch 4
golden gpt2-1rank-bf16 2e-2 tiny-gpt2 --seq-len 64 --global-batch 4 --dtype bf16
golden llama-1rank-bf16 2e-2 tiny-llama --seq-len 64 --global-batch 4 --dtype bf16
golden gpt2-dp2 2e-4 tiny-gpt2 --mesh dp=2 --seq-len 64 --global-batch 4
golden llama-tp2-sp 2e-4 tiny-llama --mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4
golden gpt2-tp2-sp 2e-4 tiny-gpt2 --mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4
golden llama-pp2-1f1b 2e-4 tiny-llama --mesh pp=2 --schedule 1f1b --seq-len 64 --global-batch 8
golden llama-dp2-zero3 2e-4 tiny-llama --mesh dp=2 --zero 3 --seq-len 64 --global-batch 4
golden llama-dp2-tp2-pp2-sp 2e-4 tiny-llama --mesh dp=2,tp=2,pp=2 --sequence-parallel --seq-len 64 --global-batch 8

if [ "${QUICK:-0}" = 1 ]; then
  echo "INFO QUICK=1: the step-time and kernel benchmarks are skipped"
else
  # 3. step time beside PyTorch.
  timeout 300 python3 bench/gpu_step.py --build "$BUILD_DIR" --json "$tmp/gpu-step.json" || fails=$((fails + 1))
  # 4. GEMM and attention throughput beside cuBLASLt's best.
  if [ -x "$BENCH" ]; then
    timeout 180 "$BENCH" || fails=$((fails + 1))
  else
    echo "FAIL kernel-bench: $BENCH was not built"
    fails=$((fails + 1))
  fi
fi
echo "INFO done: $fails check(s) failed"
[ "$fails" = 0 ]
