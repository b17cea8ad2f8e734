// llcdist-run: the MLIR-free runner of a compiled plan directory — `llc-dist run` without the compiler,
// for machines that carry only the runtime (compute nodes: this binary, its CUDA libraries and the plan
// directory). The command itself (help, flags, launcher, backend, exit statuses) is the runtime's
// RunCommand.h, the one implementation behind both tools.
#include "llcdist/runtime/RunCommand.h"

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  llcdist::rt::RunCommandTool tool;
  tool.name = "llcdist-run";
  tool.invocation = "llcdist-run";
  tool.usageHint = "Run 'llcdist-run --help' for usage.";
  return llcdist::rt::runCommand(args, tool, std::cout, std::cerr);
}
