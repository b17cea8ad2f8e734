#!/usr/bin/env bash
# THE test command: installs dependencies, builds, and runs every test
# (lit + FileCheck, the compiler's and the runtime's GoogleTest suites), then
# fuzzes every input parser briefly (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
# setup-deps installed PyTorch: the reference test must run, not be skipped.
LLCDIST_REQUIRE_TORCH=1 ninja -C "${BUILD_DIR:-build}" check
# Every input parser under libFuzzer, ASan and UBSan, a bounded time each (docs/fuzzing.md).
bash scripts/fuzz.sh
