// Training driver: load a plan, initialize or import the parameters, run N steps on a backend (every
// rank of the plan as a thread, or this process's ranks under a launcher), report progress, optionally
// log JSON Lines and export the parameters. `llcdist-run` and `llc-dist run` are thin wrappers around
// runCommand() (RunCommand.h), which sets the backend and calls runTrainingOn().
//
// Libraries and the default backend:
//  - runTrainingOn() is the driver, in llcdist_runtime_train (src/train/, the in-process communicator,
//    fault injection). That library links only the core: no CPU kernel, no BLAS (the link check
//    llcdist_runtime_train.links_without_cpu proves it), so a GPU-only program links the driver with
//    the CUDA backend alone. RunOptions::backend must be set; unset, it returns InvalidArgument.
//  - runTraining() and cpuBackendFactory() are defined in llcdist_runtime (src/train/TrainCpu.cpp),
//    the library that joins the driver and llcdist_runtime_cpu: runTraining() is runTrainingOn() with
//    RunOptions::backend defaulting to cpuBackendFactory() when unset. A program that calls
//    runTraining() must link llcdist_runtime (an undefined reference otherwise, never a silent
//    fallback); the tests and the integration tests do.
//
// Contract:
//  - Ranks: every rank of the plan's mesh (dp × tp × pp; docs/plan-format.md "Multi-rank plans" and
//    "Pipeline plans") runs the program whose `ranks` contain it (programs[0] in an SPMD plan; the
//    program of its pp stage in a pipeline plan) on its own thread with its own backend (made by
//    RunOptions::backend) and interpreter; the ranks share one in-process communicator (collectives and send/recv). A single-rank plan runs on the calling thread. If a rank fails,
//    the communicator is aborted so no rank waits forever, and the run returns the lowest rank's own
//    error ("rank r: ..." when the plan has several ranks); a collective that some members never join
//    fails after collectiveTimeoutSeconds with an error naming the collective, axis, group and members,
//    and a recv whose send never comes fails after it too, naming the peer, axis, tag and microbatch.
//  - Parameters: from the manifest's init (normal: element i of param `name` is
//    initNormal(seed, name, i) × std, i the GLOBAL index, so a sharded param's shard holds exactly the
//    values of the full tensor there; zeros; ones), or, with initFrom, from a safetensors file by
//    Hugging Face name: every param must be present with exactly its (full) shape (F32, BF16, F16 or
//    F64, converted to f32), each rank taking its shard, and the file must hold no other tensor. A
//    vocab-padded param (params[].vocab_padded) has its real rows in the file (model.vocab_size; its
//    Hugging Face shape) and its padding rows start at zero, as they do without initFrom. A rank
//    writes the params placed in its program (params[].placements), each into that placement's buffer;
//    a param placed in several programs (tied weights across stages) gets the same values in every
//    copy. A ZeRO stage-3 param (params[].zero; docs/plan-format.md "ZeRO plans") gets the rank's block
//    of its local shard, by global index as well; a padded block's rows past the shard (block_rows)
//    stay zero, whatever the init kind. The rest of the arena starts at zero (optimizer state
//    included).
//  - Data: `data` is an llm.c token file (TokenData.h: order fixed by (seed, step, global sample),
//    B = batch.micro_batch, T = batch.seq_len) or "synthetic": token t of global sample s (s as in
//    TokenData.h) is random64(streamKey(seed, "llcdist.synthetic"), s, t) mod vocab_size for t in
//    [0, T], inputs the first T and targets the last T — deterministic, any (B, M) with the same
//    global batch sees the same samples. A file token >= vocab_size is an error naming the file and
//    the token position. Rank r reads the samples of its dp coordinate (TokenData.h's order), so any
//    (B, M, dp) with one global batch sees the same data.
//  - Each step k (0-based): lr = learningRate(lr_schedule, k) (total_steps 0 -> `steps`); run the
//    actions; read the `loss` metric (required) and `grad_norm` metric (optional; NaN if absent) of the
//    reporting rank: the lowest rank of the LAST program (the last pipeline stage, which computes the
//    loss; rank 0 of an SPMD plan). Programs other than the last need neither metric.
//  - Progress (unless quiet), from the reporting rank: one line per step to `progress`, or a single
//    line rewritten with '\r' when progressIsTty, finished with '\n'.
//  - logJson: JSON Lines, one record {"step", "loss", "lr", "grad_norm", "tokens_per_s"} per step,
//    each record written whole and flushed when its step ends (so a failed run leaves the complete
//    records of the steps that finished; never a partial line). Non-finite numbers are written as null.
//    The LAST step's record has one more field, after "tokens_per_s": "memory": {"arena_bytes": [..],
//    "arena_high_water_bytes": [..], "peak_live_bytes": [..], "peak_device_bytes": [..]}, each array
//    indexed by global rank (as RunResult's vectors; peak_device_bytes: Backend::peakAllocatedBytes,
//    the arena plus the backend's workspaces and staging); the reporting rank waits for every rank's first-step measurement before it
//    writes that record (a rank that failed before measuring contributes 0).
//  - Memory: after the run (unless quiet), one line per rank to `progress`:
//      "memory: rank R arena A bytes, touched up to H, live peak L"
//    compacted to one line "memory: ranks R1-R2 arena A bytes, ..." for each run of consecutive ranks
//    with the same three numbers (an SPMD plan: one line for all ranks).
//    Nothing is printed when no step ran. A = the program's arena_bytes (exactly what the CPU backend
//    allocates), H and L as measured by the interpreter during the first step (Interpreter.h). A rank
//    whose backend holds more device memory than its arena (the CUDA backend's workspaces, staging and
//    scratch) gets one more line, "device memory: rank R peak P bytes (arena A + workspaces W)".
//  - profile (--profile): every rank records its timeline (as with traceDir); after the run, for the
//    lowest local rank of each program, its profile (Profile.h: device time per op kind and kernel
//    variant, share of the step, TFLOP/s of GEMMs and attention, idle time; the first step left out
//    when several ran) and its interpreter's kernel choices are printed to `progress`, quiet or not.
//  - bf16 params (params[].dtype "bf16"): init computes the f32 value (initNormal × std, zeros, ones) and
//    rounds it to bf16 (nearest even); --init-from rounds the file's values (converted to f32 first) the
//    same way; --save-params still writes F32, the bf16 values converted exactly.
//  - saveParams: every param by name in its Hugging Face shape (vocab-padded params: the real rows
//    only) as F32 safetensors (metadata
//    {"format": "pt"}), written atomically (temporary file + rename) after the last step; sharded params
//    are gathered from their shards (ZeRO-3 params: from the blocks of each shard). Every copy of a
//    replicated param (and every replica of a shard, or of a ZeRO-3 block of a shard; under ZeRO 1/2
//    every dp rank's whole copy as without ZeRO) must be bitwise identical across the ranks that hold
//    one, whichever program holds it (a tied param's copies on different pipeline stages included),
//    else the error names the param, the first differing rank and the element. With steps == 0 and initFrom an F32 file, the output tensors equal the input's
//    bit for bit, whatever the sharding.
//  - traceDir: every rank records its kernel and communication intervals of every step (Timeline.h);
//    at the end of a successful run (after saveParams) DIR/trace.json holds all ranks' timelines as one
//    Chrome trace (pid = rank), written atomically. DIR must be an existing, writable directory:
//    checked before any step runs (the error names --trace); a failed run writes no trace.
//  - checkAsync: the checking mode of asynchronous plans (Interpreter.h; --check-async): started ops
//    run at their waits, their outputs NaN-poisoned until then; no effect on a synchronous plan.
//  - Checkpoints and resume: see checkpointDir and resume below. Progress prints one line per
//    checkpoint (rank 0's process), with the stall of the step boundary; logJson gets a record
//    {"checkpoint": {"step", "dir", "async", "stall_s", "write_s", "commit_s"}} (no "loss" field).
//  - Determinism: the CPU backend pins OpenBLAS to one thread and collectives reduce in member order,
//    so the same options give bitwise identical losses and parameters, whatever the thread scheduling.
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt {

class Communicator;
class DumpPeers;

// Makes rank r's backend for a run (communicator: the run's, null for a one-rank run).
using BackendFactory = std::function<StatusOr<std::unique_ptr<Backend>>(int rank, Communicator* communicator)>;

struct RunOptions {
  std::string planDir;
  int64_t steps = 1;
  std::string data = "synthetic";  // llm.c token file path, or "synthetic"
  bool shuffle = false;
  uint64_t seed = 0;  // parameter init, data shuffle and synthetic data
  std::string initFrom;    // safetensors to import ("" = init from the manifest)
  std::string saveParams;  // safetensors to export ("" = none)
  std::string logJson;     // JSON Lines log ("" = none)
  // Checkpoints (Checkpoint.h, docs/checkpoints.md): with checkpointDir, after every step k + 1 that is
  // a multiple of checkpointEvery, each rank writes the shards it owns (master params, optimizer
  // state) and rank 0 commits the checkpoint atomically (keepLast > 0: only the newest keepLast stay).
  // asyncCheckpoint: the step boundary only snapshots to host memory; the write runs in the
  // background and is committed at the rank's next checkpoint or after its last step.
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  int64_t keepLast = 0;
  bool asyncCheckpoint = false;
  // Resume (Checkpoint.h): a checkpoint root (its newest checkpoint) or a step directory. Its params
  // and optimizer state replace the init (resharded to this plan's mesh), and the run continues from
  // the checkpoint's step to `steps` (the run's total): with the same plan, bitwise the run that was
  // interrupted. The model, optimizer kind, global batch, sequence length, data, shuffle, seed and LR
  // schedule must be the checkpoint's (errors name the flag). Not with initFrom.
  std::string resume;
  std::string traceDir;    // measured timeline: DIR/trace.json after the run ("" = none; Timeline.h)
  // --check-async: asynchronous ops run only at their waits, their outputs poisoned until then
  // (Interpreter.h, docs/plan-format.md "Asynchronous plans").
  bool checkAsync = false;
  // --cuda-graphs on|off: recorded steps (Interpreter.h, CommandList.h): every step after the second
  // replays the second's recorded backend calls, as one CUDA graph where the backend can. After the
  // run (unless quiet) one line says how the reporting rank's steps ran (RunResult::stepExecution).
  bool recordSteps = true;
  // --profile: print device time per op kind, its share of the step and achieved TFLOP/s for GEMMs and
  // attention (implies timing every op; with CUDA events on the GPU).
  bool profile = false;
  bool quiet = false;
  bool progressIsTty = false;  // rewrite one progress line with '\r'
  double collectiveTimeoutSeconds = 300.0;  // a rank waiting longer in one collective fails the run
  // One process per rank (mpirun, srun): the communicator the caller made for the whole world (its
  // worldSize() must be the plan's) and the ranks this process runs on it: k consecutive ranks from
  // a multiple of k, the same k in every process (--ranks-per-process; k = 1: one rank). Such a
  // process reads only its ranks' program files (every one when it runs rank 0 and saveParams is
  // set), and the processes compare the fingerprints of manifest.json and of the programs they read. The process that runs the
  // reporting rank prints the progress and memory lines and writes --log-json; the one that runs
  // rank 0 writes --save-params (the others send it their param buffers). Unset: every rank runs as
  // a thread of this process, on an in-process communicator.
  Communicator* communicator = nullptr;
  std::vector<int> localRanks;
  // Rank r's backend, made before its interpreter (communicator: the run's, null for one rank), on one
  // thread for all local ranks. runTrainingOn() needs it; runTraining() uses cpuBackendFactory() when
  // it is unset. The run command sets it from --backend (CudaBackend.h, cpuBackendFactory()). Every
  // multi-rank backend's connect() is called on its rank's thread before the rank's first work.
  BackendFactory backend;
  // The flight recorder (FlightRecorder.h, docs/cluster.md): each local rank of a multi-rank run keeps
  // its last flightEntries communication calls (0: no recorder, no watchdog). When the run fails with a
  // rank waiting in (or given up on) a call, or the watchdog fires, they are dumped to
  // flightDir/flight-rank-R.json, the other processes asked to dump theirs (dumpPeers, one process per
  // rank), and the diagnosis of the directory (Diagnose.h) printed to `errors` (nullptr: std::cerr).
  std::string flightDir = "llc-dist-flight";
  int64_t flightEntries = 0;
  DumpPeers* dumpPeers = nullptr;
  std::ostream* errors = nullptr;
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, gradNorm = 0, tokensPerSec = 0;
};

struct RunResult {
  std::vector<StepRecord> steps;
  int64_t peakDeviceBytes = 0;   // the largest peak allocation of any rank's backend
  int64_t tokensPerStep = 0;     // global_batch × seq_len
  // Memory per rank (indexed by global rank; docs/plan-format.md "Memory"): the arena the rank's backend
  // allocated (its program's arena_bytes), and what the interpreter measured during the first step: the
  // high-water mark of arena bytes the ops touched and the peak of live bytes. The measured values are 0
  // when no step ran (steps == 0).
  std::vector<int64_t> arenaBytes;
  std::vector<int64_t> arenaHighWaterBytes;
  std::vector<int64_t> measuredPeakLiveBytes;
  // Backend::peakAllocatedBytes of each rank's backend (the arena and what the backend allocated beside
  // it: workspaces, staging, scratch).
  std::vector<int64_t> devicePeakBytes;
  // How the reporting rank's steps after the first ran (Interpreter::stepExecution): "cuda graph",
  // "replayed" (the recorded list, call by call) or "op by op", and the line printed after the run.
  std::string stepExecution;
  std::string stepExecutionLine;
};

// The driver (llcdist_runtime_train): options.backend must be set.
Status runTrainingOn(const RunOptions& options, std::ostream& progress, RunResult* result = nullptr);

// runTrainingOn() with the CPU backend when options.backend is unset (llcdist_runtime, which links the
// CPU backend and BLAS; see "Libraries and the default backend" above).
Status runTraining(const RunOptions& options, std::ostream& progress, RunResult* result = nullptr);

// The CPU backend of each rank (CpuBackendOptions: the rank, the run's communicator, OpenBLAS on one
// thread) as a RunOptions::backend (llcdist_runtime).
BackendFactory cpuBackendFactory();

// Whether a launcher started this process as one of several (so the run is one process per rank):
// the variable that says so and the world size ("OMPI_COMM_WORLD_SIZE=4": mpirun of OpenMPI;
// PMI_SIZE: MPICH's and Slurm's PMI; PMIX_SIZE: PMIx; SLURM_STEP_NUM_TASKS with SLURM_PROCID: srun),
// or nullopt when none did or the world is one process.
std::optional<std::string> launcherOf();

}  // namespace llcdist::rt
