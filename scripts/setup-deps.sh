#!/usr/bin/env bash
# Installs llc-dist's build and test dependencies from Debian 12's packages.
# Idempotent: installs only what is missing; runs apt-get update only then.
# The CUDA toolkit is optional and never installed here (the build detects it).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ python3 git
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libfmt-dev nlohmann-json3-dev libgtest-dev libopenblas-dev
  libjemalloc-dev              # the tools' allocator (tools/CMakeLists.txt)
  libxxhash-dev                # checkpoint checksums (runtime/CMakeLists.txt)
  libopenmpi-dev openmpi-bin   # the MPI communicator, one process per rank (runtime/CMakeLists.txt)
  python3-torch python3-numpy  # the PyTorch reference of test/reference/
  python3-venv                 # .venv-hf: transformers over Debian's torch (below)
  clang-22 libclang-rt-22-dev  # libFuzzer + ASan/UBSan runtimes for scripts/fuzz.sh (fuzz/)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
install_packages() {
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup-deps: all ${#PACKAGES[@]} packages present"
    return
  fi
  local SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "setup-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup-deps: done"
}
install_packages

# Hugging Face transformers, for test/reference/hf_load.py (saved files must
# load into the real library). Debian 12 packages none, so it comes from PyPI
# into a virtual environment that sees Debian's torch; 4.40.2 is the last
# release that supports torch 1.13, Debian 12's version.
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv-hf"
TRANSFORMERS_VERSION=4.40.2
# A machine whose PyPI is unreachable (or whose TLS proxy it does not trust)
# gets .venv-hf.unavailable with pip's last words instead: lit then reports
# hf-load.test UNSUPPORTED with that reason, loudly; every other test runs.
if ! "$VENV/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" 2>/dev/null; then
  echo "setup-deps: installing transformers $TRANSFORMERS_VERSION into $VENV"
  rm -rf "$VENV" "$VENV.unavailable"
  log=$(mktemp)
  if /usr/bin/python3 -m venv --system-site-packages "$VENV" >"$log" 2>&1 &&
     "$VENV/bin/pip" install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION" >>"$log" 2>&1; then
    echo "setup-deps: transformers $TRANSFORMERS_VERSION installed"
  else
    rm -rf "$VENV"
    tail -3 "$log" > "$VENV.unavailable"
    echo "setup-deps: WARNING: could not install transformers $TRANSFORMERS_VERSION from PyPI;" \
         "test/reference/hf-load.test will be UNSUPPORTED. pip said:" >&2
    cat "$VENV.unavailable" >&2
  fi
  rm -f "$log"
else
  rm -f "$VENV.unavailable"
  echo "setup-deps: transformers $TRANSFORMERS_VERSION present in $VENV"
fi

# The cuDNN frontend (header-only C++: the SDPA graph API), for cuDNN fused attention in
# the CUDA backend (runtime/src/cuda/CudnnAttention.cpp, docs/gpu.md). Only where the CUDA
# toolkit (nvcc) and cuDNN (cudnn.h) are present. Its PyPI wheel ships the headers under
# include/; they go to .deps/cudnn-frontend/include (git-ignored), where
# runtime/CMakeLists.txt looks first. Nothing is vendored. Without PyPI: a warning, and the
# CUDA backend builds without cuDNN attention (the own kernel runs).
CUDNN_FRONTEND_VERSION=1.32.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FE_DIR="$ROOT/.deps/cudnn-frontend"
nvcc_bin=$(command -v nvcc || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -z "$nvcc_bin" ] && [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && nvcc_bin="$d/bin/nvcc"
done
cudnn_h=""
for d in "${CUDNN_PATH:+$CUDNN_PATH/include}" "${CUDA_HOME:+$CUDA_HOME/include}" /usr/local/cuda/include \
         /usr/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu; do
  [ -z "$cudnn_h" ] && [ -n "$d" ] && [ -f "$d/cudnn.h" ] && cudnn_h="$d/cudnn.h"
done
fe_version() {  # "1.32.0" from an unpacked include/, "" when absent
  local h="$FE_DIR/include/cudnn_frontend_version.h"
  [ -f "$h" ] || return 0
  awk '/define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION /{v[$2]=$3}
       END{print v["CUDNN_FRONTEND_MAJOR_VERSION"] "." v["CUDNN_FRONTEND_MINOR_VERSION"] "." v["CUDNN_FRONTEND_PATCH_VERSION"]}' "$h"
}
if [ -z "$nvcc_bin" ] || [ -z "$cudnn_h" ]; then
  echo "setup-deps: no CUDA toolkit with cuDNN (nvcc: ${nvcc_bin:-none}, cudnn.h: ${cudnn_h:-none}): skipping the cuDNN frontend"
elif [ "$(fe_version)" = "$CUDNN_FRONTEND_VERSION" ]; then
  echo "setup-deps: cuDNN frontend $CUDNN_FRONTEND_VERSION present in $FE_DIR"
else
  echo "setup-deps: downloading the cuDNN frontend $CUDNN_FRONTEND_VERSION headers into $FE_DIR"
  pip_cmd=()
  if /usr/bin/env python3 -m pip --version >/dev/null 2>&1; then pip_cmd=(python3 -m pip)
  elif [ -x "$VENV/bin/pip" ]; then pip_cmd=("$VENV/bin/pip"); fi
  tmp=$(mktemp -d)
  log="$tmp/pip.log"
  ok=0
  if [ ${#pip_cmd[@]} -gt 0 ]; then
    # The wheels are per Python ABI but their headers are the same: this interpreter's wheel, or
    # else the CPython 3.12 manylinux one for this machine.
    if "${pip_cmd[@]}" download -q --no-deps --disable-pip-version-check -d "$tmp/wheel" \
         "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >"$log" 2>&1 ||
       "${pip_cmd[@]}" download -q --no-deps --disable-pip-version-check -d "$tmp/wheel" --only-binary=:all: \
         --python-version 3.12 --platform "manylinux_2_28_$(uname -m)" \
         "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >>"$log" 2>&1; then
      if python3 - "$tmp/wheel" "$tmp/unpacked" >>"$log" 2>&1 <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("no include/cudnn_frontend.h in " + wheel)
    for n in names:
        z.extract(n, sys.argv[2])
PY
      then
        mkdir -p "$FE_DIR"
        rm -rf "$FE_DIR/include"
        mv "$tmp/unpacked/include" "$FE_DIR/include"
        ok=1
      fi
    fi
  else
    echo "no pip (python3 -m pip or $VENV/bin/pip)" >"$log"
  fi
  if [ "$ok" = 1 ]; then
    echo "setup-deps: cuDNN frontend $(fe_version) headers installed"
  else
    echo "setup-deps: WARNING: could not get nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION from PyPI;" \
         "the CUDA backend builds without cuDNN attention (the own attention kernel runs). pip said:" >&2
    tail -3 "$log" >&2
  fi
  rm -rf "$tmp"
fi
