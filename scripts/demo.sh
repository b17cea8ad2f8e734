#!/usr/bin/env bash
# THE main job: installs dependencies, builds, then for tiny GPT-2 and tiny
# Llama compiles the training step into a plan and trains it on the shipped
# corpus, on the GPU when one is visible (and the build found CUDA), else on
# the CPU; then trains tiny Llama again on an 8-rank mesh (data + tensor +
# sequence + pipeline parallelism, 1F1B), which reproduces the single-device
# run; and, where MPI is installed, the same 8-rank plan as 8 processes under
# mpirun, byte for byte (the 8-rank runs on the CPU backend, whose bits the
# comparison is about; scripts/test-gpu.sh checks the GPU against it).
#   STEPS=200 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-100}
bash scripts/setup-deps.sh
bash scripts/build.sh
BIN=${BUILD_DIR:-build}/bin
OUT=${OUT_DIR:-out/demo}
rm -rf "$OUT" && mkdir -p "$OUT"
for model in tiny-gpt2 tiny-llama; do
  echo
  echo "== $model: llc-dist info"
  "$BIN/llc-dist" info "models/$model.json" --seq-len 64
  echo
  echo "== $model: llc-dist compile (IR after every pass in $OUT/$model/ir/)"
  "$BIN/llc-dist" compile "models/$model.json" --seq-len 64 --micro-batch 4 \
    --global-batch 8 --lr 3e-3 --lr-schedule cosine --warmup 10 --grad-clip 1.0 \
    --dump-ir-dir "$OUT/$model/ir" -o "$OUT/$model/plan"
  echo
  echo "== $model: llc-dist run ($STEPS steps on data/corpus_train.bin)"
  "$BIN/llc-dist" run "$OUT/$model/plan" --steps "$STEPS" --data data/corpus_train.bin \
    --log-json "$OUT/$model/log.jsonl" --save-params "$OUT/$model/params.safetensors"
done
echo
echo "== tiny-llama on 8 ranks: --mesh dp=2,tp=2,pp=2 --sequence-parallel --schedule 1f1b (threads, in-process communicator, CPU)"
"$BIN/llc-dist" compile models/tiny-llama.json --mesh dp=2,tp=2,pp=2 --sequence-parallel \
  --schedule 1f1b --seq-len 64 --micro-batch 1 --global-batch 8 --lr 3e-3 --lr-schedule cosine \
  --warmup 10 --grad-clip 1.0 --topology topologies/dgx-a100.json -o "$OUT/tiny-llama-3d/plan"
"$BIN/llc-dist" verify "$OUT/tiny-llama-3d/plan"
"$BIN/llc-dist" run "$OUT/tiny-llama-3d/plan" --steps "$STEPS" --data data/corpus_train.bin \
  --log-json "$OUT/tiny-llama-3d/log.jsonl" --save-params "$OUT/tiny-llama-3d/params.safetensors" \
  --backend cpu
models="tiny-gpt2 tiny-llama tiny-llama-3d"
# The same 8-rank plan as 8 processes (docs/cluster.md), where MPI is there: the same losses.
if command -v mpirun >/dev/null && "$BIN/llc-dist" --version | grep -q ', MPI)'; then
  echo
  echo "== tiny-llama on 8 ranks again: mpirun -n 8 llc-dist run (one process per rank, MPI)"
  mkdir -p "$OUT/tiny-llama-3d-mpi"
  # (as root too, e.g. in a container; 8 processes on however many cores)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    mpirun -n 8 "$BIN/llc-dist" run "$OUT/tiny-llama-3d/plan" --steps "$STEPS" \
    --data data/corpus_train.bin --log-json "$OUT/tiny-llama-3d-mpi/log.jsonl" \
    --save-params "$OUT/tiny-llama-3d-mpi/params.safetensors" --backend cpu < /dev/null
  models="$models tiny-llama-3d-mpi"
  if cmp -s "$OUT/tiny-llama-3d/params.safetensors" "$OUT/tiny-llama-3d-mpi/params.safetensors"; then
    echo "8 processes: the same parameters as 8 threads, byte for byte"
  else
    echo "8 processes: the parameters differ from the 8 threads' run" >&2
    exit 1
  fi
fi
echo
echo "Loss at the first and last step (ln 256 = 5.545 at initialization):"
for model in $models; do
  first=$(head -n1 "$OUT/$model/log.jsonl" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
  last=$(tail -n1 "$OUT/$model/log.jsonl" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
  echo "  $model: $first -> $last  (parameters: $OUT/$model/params.safetensors)"
done
