#!/usr/bin/env bash
# Installs llc-dist's build and test dependencies from Debian 12's packages.
# Idempotent: installs only what is missing; runs apt-get update only then.
# The CUDA toolkit is optional and never installed here (the build detects it).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ python3 git
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libfmt-dev nlohmann-json3-dev libgtest-dev libopenblas-dev
  python3-torch python3-numpy  # the PyTorch reference of test/reference/
  python3-venv                 # .venv-hf: transformers over Debian's torch (below)
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
if ! "$VENV/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" 2>/dev/null; then
  echo "setup-deps: installing transformers $TRANSFORMERS_VERSION into $VENV"
  rm -rf "$VENV"
  python3_sys=/usr/bin/python3
  "$python3_sys" -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION"
else
  echo "setup-deps: transformers $TRANSFORMERS_VERSION present in $VENV"
fi
