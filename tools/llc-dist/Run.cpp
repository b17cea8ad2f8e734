//===- Run.cpp - llc-dist run PLAN ----------------------------------------===//
//
// The run command is the runtime's (llcdist/runtime/RunCommand.h): the same
// help, flags, launcher set-up and backend choice as the MLIR-free
// `llcdist-run`, one implementation behind both (docs/cluster.md,
// docs/gpu.md). Here only the tool's name.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/runtime/RunCommand.h"

#include <iostream>
#include <string>
#include <vector>

using namespace llcdist;

const char *llcdist::cli::runHelp() { return rt::runCommandHelp(); }

int llcdist::cli::runRun(Args &args) {
  std::vector<std::string> rest;
  while (!args.empty())
    rest.push_back(args.next());
  rt::RunCommandTool tool;
  tool.name = "llc-dist";
  tool.invocation = "llc-dist run";
  tool.usageHint = "Run 'llc-dist --help' for usage.";
  return rt::runCommand(rest, tool, std::cout, std::cerr);
}
