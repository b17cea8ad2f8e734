// The run command's help and command line (RunCommand.h): no launcher, no backend, so the fuzz target
// (fuzz/run_command_fuzzer.cpp) builds it alone.
#include "llcdist/runtime/RunCommand.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <unistd.h>
#include <variant>
#include <vector>

namespace llcdist::rt {

const char* runCommandHelp() {
  return R"(llc-dist run PLAN [options]
llcdist-run PLAN [options]

Executes a plan directory written by `llc-dist compile` on the GPU (CUDA
backend) or the CPU: initializes (or loads) the parameters, runs --steps
training steps over the data, prints one progress line per step, and saves
the parameters.

The two are one command: `llcdist-run` is the runner without the compiler
(no LLVM or MLIR), for machines that get only it, its CUDA libraries and the
plan directory (compute nodes); both take these options.

Alone, every rank of the plan is a thread of this process. Started by a
launcher as one process per rank (`mpirun -n WORLD llc-dist run PLAN`, or
srun), each process runs its rank over MPI: the results are the same bits.
The process of the last stage's first rank prints the progress and writes
--log-json, rank 0's writes --save-params; a launcher world that is not the
plan's, or a rank that fails, ends every process with an error
(docs/cluster.md).

Exit status: 0 ok, 1 the run failed, 2 a bad command line.

OPTIONS
  --steps N              training steps (default 1)
  --data FILE|synthetic  llm.c token file (e.g. data/corpus_train.bin) or
                         deterministic random tokens (default synthetic)
  --shuffle on|off       shuffle the samples of each epoch (default off: the
                         order of docs/plan-format.md / design.md §4)
  --seed S               seed of initialization, shuffling, synthetic data (default 0)
  --init-from W.safetensors   load parameters (Hugging Face names and layouts)
  --save-params OUT.safetensors  save parameters after the run
  --log-json FILE        JSON Lines, one record per step: step, loss, lr,
                         grad_norm, tokens_per_s (and one per checkpoint)
  --checkpoint-dir D     write checkpoints under D (docs/checkpoints.md): each
                         rank its own shards (master params, optimizer state),
                         rank 0 a manifest; committed atomically, D/latest last
  --checkpoint-every N   a checkpoint after every N-th step (with --checkpoint-dir)
  --keep-last K          keep only the newest K checkpoints (default 0: all)
  --async-checkpoint     snapshot to host memory at the step boundary and write
                         in the background while training continues
  --resume D             continue from a checkpoint (D: a --checkpoint-dir, for
                         its newest checkpoint, or one of its step-N
                         directories) to --steps (the run's total): the same
                         plan gives the uninterrupted run's bits; a plan for
                         another mesh (dp, tp, pp, schedule, ZeRO, dtype)
                         reshards the params and optimizer state
  --trace DIR            write DIR/trace.json: each rank's measured kernel and
                         communication intervals as a Chrome trace (Perfetto)
  --profile              print device time per op kind, its share of the step
                         and achieved TFLOP/s for GEMMs and attention (implies
                         timing every op with CUDA events on the GPU)
  --backend cuda|cpu     where the kernels run (default: cuda when this build
                         has the CUDA backend and a GPU is visible, else cpu).
                         With more ranks than GPUs, ranks share a device
                         (virtual ranks, collectives staged through the host);
                         one GPU per rank uses NCCL (docs/gpu.md). Without
                         the flag, LLCDIST_BACKEND=cuda|cpu sets the default
  --device-ids I,J,..    the CUDA devices the ranks of this process use, in
                         order, round-robin (default: every visible device;
                         under a launcher offset by the node-local rank)
  --deterministic        bitwise-repeatable runs on the GPU: cuDNN's
                         deterministic attention backward, cuBLASLt without
                         split-K (default off: the fastest kernels; the CPU
                         backend is always deterministic)
  --tf32                 f32 plans may use TF32 tensor cores on the GPU
                         (default off: f32 GEMMs in full f32; no effect on
                         the CPU backend)
  --ranks-per-process K  under a launcher: each process runs K consecutive
                         ranks as threads (mpirun -n WORLD/K; default 1)
  --comm-timeout S       a rank that waits longer than S seconds in one
                         collective or receive fails the run, naming the call
                         and the ranks that did not come (default 600, as
                         NCCL's watchdog)
  --flight-dir DIR       where the flight recorder dumps each rank's last
                         communication calls when a run hangs or fails
                         waiting (DIR/flight-rank-R.json; default
                         llc-dist-flight); read them with llc-dist diagnose DIR
  --flight-entries N     calls each rank keeps (default 2000; 0: no recorder)
  --cuda-graphs on|off   record the second step's backend calls once and replay
                         them at every later step: on the GPU as one CUDA
                         graph, on the CPU call by call (default on; off, or
                         with --trace, --profile or --check-async, every step
                         runs op by op; the run prints which)
  --check-async          asynchronous plans: run each started communication op
                         only at its wait, its outputs NaN-poisoned until then
                         (a missing or late wait changes the numbers or fails)
  --quiet                no progress output
  --help                 this text
)";
}

namespace {

// ---- the command line ---------------------------------------------------------------------------------
// A strict reader: every option must be known; `--name VALUE` or `--name=VALUE`; errors are the
// usage line to print (the messages of llc-dist's other commands, tools/llc-dist/Cli.h).

struct Usage {
  std::string message;
};

class Args {
public:
  explicit Args(const std::vector<std::string>& a) : args_(a) {}
  bool empty() const { return pos_ >= args_.size(); }
  const std::string& next() { return args_[pos_++]; }
  // The value of `arg` when it names `name` ("--name VALUE" or "--name=VALUE").
  std::optional<std::string> value(const std::string& arg, const std::string& name, Usage* err) {
    if (arg == name) {
      if (empty()) {
        err->message = name + " needs a value";
        return std::nullopt;
      }
      return next();
    }
    if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
    return std::nullopt;
  }

private:
  const std::vector<std::string>& args_;
  size_t pos_ = 0;
};

// Options that store one value, and options that store none (`--quiet`).
class Flags {
public:
  Flags& add(const char* name, int64_t* dst, std::optional<std::pair<int64_t, int64_t>> range = std::nullopt) {
    values_.push_back({name, dst, range});
    return *this;
  }
  Flags& add(const char* name, double* dst) {
    values_.push_back({name, dst, std::nullopt});
    return *this;
  }
  Flags& add(const char* name, std::string* dst) {
    values_.push_back({name, dst, std::nullopt});
    return *this;
  }
  Flags& on(const char* name, bool* dst) {
    switches_.push_back({name, dst});
    return *this;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const Value& v : values_) n.push_back(v.name);
    for (const Switch& s : switches_) n.push_back(s.name);
    return n;
  }

  // Whether `arg` names an option of the table (consuming its value); `err` set on a bad value.
  bool match(Args& args, const std::string& arg, Usage* err) const {
    for (const Switch& s : switches_) {
      if (arg == s.name) {
        *s.dst = true;
        return true;
      }
      if (arg.rfind(s.name + "=", 0) == 0) {
        err->message = s.name + " takes no value, got '" + arg + "'";
        return true;
      }
    }
    for (const Value& f : values_) {
      std::optional<std::string> v = args.value(arg, f.name, err);
      if (!err->message.empty()) return true;
      if (!v) continue;
      if (auto* i = std::get_if<int64_t*>(&f.dst)) {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0' || errno != 0)
          err->message = f.name + " expects an integer, got '" + *v + "'";
        else if (f.range && (x < f.range->first || x > f.range->second))
          err->message = f.name + " must be in [" + std::to_string(f.range->first) + ", " +
                         std::to_string(f.range->second) + "], got " + *v;
        else
          **i = x;
      } else if (auto* d = std::get_if<double*>(&f.dst)) {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v->c_str(), &end);
        if (v->empty() || *end != '\0' || errno != 0)
          err->message = f.name + " expects a number, got '" + *v + "'";
        else if (!std::isfinite(x))
          err->message = f.name + " expects a finite number, got '" + *v + "'";
        else
          **d = x;
      } else if (v->empty()) {
        err->message = f.name + " expects a value, got ''";
      } else {
        **std::get_if<std::string*>(&f.dst) = *v;
      }
      return true;
    }
    return false;
  }

private:
  struct Value {
    std::string name;
    std::variant<int64_t*, double*, std::string*> dst;
    std::optional<std::pair<int64_t, int64_t>> range;
  };
  struct Switch {
    std::string name;
    bool* dst;
  };
  std::vector<Value> values_;
  std::vector<Switch> switches_;
};

// The parsed values before their checks (the table writes here).
struct Raw {
  RunCommandLine line;
  int64_t seed = 0, ranksPerProcess = 1;
  std::string shuffle = "off", deviceIds, cudaGraphs = "on";
};

Flags flagTable(Raw& r) {
  RunOptions& o = r.line.run;
  Flags f;
  f.add("--steps", &o.steps)
      .add("--data", &o.data)
      .add("--shuffle", &r.shuffle)
      .add("--seed", &r.seed)
      .add("--init-from", &o.initFrom)
      .add("--save-params", &o.saveParams)
      .add("--log-json", &o.logJson)
      .add("--checkpoint-dir", &o.checkpointDir)
      .add("--checkpoint-every", &o.checkpointEvery, std::make_pair(int64_t(1), int64_t(1) << 40))
      .add("--keep-last", &o.keepLast, std::make_pair(int64_t(1), int64_t(1) << 20))
      .add("--resume", &o.resume)
      .add("--trace", &o.traceDir)
      .add("--comm-timeout", &o.collectiveTimeoutSeconds)
      .add("--flight-dir", &o.flightDir)
      .add("--flight-entries", &o.flightEntries)
      .add("--ranks-per-process", &r.ranksPerProcess)
      .add("--backend", &r.line.backend)
      .add("--device-ids", &r.deviceIds)
      .add("--cuda-graphs", &r.cudaGraphs)
      .on("--quiet", &o.quiet)
      .on("--check-async", &o.checkAsync)
      .on("--async-checkpoint", &o.asyncCheckpoint)
      .on("--profile", &o.profile)
      .on("--deterministic", &r.line.deterministic)
      .on("--tf32", &r.line.tf32);
  return f;
}

Status usage(std::string message) { return Status::invalidArgument(std::move(message)); }

}  // namespace

std::vector<std::string> runCommandFlags() {
  Raw r;
  std::vector<std::string> names = flagTable(r).names();
  names.push_back("--help");
  return names;
}

StatusOr<RunCommandLine> parseRunCommandLine(const std::vector<std::string>& argv, const char* backendEnv) {
  Raw r;
  RunOptions& o = r.line.run;
  o.collectiveTimeoutSeconds = 600;  // NCCL's watchdog default
  o.flightEntries = 2000;            // PyTorch's flight recorder's default
  const Flags flags = flagTable(r);
  Args args(argv);
  while (!args.empty()) {
    const std::string a = args.next();
    if (a == "--help" || a == "-h") {
      r.line.help = true;
      return r.line;
    }
    Usage err;
    if (flags.match(args, a, &err)) {
      if (!err.message.empty()) return usage(err.message);
      continue;
    }
    if (a == "--collective-timeout" || a.rfind("--collective-timeout=", 0) == 0)
      return usage("--collective-timeout is now --comm-timeout (the same seconds; default 600)");
    if (a.rfind("-", 0) == 0) return usage("run: unknown option '" + a + "'");
    if (!o.planDir.empty())
      return usage("run: more than one PLAN given ('" + o.planDir + "', '" + a + "')");
    o.planDir = a;
  }
  if (o.planDir.empty()) return usage("run: missing PLAN (a directory written by llc-dist compile -o)");
  if (o.steps < 0) return usage("--steps must be >= 0");
  if (!(o.collectiveTimeoutSeconds > 0) || o.collectiveTimeoutSeconds > 1e6)
    return usage("--comm-timeout must be in (0, 1e6] seconds");
  if (o.flightEntries < 0 || o.flightEntries > (int64_t(1) << 24))
    return usage("--flight-entries must be in [0, 16777216]");
  if (r.ranksPerProcess < 1 || r.ranksPerProcess > 1024) return usage("--ranks-per-process must be in [1, 1024]");
  if (o.flightDir.empty()) return usage("--flight-dir needs a directory");
  if (r.shuffle != "on" && r.shuffle != "off") return usage("--shuffle must be on or off, got '" + r.shuffle + "'");
  if (r.cudaGraphs != "on" && r.cudaGraphs != "off")
    return usage("--cuda-graphs must be on or off, got '" + r.cudaGraphs + "'");
  std::string& backend = r.line.backend;
  if (backend.empty() && backendEnv) {  // the environment's default (the test suites pin the CPU)
    backend = backendEnv;
    if (backend != "cuda" && backend != "cpu")
      return usage("LLCDIST_BACKEND must be cuda or cpu, got '" + backend + "'");
  }
  if (!backend.empty() && backend != "cuda" && backend != "cpu")
    return usage("--backend must be cuda or cpu, got '" + backend + "'");
  if (!r.deviceIds.empty()) {
    for (size_t begin = 0; begin <= r.deviceIds.size();) {  // every item, empty ones too
      size_t comma = r.deviceIds.find(',', begin);
      if (comma == std::string::npos) comma = r.deviceIds.size();
      const std::string item = r.deviceIds.substr(begin, comma - begin);
      begin = comma + 1;
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 0 || v > 1023)
        return usage("--device-ids: '" + item + "' is not a device ordinal (a comma-separated list such as 0,1,2,3)");
      r.line.deviceIds.push_back(int(v));
    }
    if (backend == "cpu") return usage("--device-ids: only with the CUDA backend (not with --backend cpu)");
  }
  o.shuffle = r.shuffle == "on";
  o.recordSteps = r.cudaGraphs == "on";
  o.seed = static_cast<uint64_t>(r.seed);
  r.line.ranksPerProcess = int(r.ranksPerProcess);
  return r.line;
}

}  // namespace llcdist::rt
