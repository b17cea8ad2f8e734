#!/usr/bin/env bash
# THE main job: installs dependencies, builds, and compiles a shipped model for
# a small mesh, showing the model summary and the compiled IR.
#   MODEL=models/tiny-gpt2.json MESH=dp=2,tp=2 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/tiny-llama.json}
MESH=${MESH:-dp=2,tp=2}
bash scripts/setup-deps.sh
bash scripts/build.sh
BIN=${BUILD_DIR:-build}/bin
OUT=${OUT_DIR:-out/demo}
echo
echo "== llc-dist info $MODEL"
"$BIN/llc-dist" info "$MODEL"
echo
echo "== llc-dist compile $MODEL --mesh $MESH --dump-ir-dir $OUT/ir -o $OUT/model.xf.mlir"
rm -rf "$OUT" && mkdir -p "$OUT"
"$BIN/llc-dist" compile "$MODEL" --mesh "$MESH" --seq-len 32 --micro-batch 2 \
  --dump-ir-dir "$OUT/ir" -o "$OUT/model.xf.mlir"
echo
echo "== IR after the last pass ($OUT/model.xf.mlir)"
cat "$OUT/model.xf.mlir"
