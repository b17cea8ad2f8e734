// Training driver: load a plan, initialize or import the parameters, run N steps on the CPU backend,
// report progress, optionally log JSON Lines and export the parameters. `llcdist-run` and
// `llc-dist run` are thin command-line wrappers around runTraining().
//
// Contract:
//  - The plan must be single-rank (mesh dp × tp × pp = 1, one program); multi-rank plans are refused
//    with an error until a communicator-backed backend exists.
//  - Parameters: from the manifest's init (normal: element i of param `name` is
//    initNormal(seed, name, i) × std; zeros; ones), or, with initFrom, from a safetensors file by
//    Hugging Face name: every param must be present with exactly its shape (F32, BF16, F16 or F64,
//    converted to f32), and the file must hold no other tensor. The rest of the arena starts at zero
//    (optimizer state included).
//  - Data: `data` is an llm.c token file (TokenData.h: order fixed by (seed, step, global sample),
//    B = batch.micro_batch, T = batch.seq_len) or "synthetic": token t of global sample s (s as in
//    TokenData.h) is random64(streamKey(seed, "llcdist.synthetic"), s, t) mod vocab_size for t in
//    [0, T], inputs the first T and targets the last T — deterministic, any (B, M) with the same
//    global batch sees the same samples. A file token >= vocab_size is an error naming the file and
//    the token position.
//  - Each step k (0-based): lr = learningRate(lr_schedule, k) (total_steps 0 -> `steps`); run the
//    actions; read the `loss` metric (required) and the `grad_norm` metric (optional; NaN if absent).
//  - Progress (unless quiet): one line per step to `progress`, or a single line rewritten with '\r'
//    when progressIsTty, finished with '\n'.
//  - logJson: JSON Lines, one record {"step", "loss", "lr", "grad_norm", "tokens_per_s"} per step,
//    each record written whole and flushed when its step ends (so a failed run leaves the complete
//    records of the steps that finished; never a partial line). Non-finite numbers are written as null.
//  - saveParams: every param by name in its Hugging Face shape as F32 safetensors (metadata
//    {"format": "pt"}), written atomically (temporary file + rename) after the last step. With
//    steps == 0 and initFrom an F32 file, the output tensors equal the input's bit for bit.
//  - Determinism: the CPU backend pins OpenBLAS to one thread, so the same options give bitwise
//    identical losses and parameters.
#pragma once

#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt {

struct RunOptions {
  std::string planDir;
  int64_t steps = 1;
  std::string data = "synthetic";  // llm.c token file path, or "synthetic"
  bool shuffle = false;
  uint64_t seed = 0;  // parameter init, data shuffle and synthetic data
  std::string initFrom;    // safetensors to import ("" = init from the manifest)
  std::string saveParams;  // safetensors to export ("" = none)
  std::string logJson;     // JSON Lines log ("" = none)
  bool quiet = false;
  bool progressIsTty = false;  // rewrite one progress line with '\r'
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, gradNorm = 0, tokensPerSec = 0;
};

struct RunResult {
  std::vector<StepRecord> steps;
  int64_t peakDeviceBytes = 0;   // the backend's peak allocation
  int64_t tokensPerStep = 0;     // global_batch × seq_len
};

Status runTraining(const RunOptions& options, std::ostream& progress, RunResult* result = nullptr);

}  // namespace llcdist::rt
