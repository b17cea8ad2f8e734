//===- llc-dist.cpp - the llc-dist driver ---------------------------------===//
//
// main: the commands and their --help. Each command is its own file:
// `compile` Compile.cpp, `info` Info.cpp, `verify` Verify.cpp, `run` Run.cpp,
// `diagnose` Diagnose.cpp, `simulate` Simulate.cpp, `plan` PlanCmd.cpp,
// `export` Export.cpp; what they share is Cli.h's.
//
// Only the driver's files exit; everything below them returns errors.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Frontend/ModelConfig.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

#ifndef LLCDIST_ALLOCATOR
#define LLCDIST_ALLOCATOR "system"
#endif
#ifndef LLCDIST_VERSION
#define LLCDIST_VERSION "dev"
#endif

using namespace llcdist::cli;

namespace {

const char *kMainHelp = R"(llc-dist: compile a transformer training step for a device mesh

USAGE
  llc-dist <command> [options]

COMMANDS
  compile MODEL   compile MODEL's training step into a plan directory (or xf IR)
  run PLAN        execute a compiled plan: train, log, save parameters,
                  checkpoint and resume (on the same or another mesh)
  export CKPT     a checkpoint as a Hugging Face model directory (--hf OUT),
                  or what it holds (--info)
  verify PLAN     check every rank's send/recv and collectives (deadlocks,
                  mismatches) without running anything
  diagnose DIR    read a hung or failed run's flight recorder dumps: which
                  rank never reached which collective, and why it is there
  simulate PLAN   predict a plan's step on a device and topology: step time,
                  MFU, bubble, exposed communication (--trace: a timeline)
  plan MODEL      choose dp/tp/pp and every other knob for N GPUs: the
                  analytic search, the best few compiled and simulated
  info MODEL      parameter count, layers and training FLOPs per token
  help [COMMAND]  show help (also: llc-dist COMMAND --help)

MODEL is a Hugging Face config.json of one of these classes:
%FAMILIES%
e.g. models/llama3-8b.json, or a .mlir file in the xf dialect.

OPTIONS
  --help, -h      show this help
  --version       print the version

Run `llc-dist-opt --help` to run single passes on .mlir files.
)";

/// kMainHelp with every family the frontend reads (ModelConfig.h's Arch, in
/// its order), wrapped at 100 columns, in the place of %FAMILIES%.
std::string mainHelp() {
  std::string list, line = " ";
  for (int a = 0; a < llcdist::kNumArchs; ++a) {
    std::string name =
        std::string(" ") + llcdist::hfArchitecture(llcdist::Arch(a)) + (a + 1 < llcdist::kNumArchs ? "," : "");
    if (line.size() + name.size() > 100) {
      list += line + "\n";
      line = " ";
    }
    line += name;
  }
  list += line;
  std::string help = kMainHelp;
  const std::string marker = "%FAMILIES%";
  help.replace(help.find(marker), marker.size(), list);
  return help;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> argv_(argv + 1, argv + argc);
  Args args(argv_);
  try {
    if (args.empty()) {
      llvm::errs() << mainHelp();
      return kExitUsage;
    }
    std::string cmd = args.next();
    if (cmd == "--help" || cmd == "-h") {
      llvm::outs() << mainHelp();
      return 0;
    }
    if (cmd == "help") {
      std::string what = args.empty() ? "" : args.next();
      llvm::outs() << (what == "compile"    ? compileHelp()
                       : what == "info"     ? kInfoHelp
                       : what == "run"      ? runHelp()
                       : what == "verify"   ? kVerifyHelp
                       : what == "diagnose" ? kDiagnoseHelp
                       : what == "simulate" ? kSimulateHelp
                       : what == "plan"     ? kPlanHelp
                       : what == "export"   ? kExportHelp
                                            : mainHelp());
      return 0;
    }
    if (cmd == "--version") {
      llvm::outs() << "llc-dist " << LLCDIST_VERSION << " (MLIR " << LLVM_VERSION_STRING << ", allocator "
                   << LLCDIST_ALLOCATOR
#if LLCDIST_HAVE_MPI
                   << ", MPI"
#else
                   << ", no MPI"
#endif
                   << ")\n";
      return 0;
    }
    if (cmd == "compile")
      return runCompile(args);
    if (cmd == "info")
      return runInfo(args);
    if (cmd == "run")
      return runRun(args);
    if (cmd == "verify")
      return runVerify(args);
    if (cmd == "diagnose")
      return runDiagnose(args);
    if (cmd == "simulate")
      return runSimulate(args);
    if (cmd == "plan")
      return runPlan(args);
    if (cmd == "export")
      return runExport(args);
    throw UsageError{"unknown command '" + cmd +
                     "' (commands: compile, run, export, verify, diagnose, simulate, plan, info, help)"};
  } catch (const UsageError &e) {
    llvm::errs() << "llc-dist: error: " << e.message << "\n"
                 << "Run 'llc-dist --help' for usage.\n";
    return kExitUsage;
  }
}
