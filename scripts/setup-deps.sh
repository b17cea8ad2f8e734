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
