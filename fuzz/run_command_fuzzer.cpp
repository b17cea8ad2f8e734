// The run command's command line (runtime/include/llcdist/runtime/RunCommand.h: the one parser of
// `llc-dist run` and `llcdist-run`), with LLCDIST_BACKEND's value taken from the input too.
//
// Input: the arguments, one per line; a first line "env=VALUE" sets LLCDIST_BACKEND. A bad command
// line is a Status (the tools' exit status 2); a crash, UB, an exception, or a parse that succeeds
// with values outside the ranges the help states is a finding.
#include "llcdist/runtime/RunCommand.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
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
  if (!cur.empty()) argv.push_back(cur);
  std::optional<std::string> env;
  if (!argv.empty() && argv.front().rfind("env=", 0) == 0) {
    env = argv.front().substr(4);
    argv.erase(argv.begin());
  }
  rt::StatusOr<rt::RunCommandLine> line = rt::parseRunCommandLine(argv, env ? env->c_str() : nullptr);
  if (!line.isOk() || line->help) return 0;
  // What a successful parse promises (RunCommand.h, the help's ranges).
  const rt::RunOptions& o = line->run;
  if (o.planDir.empty() || o.steps < 0 || !(o.collectiveTimeoutSeconds > 0) || o.collectiveTimeoutSeconds > 1e6 ||
      o.flightEntries < 0 || o.flightEntries > (int64_t(1) << 24) || line->ranksPerProcess < 1 ||
      line->ranksPerProcess > 1024 || (!line->backend.empty() && line->backend != "cuda" && line->backend != "cpu"))
    std::abort();
  for (int d : line->deviceIds)
    if (d < 0 || d > 1023) std::abort();
  return 0;
}
