#!/usr/bin/env bash
# THE test command: installs dependencies, builds, and runs every test
# (lit + FileCheck, the compiler's and the runtime's GoogleTest suites), then
# fuzzes every input parser briefly (scripts/fuzz.sh). Each phase ends with a
# "test.sh: PHASE took N s" line (the 30-minute budget of .ci/run on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { # phase NAME COMMAND...: runs it, then says how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s (total $SECONDS s)"
}
phase "set-up" bash scripts/setup-deps.sh
phase "build" bash scripts/build.sh
# setup-deps installed PyTorch: the reference test must run, not be skipped.
phase "tests" env LLCDIST_REQUIRE_TORCH=1 ninja -C "${BUILD_DIR:-build}" check
# Every input parser under libFuzzer, ASan and UBSan, a bounded time each (docs/fuzzing.md).
phase "fuzzing" bash scripts/fuzz.sh
