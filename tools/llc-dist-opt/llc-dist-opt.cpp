//===- llc-dist-opt.cpp - mlir-opt with llc-dist's dialects and passes ----===//
#include "llcdist/InitAll.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  llcdist::registerAllDialects(registry);
  llcdist::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "llc-dist optimizer driver\n", registry));
}
