#!/usr/bin/env bash
# docs/adding-an-op.md's scratch op, built for real: applies docs/adding-an-op/silu.patch (a new
# elementwise op, xf.silu and xf.silu_grad on the compiler's side, silu_fwd and silu_bwd on the
# runtime's, every file the page says a new op touches and no other) to a clean worktree of HEAD,
# builds it, and runs the tests that name what a new op needs: the compiler's interface checks
# (XFInterfaces.*), the ops' lit cases (round trip, verifier, lowering), the runtime's op tables and
# the page's family table (OpTableTest.*, AddingAnOpDocTest.*), the kernels against references
# (SiluTest.*), the backend conformance suite (every op through the interpreter) and, where CUDA is
# built, the CUDA kernel table (llcdist_cuda_tests.kernel_table, no GPU needed).
#
#   bash scripts/check-adding-an-op.sh [BUILD_DIR]    default /tmp/llcdist-adding-an-op/build
#
# A full build of the compiler and the runtime's tests (723 s on 2 cores from scratch, 2026-12-07):
# not part of the test command. The test command checks the cheap half on every run
# (AddingAnOpDocTest.TheScratchOpPatchTouchesTheFilesThePageCounts: the patch's files are the
# page's list, and the patch still applies). When the tree moves under the patch, rebuild it:
# apply it with `git apply -3`, resolve, and write `git diff > docs/adding-an-op/silu.patch` again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=/tmp/llcdist-adding-an-op
BUILD=${1:-$WORK/build}
TREE=$WORK/tree
say() { echo "adding-an-op: $*"; }

start=$(date +%s)
git worktree remove --force "$TREE" >/dev/null 2>&1 || rm -rf "$TREE"
mkdir -p "$WORK"
git worktree add --detach -q "$TREE" HEAD
trap 'git -C "$ROOT" worktree remove --force "$TREE" >/dev/null 2>&1 || true' EXIT
git -C "$TREE" apply --index "$ROOT/docs/adding-an-op/silu.patch"
say "applied docs/adding-an-op/silu.patch: $(git -C "$TREE" diff --cached --name-only | wc -l) files"

cmake -S "$TREE" -B "$BUILD" -G Ninja >"$WORK/configure.log" 2>&1 || {
  tail -30 "$WORK/configure.log"; say "configure failed"; exit 1; }
targets=(llcdist-compiler-tests llc-dist-opt llc-dist llcdist_runtime_tests llcdist_conformance_tests)
ninja -C "$BUILD" -t query llcdist_cuda_tests >/dev/null 2>&1 && targets+=(llcdist_cuda_tests)
ninja -C "$BUILD" "${targets[@]}" >"$WORK/build.log" 2>&1 || {
  grep -B2 -A8 "error" "$WORK/build.log" | head -60; say "build failed (log: $WORK/build.log)"; exit 1; }
say "built in $(( $(date +%s) - start )) s"

"$BUILD/bin/llcdist-compiler-tests" --gtest_filter='XFInterfaces.*' --gtest_brief=1
/usr/lib/llvm-22/bin/lit -q "$BUILD/test" --filter 'Dialect/XF/(ops|training-ops|invalid)\.mlir|Conversion/XFToPlan/llcdist-lower-to-plan\.mlir'
# (not TheScratchOpPatch...: it checks that the patch applies to an unpatched tree)
(cd "$BUILD" && ctest --output-on-failure -R 'OpTableTest|AddingAnOpDocTest|SiluTest|Conformance|kernel_table' \
   -E 'TheScratchOpPatchTouchesTheFilesThePageCounts')
say "OK: the scratch op builds and passes ($(( $(date +%s) - start )) s)"
