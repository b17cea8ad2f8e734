#!/usr/bin/env bash
# Configures and builds llc-dist into build/ (Release, Ninja). Extra arguments
# go to ninja (e.g. a target name).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" "$@"
