// The run command: `llc-dist run PLAN [options]` and `llcdist-run PLAN [options]` are this one
// implementation (library llcdist_runtime_cli, src/cli/RunCommand.cpp): the help text, the flags with
// their defaults, ranges and error messages, the launcher's set-up (MPI under mpirun / srun: one
// process per rank, or per --ranks-per-process ranks), the choice of backend and devices (--backend,
// --device-ids, NCCL when every rank on a node has a GPU of its own), and the training run
// (Train.h). Each tool only names itself (error lines, usage hint) and calls runCommand().
//
// llcdist_runtime_cli links the training driver, the CPU backend, MPI when found and the CUDA backend
// when built — never LLVM or MLIR (the ctest llcdist_run.no_llvm_mlir checks the runner), so a
// compute node needs only `llcdist-run`, its CUDA libraries and the plan directory.
//
// Exit statuses: 0 ok (and --help), 1 the run failed (error on `err`: "NAME: error: Code: message"),
// 2 a usage error ("NAME: error: message", then the tool's usage hint). Under a launcher a failed
// rank ends every process of the job (MPI_Abort with status 1).
// Output: the progress, memory and checkpoint lines and --help on `out`; errors on `err`.
#pragma once

#include "llcdist/runtime/Status.h"
#include "llcdist/runtime/Train.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace llcdist::rt {

constexpr int kRunExitOk = 0;
constexpr int kRunExitError = 1;  // the run failed (bad plan, data, weights; a rank's error)
constexpr int kRunExitUsage = 2;  // a bad command line

// The tool that runs the command: its name starts error lines ("llc-dist: error: ..."), `invocation`
// is how a user starts the command (named in messages), `usageHint` is printed after a usage error.
struct RunCommandTool {
  std::string name = "llcdist-run";
  std::string invocation = "llcdist-run";
  std::string usageHint = "Run 'llcdist-run --help' for usage.";
};

// The help text (both tools print it as is): usage, the launcher and backend rules, every option.
const char* runCommandHelp();

// Every option the parser accepts, as written in the help ("--steps", ..., "--help"): the help text and
// the parser are checked against each other by RunCommandTest.
std::vector<std::string> runCommandFlags();

// The command line, parsed: the training options and what picks the backend.
struct RunCommandLine {
  bool help = false;  // --help / -h: print runCommandHelp(), nothing else is checked after it
  // The training options (RunOptions): planDir, steps, data, shuffle, seed, initFrom, saveParams,
  // logJson, the checkpoint flags, resume, traceDir, checkAsync, profile, quiet; the command's defaults
  // collectiveTimeoutSeconds = 600 (--comm-timeout; NCCL's watchdog) and flightEntries = 2000
  // (PyTorch's flight recorder). backend, communicator and localRanks are left to runCommand().
  RunOptions run;
  std::string backend;          // "cuda", "cpu", or "" (cuda when built and a GPU is visible, else cpu)
  std::vector<int> deviceIds;   // --device-ids (empty: every visible device)
  int ranksPerProcess = 1;      // --ranks-per-process
  bool deterministic = false;   // --deterministic (CudaBackendOptions::deterministic)
  bool tf32 = false;            // --tf32 (CudaBackendOptions::tf32)
};

// Parses the arguments after the command (`run` for llc-dist, none for llcdist-run). `backendEnv` is
// LLCDIST_BACKEND's value (null: unset), the default of --backend. Every error is a usage error:
// InvalidArgument whose message is the line to print.
StatusOr<RunCommandLine> parseRunCommandLine(const std::vector<std::string>& args, const char* backendEnv);

// The command: parse (LLCDIST_BACKEND from the environment), set up the launcher's communicator when a
// launcher started this process as one of several, choose the backend, run. Returns the exit status.
int runCommand(const std::vector<std::string>& args, const RunCommandTool& tool, std::ostream& out,
               std::ostream& err);

}  // namespace llcdist::rt
