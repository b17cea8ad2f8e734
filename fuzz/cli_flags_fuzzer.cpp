// llc-dist's command-line reader (tools/llc-dist/Cli.h: Args, ValueFlags, parseInt, parseDouble),
// with a table of every kind of flag, and the values compile hands to parseMeshSpec,
// parseRankOrder and parseByteSize.
//
// Input: the arguments, one per line. A bad command line is a UsageError (the driver's exit status
// 2); anything else escaping, a crash or UB is a finding.
#include "Cli.h"

#include "llcdist/Support/Device.h"
#include "llcdist/Support/MeshSpec.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

using namespace llcdist;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> argv;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      argv.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(char(data[i]));
    }
  }
  if (!cur.empty())
    argv.push_back(cur);

  int64_t steps = 0, seqLen = 0, microBatch = 1;
  double lr = 0, weightDecay = -1;
  std::string device, budget;
  cli::ValueFlags flags;
  flags.add("--steps", &steps)
      .add("--seq-len", &seqLen, 1, int64_t(1) << 24)
      .add("--micro-batch", &microBatch, 1, int64_t(1) << 24)
      .add("--lr", &lr)
      .add("--weight-decay", &weightDecay, 0, 1e6)
      .add("--device", &device)
      .add("--memory-budget", &budget);
  MeshSpec mesh;
  cli::Args args(argv);
  try {
    while (!args.empty()) {
      std::string a = args.next();
      if (auto v = args.value(a, "--mesh")) {
        if (auto err = parseMeshSpec(*v, mesh))
          throw cli::UsageError{*err};
        (void)mesh.worldSize();
      } else if (auto v = args.value(a, "--rank-order")) {
        if (auto err = parseRankOrder(*v, mesh))
          throw cli::UsageError{*err};
      } else if (flags.match(args, a)) {
        if (flags.given("--memory-budget") && !budget.empty())
          (void)parseByteSize(budget);
      } else if (a.rfind("-", 0) == 0 && a != "-") {
        throw cli::UsageError{"unknown option '" + a + "'"};
      }
    }
  } catch (const cli::UsageError&) {
  }
  return 0;
}
