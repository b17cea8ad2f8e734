//===- XFDialect.cpp - the xf dialect -------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

using namespace mlir;
using namespace llcdist::xf;

#include "llcdist/Dialect/XF/IR/XFDialect.cpp.inc"

void XFDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "llcdist/Dialect/XF/IR/XFOps.cpp.inc"
      >();
}
