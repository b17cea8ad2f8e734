#!/bin/sh
# check-no-libs.sh BINARY REGEX: fails when BINARY loads a shared library (ldd) or holds a symbol,
# defined or needed (nm -C), that matches the extended REGEX; passes with one line saying what was
# checked. Used by the ctests llcdist_run.no_llvm_mlir (REGEX: LLVM / MLIR) and
# llcdist_runtime_train.links_* (REGEX: the CPU backend and BLAS).
set -u
bin=$1
re=$2
libs=$(ldd "$bin") || { echo "FAIL: ldd $bin failed"; exit 1; }
# ldd's output must be a real listing (a dynamically linked program loads libc), else nothing was checked.
echo "$libs" | grep -q 'libc\.so' || { echo "FAIL: ldd $bin lists no libc.so:"; echo "$libs"; exit 1; }
syms=$(nm -C "$bin") || { echo "FAIL: nm $bin failed"; exit 1; }
[ -n "$syms" ] || { echo "FAIL: nm $bin lists no symbol (stripped?): nothing to check"; exit 1; }
bad=$(echo "$libs" | grep -E "$re")
if [ -n "$bad" ]; then
  echo "FAIL: $bin loads a library matching '$re':"
  echo "$bad"
  exit 1
fi
bad=$(echo "$syms" | grep -E "$re" | head -n 10)
if [ -n "$bad" ]; then
  echo "FAIL: $bin holds symbols matching '$re' (the first 10):"
  echo "$bad"
  exit 1
fi
echo "OK: $bin loads $(echo "$libs" | wc -l) libraries and holds $(echo "$syms" | wc -l) symbols, none matching '$re'"
