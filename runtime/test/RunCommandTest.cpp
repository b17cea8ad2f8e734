// The run command of `llc-dist run` and `llcdist-run` (RunCommand.h): defaults, every flag and its
// error message, the new --profile / --deterministic / --tf32, LLCDIST_BACKEND, the help text against
// the parser's table, and the exit statuses and error lines of runCommand().
#include "llcdist/runtime/RunCommand.h"

#include "llcdist/runtime/CudaBackend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace llcdist::rt {
namespace {

RunCommandLine parseOk(const std::vector<std::string>& args, const char* env = nullptr) {
  StatusOr<RunCommandLine> r = parseRunCommandLine(args, env);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? std::move(r).value() : RunCommandLine{};
}

std::string parseError(const std::vector<std::string>& args, const char* env = nullptr) {
  StatusOr<RunCommandLine> r = parseRunCommandLine(args, env);
  if (r.isOk()) return "(parsed)";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(RunCommandTest, Defaults) {
  const RunCommandLine l = parseOk({"plan"});
  EXPECT_FALSE(l.help);
  EXPECT_EQ(l.run.planDir, "plan");
  EXPECT_EQ(l.run.steps, 1);
  EXPECT_EQ(l.run.data, "synthetic");
  EXPECT_FALSE(l.run.shuffle);
  EXPECT_EQ(l.run.seed, 0u);
  EXPECT_EQ(l.run.collectiveTimeoutSeconds, 600.0);  // NCCL's watchdog
  EXPECT_EQ(l.run.flightEntries, 2000);               // PyTorch's flight recorder
  EXPECT_EQ(l.run.flightDir, "llc-dist-flight");
  EXPECT_FALSE(l.run.quiet || l.run.checkAsync || l.run.asyncCheckpoint || l.run.profile);
  EXPECT_FALSE(l.deterministic);
  EXPECT_FALSE(l.tf32);
  EXPECT_EQ(l.backend, "");
  EXPECT_TRUE(l.deviceIds.empty());
  EXPECT_EQ(l.ranksPerProcess, 1);
  EXPECT_FALSE(l.run.backend);  // runCommand() sets it
}

TEST(RunCommandTest, EveryFlag) {
  const RunCommandLine l = parseOk(
      {"--steps", "7", "--data=d.bin", "--shuffle", "on", "--seed", "-3", "--init-from", "w.safetensors",
       "--save-params", "o.safetensors", "--log-json", "l.jsonl", "--checkpoint-dir", "ck", "--checkpoint-every",
       "2", "--keep-last", "3", "--async-checkpoint", "--trace", "tr", "--profile", "--backend", "cuda",
       "--device-ids", "3,1", "--deterministic", "--tf32", "--ranks-per-process", "2", "--comm-timeout", "1.5",
       "--flight-dir", "fl", "--flight-entries", "0", "--check-async", "--quiet", "plan"});
  EXPECT_EQ(l.run.planDir, "plan");
  EXPECT_EQ(l.run.steps, 7);
  EXPECT_EQ(l.run.data, "d.bin");
  EXPECT_TRUE(l.run.shuffle);
  EXPECT_EQ(l.run.seed, uint64_t(int64_t(-3)));  // as llc-dist run always took it
  EXPECT_EQ(l.run.initFrom, "w.safetensors");
  EXPECT_EQ(l.run.saveParams, "o.safetensors");
  EXPECT_EQ(l.run.logJson, "l.jsonl");
  EXPECT_EQ(l.run.checkpointDir, "ck");
  EXPECT_EQ(l.run.checkpointEvery, 2);
  EXPECT_EQ(l.run.keepLast, 3);
  EXPECT_TRUE(l.run.asyncCheckpoint);
  EXPECT_EQ(l.run.traceDir, "tr");
  EXPECT_TRUE(l.run.profile);
  EXPECT_EQ(l.backend, "cuda");
  EXPECT_EQ(l.deviceIds, (std::vector<int>{3, 1}));
  EXPECT_TRUE(l.deterministic);
  EXPECT_TRUE(l.tf32);
  EXPECT_EQ(l.ranksPerProcess, 2);
  EXPECT_EQ(l.run.collectiveTimeoutSeconds, 1.5);
  EXPECT_EQ(l.run.flightDir, "fl");
  EXPECT_EQ(l.run.flightEntries, 0);
  EXPECT_TRUE(l.run.checkAsync);
  EXPECT_TRUE(l.run.quiet);
}

TEST(RunCommandTest, UsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "run: missing PLAN (a directory written by llc-dist compile -o)"},
      {{"a", "b"}, "run: more than one PLAN given ('a', 'b')"},
      {{"plan", "--bogus"}, "run: unknown option '--bogus'"},
      {{"plan", "--steps"}, "--steps needs a value"},
      {{"plan", "--steps", "x"}, "--steps expects an integer, got 'x'"},
      {{"plan", "--steps", "-1"}, "--steps must be >= 0"},
      {{"plan", "--comm-timeout", "0"}, "--comm-timeout must be in (0, 1e6] seconds"},
      {{"plan", "--comm-timeout", "inf"}, "--comm-timeout expects a finite number, got 'inf'"},
      {{"plan", "--comm-timeout", "soon"}, "--comm-timeout expects a number, got 'soon'"},
      {{"plan", "--collective-timeout", "5"}, "--collective-timeout is now --comm-timeout (the same seconds; default 600)"},
      {{"plan", "--checkpoint-every", "0"}, "--checkpoint-every must be in [1, 1099511627776], got 0"},
      {{"plan", "--keep-last", "0"}, "--keep-last must be in [1, 1048576], got 0"},
      {{"plan", "--flight-entries", "-1"}, "--flight-entries must be in [0, 16777216]"},
      {{"plan", "--ranks-per-process", "0"}, "--ranks-per-process must be in [1, 1024]"},
      {{"plan", "--flight-dir="}, "--flight-dir expects a value, got ''"},
      {{"plan", "--shuffle", "maybe"}, "--shuffle must be on or off, got 'maybe'"},
      {{"plan", "--backend", "tpu"}, "--backend must be cuda or cpu, got 'tpu'"},
      {{"plan", "--device-ids", "0,x"}, "--device-ids: 'x' is not a device ordinal (a comma-separated list such as 0,1,2,3)"},
      {{"plan", "--device-ids", "0,"}, "--device-ids: '' is not a device ordinal (a comma-separated list such as 0,1,2,3)"},
      {{"plan", "--backend", "cpu", "--device-ids", "0"}, "--device-ids: only with the CUDA backend (not with --backend cpu)"},
      // The switches take no value.
      {{"plan", "--profile=1"}, "--profile takes no value, got '--profile=1'"},
      {{"plan", "--deterministic=yes"}, "--deterministic takes no value, got '--deterministic=yes'"},
      {{"plan", "--tf32=on"}, "--tf32 takes no value, got '--tf32=on'"},
      {{"plan", "--quiet=1"}, "--quiet takes no value, got '--quiet=1'"},
      {{"plan", "--tf-32"}, "run: unknown option '--tf-32'"},
  };
  for (const auto& [args, want] : cases) EXPECT_EQ(parseError(args), want) << testing::PrintToString(args);
}

TEST(RunCommandTest, BackendFromTheEnvironment) {
  EXPECT_EQ(parseOk({"plan"}, "cpu").backend, "cpu");
  EXPECT_EQ(parseOk({"plan"}, "cuda").backend, "cuda");
  EXPECT_EQ(parseOk({"plan", "--backend", "cuda"}, "cpu").backend, "cuda");  // the flag wins
  EXPECT_EQ(parseOk({"plan", "--backend", "cpu"}, "tpu").backend, "cpu");    // an unused bad default
  EXPECT_EQ(parseError({"plan"}, "tpu"), "LLCDIST_BACKEND must be cuda or cpu, got 'tpu'");
  EXPECT_EQ(parseError({"plan", "--device-ids", "0"}, "cpu"),
            "--device-ids: only with the CUDA backend (not with --backend cpu)");
  // --deterministic and --tf32 are permissions the CPU backend meets (always f32, always deterministic).
  const RunCommandLine l = parseOk({"plan", "--deterministic", "--tf32"}, "cpu");
  EXPECT_TRUE(l.deterministic && l.tf32);
}

TEST(RunCommandTest, Help) {
  EXPECT_TRUE(parseOk({"--help"}).help);
  EXPECT_TRUE(parseOk({"plan", "-h"}).help);
  EXPECT_TRUE(parseOk({"plan", "--help", "--bogus"}).help);  // nothing is checked after --help
  EXPECT_EQ(parseError({"--steps", "x", "--help"}), "--steps expects an integer, got 'x'");
}

// Each option of the help's OPTIONS section is one the parser accepts, and each option the parser
// accepts has its line there: the help cannot drift from the command.
TEST(RunCommandTest, HelpListsExactlyTheParsersFlags) {
  const std::string help = runCommandHelp();
  const size_t options = help.find("\nOPTIONS\n");
  ASSERT_NE(options, std::string::npos);
  std::set<std::string> listed;
  std::istringstream in(help.substr(options));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  --", 0) != 0) continue;
    const size_t end = line.find(' ', 2);
    listed.insert(line.substr(2, end == std::string::npos ? std::string::npos : end - 2));
  }
  const std::vector<std::string> flags = runCommandFlags();
  const std::set<std::string> known(flags.begin(), flags.end());
  EXPECT_EQ(known.size(), flags.size()) << "a flag is in the parser's table twice";
  EXPECT_EQ(listed, known);
  for (const char* added : {"--profile", "--deterministic", "--tf32", "--comm-timeout", "--backend", "--device-ids"})
    EXPECT_TRUE(known.count(added)) << added;
  EXPECT_NE(help.find("llc-dist run PLAN [options]\nllcdist-run PLAN [options]\n"), std::string::npos);
}

TEST(RunCommandTest, ExitStatusesAndErrorLines) {
  RunCommandTool tool;
  tool.name = "tool";
  tool.invocation = "tool run";
  tool.usageHint = "Run 'tool --help' for usage.";
  {
    std::ostringstream out, err;
    EXPECT_EQ(runCommand({"--help"}, tool, out, err), kRunExitOk);
    EXPECT_EQ(out.str(), runCommandHelp());
    EXPECT_EQ(err.str(), "");
  }
  {
    std::ostringstream out, err;
    EXPECT_EQ(runCommand({"plan", "--steps", "x"}, tool, out, err), kRunExitUsage);
    EXPECT_EQ(err.str(), "tool: error: --steps expects an integer, got 'x'\nRun 'tool --help' for usage.\n");
    EXPECT_EQ(out.str(), "");
  }
  {
    std::ostringstream out, err;
    EXPECT_EQ(runCommand({"/nonexistent-plan-dir", "--backend", "cpu", "--quiet"}, tool, out, err), kRunExitError);
    EXPECT_EQ(err.str().rfind("tool: error: ", 0), 0u) << err.str();
    EXPECT_NE(err.str().find("nonexistent-plan-dir"), std::string::npos) << err.str();
  }
  {
    std::ostringstream out, err;
    EXPECT_EQ(runCommand({"/nonexistent-plan-dir", "--backend", "cpu", "--ranks-per-process", "2"}, tool, out, err),
              kRunExitError);
    EXPECT_NE(err.str().find("tool: error: --ranks-per-process 2: no launcher started this process"), std::string::npos)
        << err.str();
  }
}

// Without a GPU (or without the CUDA backend in the build), --backend cuda is a run error naming why.
TEST(RunCommandTest, CudaWithoutAGpuIsAnError) {
#if LLCDIST_HAVE_CUDA
  if (cudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  const std::string want = "tool: error: --backend cuda: ";
#else
  const std::string want = "tool: error: --backend cuda: this tool was built without the CUDA backend";
#endif
  RunCommandTool tool;
  tool.name = "tool";
  std::ostringstream out, err;
  EXPECT_EQ(runCommand({"/nonexistent-plan-dir", "--backend", "cuda"}, tool, out, err), kRunExitError);
  EXPECT_EQ(err.str().rfind(want, 0), 0u) << err.str();
}

TEST(RunCommandTest, CudaBackendOptionsDefaults) {
  const CudaBackendOptions o;
  EXPECT_FALSE(o.deterministic);  // the fast kernels, as PyTorch; --deterministic asks for repeatable bits
  EXPECT_FALSE(o.tf32);           // f32 GEMMs in full f32; --tf32 allows TF32 tensor cores
}

}  // namespace
}  // namespace llcdist::rt
