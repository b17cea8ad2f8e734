//===- PlanOps.cpp - the plan dialect -------------------------------------===//
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace llcdist::plan;

#include "llcdist/Dialect/Plan/IR/PlanDialect.cpp.inc"

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "llcdist/Dialect/Plan/IR/PlanOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "llcdist/Dialect/Plan/IR/PlanOps.cpp.inc"

namespace {
/// Checks that `ref` names a plan.buffer of the enclosing program.
LogicalResult checkBuffer(Operation *op, SymbolTableCollection &symbols,
                          FlatSymbolRefAttr ref, StringRef role) {
  if (!symbols.lookupNearestSymbolFrom<BufferOp>(op, ref))
    return op->emitOpError() << role << " " << ref
                             << " does not name a plan.buffer";
  return success();
}
} // namespace

int64_t BufferOp::getNumBytes() {
  auto t = getTensorType();
  return t.getNumElements() * (t.getElementTypeBitWidth() / 8);
}

LogicalResult BufferOp::verify() {
  auto t = dyn_cast<RankedTensorType>(getType());
  if (!t || !t.hasStaticShape())
    return emitOpError("type must be a statically shaped tensor, got ")
           << getType();
  if (!t.getElementType().isF32() && !t.getElementType().isBF16() &&
      !t.getElementType().isInteger(32))
    return emitOpError("element type must be f32, bf16 or i32 (what the runtime "
                       "stores), got ")
           << t.getElementType();
  StringRef k = getKind();
  if (k != "param" && k != "grad" && k != "optimizer_state" &&
      k != "activation" && k != "input" && k != "metric" && k != "scratch")
    return emitOpError("unknown buffer kind '") << k << "'";
  if (auto off = getOffset()) {
    if (*off < 0 || *off % 64 != 0)
      return emitOpError("offset must be a non-negative multiple of 64, got ")
             << *off;
    if (auto prog = (*this)->getParentOfType<ProgramOp>())
      if (auto arena = prog.getArenaBytes();
          arena && *off + getNumBytes() > int64_t(*arena))
        return emitOpError("ends at byte ")
               << *off + getNumBytes() << ", past the arena's " << *arena;
  }
  return success();
}

LogicalResult ParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(checkBuffer(*this, symbols, getValueAttr(), "value")) ||
      failed(checkBuffer(*this, symbols, getGradAttr(), "grad")))
    return failure();
  for (Attribute a : getState()) {
    auto ref = dyn_cast<FlatSymbolRefAttr>(a);
    if (!ref)
      return emitOpError("state must list buffer symbols");
    if (failed(checkBuffer(*this, symbols, ref, "state")))
      return failure();
  }
  return success();
}

LogicalResult KernelOp::verify() {
  namespace schema = llcdist::rt::schema;
  std::string_view name(getKernel().data(), getKernel().size());
  auto kind = schema::parseOpKind(name);
  if (!kind)
    return emitOpError("unknown runtime kernel '") << getKernel() << "'";
  const schema::OpSpec &spec = schema::opSpec(*kind);
  for (NamedAttribute arg : getArgs()) {
    StringRef role = arg.getName().getValue();
    int idx = schema::argIndex(*kind, std::string_view(role.data(), role.size()));
    if (idx < 0)
      return emitOpError("kernel '") << getKernel() << "' has no argument '"
                                     << role << "'";
    bool list = schema::isListArity(spec.args[idx].arity);
    if (list != isa<ArrayAttr>(arg.getValue()))
      return emitOpError("argument '")
             << role << "' of '" << getKernel() << "' must be "
             << (list ? "a list of buffers" : "one buffer");
  }
  for (size_t i = 0; i < spec.numArgs; ++i) {
    const schema::ArgSpec &a = spec.args[i];
    if (!schema::isOptionalArity(a.arity) &&
        !getArgs().get(StringRef(a.role.data(), a.role.size())))
      return emitOpError("kernel '") << getKernel() << "' needs argument '"
                                     << StringRef(a.role.data(), a.role.size())
                                     << "'";
  }
  for (size_t i = 0; i < spec.numAttrs; ++i) {
    const schema::AttrSpec &a = spec.attrs[i];
    if (a.required && !getParams().get(StringRef(a.name.data(), a.name.size())))
      return emitOpError("kernel '") << getKernel() << "' needs attribute '"
                                     << StringRef(a.name.data(), a.name.size())
                                     << "'";
  }
  return success();
}

LogicalResult KernelOp::verifySymbolUses(SymbolTableCollection &symbols) {
  for (NamedAttribute arg : getArgs()) {
    auto check = [&](Attribute a) -> LogicalResult {
      auto ref = dyn_cast<FlatSymbolRefAttr>(a);
      if (!ref)
        return emitOpError("argument '")
               << arg.getName().getValue()
               << "' must be a buffer symbol or a list of them";
      return checkBuffer(*this, symbols, ref,
                         ("argument '" + arg.getName().getValue() + "'").str());
    };
    if (auto list = dyn_cast<ArrayAttr>(arg.getValue())) {
      for (Attribute a : list)
        if (failed(check(a)))
          return failure();
    } else if (failed(check(arg.getValue()))) {
      return failure();
    }
  }
  return success();
}

LogicalResult ActionOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!symbols.lookupNearestSymbolFrom<SubroutineOp>(*this, getSubroutineAttr()))
    return emitOpError("subroutine ")
           << getSubroutineAttr() << " does not name a plan.subroutine";
  if (getMicrobatch() && int64_t(*getMicrobatch()) < 0)
    return emitOpError("microbatch must be >= 0");
  return success();
}
