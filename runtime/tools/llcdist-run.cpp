// llcdist-run: the MLIR-free command-line runner of a compiled plan directory (Train.h).
//
//   llcdist-run PLAN_DIR [--steps N] [--data FILE|synthetic] [--shuffle on|off] [--seed S]
//               [--init-from W.safetensors] [--save-params OUT.safetensors] [--log-json FILE] [--trace DIR]
//               [--check-async]
//               [--collective-timeout SECONDS] [--quiet]
//
// Multi-rank plans (mesh dp × tp > 1) run every rank as a thread of this process.
//
// Exit status: 0 success, 1 the run failed (message on stderr), 2 usage error.
#include "llcdist/runtime/Train.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <unistd.h>

namespace {

const char* kUsage =
    "usage: llcdist-run PLAN_DIR [options]\n"
    "\n"
    "Runs a plan directory written by `llc-dist compile` on the CPU backend; every rank of a\n"
    "multi-rank plan (mesh dp x tp) runs as a thread of this process (reports come from rank 0).\n"
    "\n"
    "options:\n"
    "  --steps N              training steps to run (default 1; 0 = init/import and export only)\n"
    "  --data FILE|synthetic  llm.c token file, or deterministic random tokens (default synthetic)\n"
    "  --shuffle on|off       shuffle the token file's samples per epoch (default off)\n"
    "  --seed S               seed of parameter init, shuffling and synthetic data (default 0)\n"
    "  --init-from FILE       import parameters from safetensors (Hugging Face names) instead of init\n"
    "  --save-params FILE     export parameters to safetensors after the last step\n"
    "  --log-json FILE        JSON Lines log, one record per step\n"
    "  --trace DIR            write DIR/trace.json: every rank's kernel and communication intervals\n"
    "                         as a Chrome trace (open it in Perfetto; docs/architecture.md)\n"
    "  --check-async          asynchronous plans: run each started communication op only at its\n"
    "                         wait, its outputs NaN-poisoned until then (finds missing waits)\n"
    "  --collective-timeout S fail the run when a rank waits longer than S seconds in one\n"
    "                         collective (default 300; the error names the group and the missing ranks)\n"
    "  --quiet                no progress output\n"
    "  --help                 this text\n";

int usage(const std::string& msg) {
  std::fprintf(stderr, "llcdist-run: %s\n\n%s", msg.c_str(), kUsage);
  return 2;
}

bool parseInt(const std::string& s, long long min, long long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  llcdist::rt::RunOptions opts;
  bool havePlan = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--quiet") {
      opts.quiet = true;
      continue;
    }
    if (a == "--check-async") {
      opts.checkAsync = true;
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return usage("option " + a + " needs a value");
      const std::string v = argv[++i];
      long long n = 0;
      if (a == "--steps") {
        if (!parseInt(v, 0, &n)) return usage("--steps needs a non-negative integer, got '" + v + "'");
        opts.steps = n;
      } else if (a == "--seed") {
        if (!parseInt(v, 0, &n)) return usage("--seed needs a non-negative integer, got '" + v + "'");
        opts.seed = static_cast<uint64_t>(n);
      } else if (a == "--shuffle") {
        if (v != "on" && v != "off") return usage("--shuffle takes on or off, got '" + v + "'");
        opts.shuffle = v == "on";
      } else if (a == "--data") {
        opts.data = v;
      } else if (a == "--init-from") {
        opts.initFrom = v;
      } else if (a == "--save-params") {
        opts.saveParams = v;
      } else if (a == "--collective-timeout") {
        char* end = nullptr;
        const double t = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !(t > 0) || t > 1e6)
          return usage("--collective-timeout needs a positive number of seconds, got '" + v + "'");
        opts.collectiveTimeoutSeconds = t;
      } else if (a == "--log-json") {
        opts.logJson = v;
      } else if (a == "--trace") {
        opts.traceDir = v;
      } else {
        return usage("unknown option " + a);
      }
      continue;
    }
    if (havePlan) return usage("more than one plan directory ('" + opts.planDir + "' and '" + a + "')");
    opts.planDir = a;
    havePlan = true;
  }
  if (!havePlan) return usage("missing PLAN_DIR");
  opts.progressIsTty = ::isatty(STDERR_FILENO) != 0;
  const llcdist::rt::Status s = llcdist::rt::runTraining(opts, std::cerr);
  if (!s.isOk()) {
    std::fprintf(stderr, "llcdist-run: error: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
