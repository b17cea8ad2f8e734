//===- XFOps.h - xf operations ---------------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_IR_XFOPS_H
#define LLCDIST_DIALECT_XF_IR_XFOPS_H

#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Dialect/XF/IR/XFInterfaces.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llcdist/Dialect/XF/IR/XFEnums.h.inc"

#define GET_OP_CLASSES
#include "llcdist/Dialect/XF/IR/XFOps.h.inc"

#endif
