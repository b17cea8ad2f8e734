#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (docs/fuzzing.md) into their own build directory with
# clang, ASan and UBSan, and runs each for a bounded time on a copy of its seed corpus.
#
#   scripts/fuzz.sh                               every target of fuzz/CMakeLists.txt, ${FUZZ_SECONDS:-20} s each
#   FUZZ_SECONDS=1800 scripts/fuzz.sh plan        one target (or several) for longer
#   scripts/fuzz.sh xf_module                     the xf-module target, only when named: it builds the
#                                                 whole compiler instrumented (main project, clang,
#                                                 -DLLCDIST_FUZZ_XF=ON) into ${FUZZ_XF_BUILD_DIR:-build-fuzz-xf}
#
# Exit status 1 on any finding (crash, UB, uncaught exception, leak, timeout > 10 s, an input that
# needs more than 2 GiB or one allocation of more than 1 GiB) or on a regression input of
# fuzz/regressions/<target>/ that fails again; the input is kept in build-fuzz/findings/<target>/.
# Exit status 0 with a SKIP line only when clang with libFuzzer is absent and cannot be installed.
#
# Environment: FUZZ_SECONDS (per target, default 20), FUZZ_BUILD_DIR (default build-fuzz),
# FUZZ_XF_BUILD_DIR (default build-fuzz-xf),
# FUZZ_CC / FUZZ_CXX (default clang-22 / clang++-22), FUZZ_JOBS (ninja -j, default 2),
# FUZZ_BUILD_LOCK (a file: the configure and build run under flock on it, for a shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
CC_FUZZ=${FUZZ_CC:-clang-22}
CXX_FUZZ=${FUZZ_CXX:-clang++-22}
MAX_LEN=65536 # bytes: every seed is far smaller; the plan seeds are the largest (docs/fuzzing.md)
ALL_TARGETS=(model_config mesh_spec byte_size cli_flags run_command device topology plan safetensors token_file
             checkpoint_manifest)
# Built from the main project (tools/CMakeLists.txt), only when named.
XF_BUILD=${FUZZ_XF_BUILD_DIR:-build-fuzz-xf}
case "$XF_BUILD" in /*) ;; *) XF_BUILD="$ROOT/$XF_BUILD" ;; esac

say() { echo "fuzz: $*"; }

# Whether $CXX_FUZZ links a libFuzzer binary with ASan and UBSan.
have_libfuzzer() {
  command -v "$CXX_FUZZ" >/dev/null 2>&1 || return 1
  local probe
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }' \
    > "$probe/probe.cpp"
  local ok=0
  "$CXX_FUZZ" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" \
    >/dev/null 2>&1 || ok=1
  rm -rf "$probe"
  return $ok
}

if ! have_libfuzzer; then
  # scripts/setup-deps.sh lists them; a standalone run installs just these two.
  pkgs=(clang-22 libclang-rt-22-dev)
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if command -v apt-get >/dev/null && { [ -z "$SUDO" ] || command -v sudo >/dev/null; }; then
    say "installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; } \
      >/dev/null 2>&1 || true
  fi
  if ! have_libfuzzer; then
    say "SKIP: $CXX_FUZZ with libFuzzer (-fsanitize=fuzzer) is not available and could not be" \
        "installed (apt-get install ${pkgs[*]}); no target was built or run"
    exit 0
  fi
fi

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [ -f "fuzz/${t}_fuzzer.cpp" ] || { say "unknown target '$t' (known: ${ALL_TARGETS[*]} xf_module)" >&2; exit 2; }
done
want_xf=0
fuzz_targets=()
for t in "${targets[@]}"; do
  if [ "$t" = xf_module ]; then want_xf=1; else fuzz_targets+=("$t"); fi
done
binary() { if [ "$1" = xf_module ]; then echo "$XF_BUILD/bin/xf_module_fuzzer"; else echo "$BUILD/${1}_fuzzer"; fi; }

locked() {
  if [ -n "${FUZZ_BUILD_LOCK:-}" ]; then flock "$FUZZ_BUILD_LOCK" "$@"; else "$@"; fi
}
build_start=$(date +%s)
if [ ${#fuzz_targets[@]} -gt 0 ] && [ ! -f "$BUILD/build.ninja" ]; then
  mkdir -p "$BUILD"
  CC=$CC_FUZZ CXX=$CXX_FUZZ locked cmake -S fuzz -B "$BUILD" -G Ninja >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log" >&2; say "configure failed"; exit 1; }
fi
if [ $# -eq 0 ]; then
  # Every target this configuration builds (cli_flags needs LLVM's headers: fuzz/CMakeLists.txt).
  built=()
  for t in "${fuzz_targets[@]}"; do
    if ninja -C "$BUILD" -t query "${t}_fuzzer" >/dev/null 2>&1; then built+=("$t"); else
      say "$t: not configured (fuzz/CMakeLists.txt says why in $BUILD/configure.log)"; fi
  done
  fuzz_targets=("${built[@]}")
fi
if [ ${#fuzz_targets[@]} -gt 0 ]; then
  locked nice ninja -C "$BUILD" -j "${FUZZ_JOBS:-2}" "${fuzz_targets[@]/%/_fuzzer}" >"$BUILD/build.log" 2>&1 || {
    tail -50 "$BUILD/build.log" >&2; say "build failed (log: $BUILD/build.log)"; exit 1; }
fi
if [ $want_xf -eq 1 ]; then
  # The compiler's own sources instrumented (libMLIR is not: Debian's); RelWithDebInfo keeps NDEBUG,
  # as the installed MLIR headers were built with it. vptr needs RTTI, which MLIR's build lacks.
  if [ ! -f "$XF_BUILD/build.ninja" ]; then
    mkdir -p "$XF_BUILD"
    locked cmake -S . -B "$XF_BUILD" -G Ninja -DCMAKE_C_COMPILER="$CC_FUZZ" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLCDIST_FUZZ_XF=ON -DLLCDIST_BUILD_TESTS=OFF \
      -DLLCDIST_RUNTIME_BUILD_TESTS=OFF -DLLCDIST_ENABLE_CUDA=OFF -DLLCDIST_ALLOCATOR=system \
      "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all -fno-omit-frame-pointer" \
      >"$XF_BUILD/configure.log" 2>&1 || { cat "$XF_BUILD/configure.log" >&2; say "xf_module: configure failed"; exit 1; }
  fi
  locked nice ninja -C "$XF_BUILD" -j "${FUZZ_JOBS:-2}" xf_module_fuzzer >"$XF_BUILD/build.log" 2>&1 || {
    tail -50 "$XF_BUILD/build.log" >&2; say "xf_module: build failed (log: $XF_BUILD/build.log)"; exit 1; }
fi
targets=("${fuzz_targets[@]}")
[ $want_xf -eq 0 ] || targets+=(xf_module)
dirs=()
[ ${#fuzz_targets[@]} -eq 0 ] || dirs+=("$BUILD")
[ $want_xf -eq 0 ] || dirs+=("$XF_BUILD")
say "built ${#targets[@]} target(s) in $(( $(date +%s) - build_start )) s (${dirs[*]})"

failed=()
for t in "${targets[@]}"; do
  bin=$(binary "$t")
  out=$(dirname "$bin")
  [ "$t" != xf_module ] || out="$XF_BUILD"
  findings="$out/findings/$t"
  work="$out/run/$t"
  rm -rf "$work"
  mkdir -p "$findings" "$work/corpus"
  # A copy: the in-tree corpus never grows by a run. The regression inputs join it as seeds.
  cp -r "fuzz/corpus/$t/." "$work/corpus/"
  flags=(-max_len=$MAX_LEN -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
         -artifact_prefix="$findings/" -print_final_stats=1)
  [ -f "fuzz/dicts/$t.dict" ] && flags+=(-dict="fuzz/dicts/$t.dict")
  # Each regression input once (libFuzzer runs files given by name and exits): must not fail again.
  if [ -d "fuzz/regressions/$t" ] && [ -n "$(ls -A "fuzz/regressions/$t")" ]; then
    if ! "$bin" "${flags[@]}" "fuzz/regressions/$t"/* >"$work/regressions.log" 2>&1; then
      tail -30 "$work/regressions.log"
      say "$t: FAILED: a regression input of fuzz/regressions/$t fails again (log: $work/regressions.log)"
      failed+=("$t")
      continue
    fi
    say "$t: $(ls "fuzz/regressions/$t" | wc -l) regression input(s) of fuzz/regressions/$t pass"
    cp -r "fuzz/regressions/$t/." "$work/corpus/"
  fi
  seeds=$(ls "$work/corpus" | wc -l)
  rc=0
  "$bin" "${flags[@]}" -max_total_time="$SECONDS_PER_TARGET" "$work/corpus" >"$work/fuzz.log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/fuzz.log" | tail -1 | cut -d' ' -f2)
  if [ "$rc" -eq 0 ]; then
    say "$t: OK: ${execs:-?} executions in ${SECONDS_PER_TARGET} s, coverage ${cov:-?} edges," \
        "corpus $seeds -> $(ls "$work/corpus" | wc -l) inputs"
  else
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|artifact_prefix|Test unit written)' "$work/fuzz.log" \
      | head -10 || true
    tail -40 "$work/fuzz.log" > "$findings/last-log.txt"
    say "$t: FAILED (exit $rc) after ${execs:-?} executions: the input is in $findings/" \
        "(log: $work/fuzz.log)"
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  say "FINDINGS in ${failed[*]} (docs/fuzzing.md: how a finding becomes a regression test)"
  exit 1
fi
say "all ${#targets[@]} target(s) passed"
