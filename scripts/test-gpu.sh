#!/usr/bin/env bash
# The GPU check of the CUDA backend (docs/gpu.md, "The GPU check"). Two halves, one implementation:
#
#   bash scripts/test-gpu.sh --prepare DIR [--no-bench] [--no-build]
#       on the build machine (the compiler, no GPU needed): builds llc-dist, llcdist-run,
#       llcdist_cuda_tests and llcdist_gpu_kernel_bench into BUILD_DIR (default build; ninja brings
#       them up to date), compiles every plan the check runs, runs the golden plans on the CPU backend
#       and keeps their losses, and copies the runner, the test and benchmark binaries with the
#       non-CUDA libraries they load, the scripts and the data into DIR (scripts/gpu_prepare.py; well
#       under the 64 MiB a device call carries). DIR/run.sh is then the whole check on any machine
#       with an NVIDIA GPU, its driver, the CUDA toolkit's libraries and python3 with PyTorch.
#       --no-bench leaves out the benchmark plans (the CPU test of this script).
#   bash scripts/test-gpu.sh [--no-build] [-- RUN_SH_ARGS...]
#       on a machine with a GPU and the build tools: prepares a temporary directory and runs its
#       run.sh here (QUICK=1: only the kernels, the golden rule and the PyTorch comparison).
#
# run.sh prints one line per check -- PASS, FAIL, SKIP or INFO -- and exits non-zero when one failed;
# without a GPU it prints one "FAIL gpu: ..." line. LLC_DIST=PATH takes the compiler from elsewhere
# (e.g. when BUILD_DIR is a runtime-only build: cmake -S runtime -B build-rt).
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.." || exit 2
BUILD_DIR=${BUILD_DIR:-build}
abs() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }  # a path the caller gave
prepare="" build=1 bench=1
run_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) prepare=$(abs "${2:?--prepare needs a directory}"); shift 2 ;;
    --no-build) build=0; shift ;;
    --no-bench) bench=0; shift ;;
    --) shift; run_args=("$@"); break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$build" = 1 ]; then
  targets=(llcdist-run llcdist_cuda_tests llcdist_gpu_kernel_bench)
  [ -n "${LLC_DIST:-}" ] || targets=(llc-dist "${targets[@]}")
  echo "INFO build: ${targets[*]} in $BUILD_DIR"
  if ! BUILD_DIR="$BUILD_DIR" bash scripts/build.sh "${targets[@]}" > "${TMPDIR:-/tmp}/llcdist-gpu-build.log" 2>&1; then
    echo "FAIL build: scripts/build.sh ${targets[*]} failed (CMake found no CUDA toolkit?):"
    tail -15 "${TMPDIR:-/tmp}/llcdist-gpu-build.log" | sed 's/^/  | /'
    exit 1
  fi
fi
prep=(python3 scripts/gpu_prepare.py --build "$BUILD_DIR")
[ -n "${LLC_DIST:-}" ] && prep+=(--llc-dist "$(abs "$LLC_DIST")")
[ "$bench" = 0 ] && prep+=(--no-bench)

if [ -n "$prepare" ]; then
  exec "${prep[@]}" --out "$prepare"
fi

# In place: prepare a temporary directory, then run it here.
dir=$(mktemp -d "${TMPDIR:-/tmp}/llcdist-gpu.XXXXXX")
trap 'rm -rf "$dir"' EXIT
if ! "${prep[@]}" --out "$dir" > "$dir.prepare.log" 2>&1; then
  echo "FAIL prepare: scripts/gpu_prepare.py failed:"
  tail -15 "$dir.prepare.log" | sed 's/^/  | /'
  rm -f "$dir.prepare.log"
  exit 1
fi
rm -f "$dir.prepare.log"
if [ "${QUICK:-0}" = 1 ]; then
  echo "INFO QUICK=1: the benchmarks and the profile are skipped"
  run_args=(--only "kernels,golden,torch" "${run_args[@]}")
fi
bash "$dir/run.sh" "${run_args[@]}"
