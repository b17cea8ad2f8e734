#!/usr/bin/env bash
# The GPU check of llc-dist's CUDA backend, as prepared by `scripts/test-gpu.sh --prepare DIR`
# (docs/gpu.md, "The GPU check"): this file is DIR/run.sh. Run it on a machine with an NVIDIA GPU,
# the driver, the CUDA toolkit's libraries (cuBLASLt) and python3 with PyTorch; nothing is built or
# compiled here. From any directory:
#
#   bash DIR/run.sh [--out DIR2] [--budget SECONDS] [--only kernels,golden,torch,kernel-bench,bench,profile]
#
# Prints one line per check, PASS / FAIL / SKIP / INFO (a failed check's log tail follows it on
# lines starting "  | "), and exits non-zero when a check failed. Without a usable GPU it prints a
# single "FAIL gpu: ..." line and exits 1. The checks, in order, each under a timeout and all within
# --budget seconds (default 345; what no longer fits is SKIPped, never half-run):
#   kernels       every CUDA kernel and backend piece against the CPU, and the backend conformance
#                 suite's cases on the CUDA backend (llcdist_cuda_tests)
#   golden        each plan of DIR/golden.json on the GPU against the CPU backend's losses and gradient
#                 norms recorded at prepare time (scripts/gpu_golden.py suite)
#   torch         the bf16 plans beside PyTorch autocast on the same model and data, and PyTorch f32
#                 beside the CPU reference (bench/gpu/torch_parity.py)
#   kernel-bench  GEMM and attention TFLOP/s (llcdist_gpu_kernel_bench)
#   bench         GPT-2 124M and Llama-3.2-1B steps beside PyTorch eager and torch.compile (bench/gpu_step.py)
#   profile       llcdist-run --profile on the two benchmark plans
# --out DIR2 copies the logs there (gpu-check-logs.tar.gz, gpu-step.json).
set -uo pipefail
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUDGET=${LLCDIST_GPU_CHECK_BUDGET:-345}
OUTDIR=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUTDIR=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "FAIL usage: unknown argument '$1' (see bash $0 --help)"; exit 2 ;;
  esac
done
START=$SECONDS
DEADLINE=$((SECONDS + BUDGET))

# 0. A GPU, or one line and out.
one_line() { tr '\n\r\t' '   ' | sed 's/  */ /g; s/ $//' | cut -c1-400; }
# The tail of a log as "  | " lines (its first 3 lines too when it is long).
tail_of() {
  local n
  n=$(grep -c . "$1" 2> /dev/null)
  if [ "${n:-0}" -gt 12 ]; then
    { grep . "$1" | head -3; echo "... ($((n - 12)) lines)"; grep . "$1" | tail -9; }
  else
    grep . "$1" 2> /dev/null
  fi | cut -c1-300 | sed 's/^/  | /'
}
if ! command -v nvidia-smi > /dev/null 2>&1; then
  echo "FAIL gpu: no nvidia-smi on PATH (no NVIDIA driver on this machine)"
  exit 1
fi
if ! gpu=$(timeout 60 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); then
  echo "FAIL gpu: nvidia-smi failed: $(printf '%s' "$gpu" | one_line)"
  exit 1
fi
if [ -z "$(printf '%s' "$gpu" | tr -d '[:space:]')" ]; then
  echo "FAIL gpu: nvidia-smi lists no device"
  exit 1
fi
if ! command -v python3 > /dev/null 2>&1; then
  echo "FAIL gpu: no python3 on this machine (the check's scripts need it)"
  exit 1
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/llcdist-gpu-check.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/lib" "$T/run" "$T/logs"
echo "INFO gpu: $(printf '%s' "$gpu" | head -1 | one_line) ($(printf '%s\n' "$gpu" | wc -l) device(s); virtual ranks share device 0)"
echo "INFO prepared: $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p.get("summary", ""))' "$DIR/prepare.json" 2>&1 | one_line)"

# Unpack the binaries and libraries (xz, through python3's lzma: no xz binary needed here).
if ! python3 - "$DIR" "$T" <<'PY'
import lzma, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for sub in ("bin", "lib", "lib/compat"):
    d = os.path.join(src, sub)
    if not os.path.isdir(d):
        continue
    os.makedirs(os.path.join(dst, sub), exist_ok=True)
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if not os.path.isfile(p):
            continue
        name = f[:-3] if f.endswith(".xz") else f
        out = os.path.join(dst, sub, name)
        with (lzma.open(p) if f.endswith(".xz") else open(p, "rb")) as i, open(out, "wb") as o:
            shutil.copyfileobj(i, o, 1 << 20)
        os.chmod(out, 0o755 if sub == "bin" else 0o644)
PY
then
  echo "FAIL setup: cannot unpack $DIR/bin and $DIR/lib into $T"
  exit 1
fi

# The libraries our binaries run with (never exported: python3 / PyTorch keep their own).
fails=0
python3 "$DIR/scripts/gpu_env.py" "$T/lib" "$T/ld_library_path" "$T"/bin/* || fails=$((fails + 1))
LDP=$(cat "$T/ld_library_path" 2>/dev/null)
for b in "$T"/bin/*; do  # wrappers that set it for one binary each
  w="$T/run/$(basename "$b")"
  printf '#!%s\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$BASH" "$LDP" "$b" > "$w"
  chmod +x "$w"
done
RUN="$T/run/llcdist-run"
if "$RUN" --help > "$T/runner-help.txt" 2>&1; then
  have="" lack=""
  for f in --backend --device-ids --profile --deterministic --log-json; do
    if grep -q -- "$f" "$T/runner-help.txt"; then have="$have $f"; else lack="$lack $f"; fi
  done
  echo "INFO runner: llcdist-run has${have:- none} of the flags the check uses${lack:+; lacks$lack}"
else
  echo "FAIL runner: llcdist-run --help failed:"
  tail_of "$T/runner-help.txt"
  fails=$((fails + 1))
fi
has_flag() { grep -q -- "$1" "$T/runner-help.txt"; }
if ! has_flag '--backend'; then
  echo "FAIL runner: this llcdist-run has no --backend flag (a CPU-only runner): every GPU run below fails"
  fails=$((fails + 1))
fi
echo "INFO torch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")' 2>&1 | tail -1 | one_line)"

# The checks in order, each with the seconds it needs at least (what later checks keep of the budget).
MINS=(kernels:20 golden:30 torch:20 kernel-bench:15 bench:120 profile:60)
selected() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }
reserve_after() {  # the minimum seconds of the selected checks after $1
  local r=0 seen=0 e
  for e in "${MINS[@]}"; do
    if [ "$seen" = 1 ] && selected "${e%%:*}"; then r=$((r + ${e##*:})); fi
    [ "${e%%:*}" = "$1" ] && seen=1
  done
  echo "$r"
}
# check NAME MAX_SECONDS CMD...: runs CMD (a program, or one of the exported functions below through
# bash -c) under a timeout of at most MAX_SECONDS, leaving the later checks their minimum seconds
# where it can (an earlier check still gets its own minimum; SKIP when fewer seconds than that are
# left); prints its output; a non-zero exit without a FAIL
# line of its own becomes one, with the log's tail.
check() {
  local name=$1 max=$2 min reserve left t rc out t0 n e
  shift 2
  selected "$name" || return 0
  for e in "${MINS[@]}"; do [ "${e%%:*}" = "$name" ] && min=${e##*:}; done
  reserve=$(reserve_after "$name")
  left=$((DEADLINE - SECONDS))
  t=$((left - reserve))
  [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt "$min" ]; then  # an earlier check comes first: its minimum, at the later ones' expense
    t=$min
    if [ "$left" -lt "$min" ]; then
      echo "SKIP $name: time budget ($left s left of $BUDGET; it needs $min)"
      return 0
    fi
  fi
  out="$T/logs/$name.out"
  t0=$SECONDS
  CHECK_SECONDS=$t timeout -k 10 "$t" "$@" > "$out" 2>&1
  rc=$?
  cat "$out"
  n=$(grep -c '^FAIL' "$out")
  if [ "$rc" -ne 0 ] && [ "$n" -eq 0 ]; then
    local why="exit $rc"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="timed out after $t s"; fi
    echo "FAIL $name: $why"
    tail_of "$out"
    n=1
  fi
  fails=$((fails + n))
  echo "INFO $name: done in $((SECONDS - t0)) s"
}

# a. kernels: one line per GoogleTest case.
kernels() {
  "$T/run/llcdist_cuda_tests" --gtest_output=json:"$T/logs/kernels.json" > "$T/logs/kernels.log" 2>&1
  python3 "$DIR/scripts/gpu_gtest_lines.py" "$T/logs/kernels.json" "$T/logs/kernels.log" kernel
}
export -f kernels
export T DIR RUN
check kernels 120 bash -c kernels

# b. the golden rule: every prepared plan on the GPU against the CPU backend's reference.
check golden 150 python3 "$DIR/scripts/gpu_golden.py" suite "$DIR" --runner "$RUN" --backend cuda \
  --jobs 4 --timeout 120 --logs "$T/logs/golden"

# c. PyTorch on the same models (the bf16 runs use the golden suite's GPU logs of the parity plans).
check torch 100 python3 "$DIR/bench/gpu/torch_parity.py" --suite "$DIR/parity.json" --root "$DIR" \
  --logs "$T/logs/golden" --runner "$RUN"

# d. GEMM and attention throughput.
check kernel-bench 90 "$T/run/llcdist_gpu_kernel_bench"

# e. the benchmarks beside PyTorch (the budget left, but for the profile runs).
bench() {  # its own budget: the check's timeout (CHECK_SECONDS) less a margin for the last lines
  python3 "$DIR/bench/gpu_step.py" --dir "$DIR" --runner "$RUN" --budget $((CHECK_SECONDS - 10)) \
    --json "$T/logs/gpu-step.json"
}
export -f bench
check bench 900 bash -c bench

# f. the runner's per-op-kind profile of the two benchmark plans.
profile() {  # informational: a run cut short by the budget is a SKIP, a failed run a FAIL
  if ! has_flag '--profile'; then
    echo "SKIP profile: this llcdist-run has no --profile flag"
    return 0
  fi
  local rc=0 m t models
  models=$(ls "$DIR/plans/bench" 2> /dev/null)
  if [ -z "$models" ]; then
    echo "SKIP profile: no benchmark plan (prepared with --no-bench)"
    return 0
  fi
  t=$(( (CHECK_SECONDS - 5) / $(echo "$models" | grep -c .) ))
  for m in $models; do
    timeout "$t" "$RUN" "$DIR/plans/bench/$m" --backend cuda --steps 3 --data synthetic --seed 1 --profile \
      > "$T/logs/profile-$m.txt" 2>&1
    case $? in
      0) echo "INFO profile $m (llcdist-run --profile, 3 steps):"
         grep . "$T/logs/profile-$m.txt" | tail -60 | cut -c1-300 | sed 's/^/  | /' ;;
      124) echo "SKIP profile $m: not done in its $t s of the time budget"
           tail_of "$T/logs/profile-$m.txt" ;;
      *) echo "FAIL profile $m: llcdist-run --profile failed:"
         tail_of "$T/logs/profile-$m.txt"
         rc=1 ;;
    esac
  done
  return $rc
}
export -f profile has_flag tail_of
check profile 130 bash -c profile

if [ -n "$OUTDIR" ]; then
  mkdir -p "$OUTDIR" && cp -f "$T/logs/gpu-step.json" "$OUTDIR/" 2> /dev/null
  tar -C "$T" -czf "$OUTDIR/gpu-check-logs.tar.gz" logs 2> /dev/null &&
    echo "INFO out: logs in $OUTDIR/gpu-check-logs.tar.gz"
fi
echo "INFO done: $fails check(s) failed, $((SECONDS - START)) s"
[ "$fails" -eq 0 ]
