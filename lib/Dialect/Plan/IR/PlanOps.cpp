//===- PlanOps.cpp - the plan dialect -------------------------------------===//
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

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

bool llcdist::plan::isCommunicationKernel(StringRef kernel) {
  namespace schema = llcdist::rt::schema;
  auto kind = schema::parseOpKind(std::string_view(kernel.data(), kernel.size()));
  return kind && (schema::isCollective(*kind) || schema::isPointToPoint(*kind));
}

namespace {
/// A queue name of the async format: [a-z0-9_]+.
bool isQueueName(StringRef name) {
  return !name.empty() && llvm::all_of(name, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

/// The asynchronous attributes of a kernel (`token`, `queue`): a token only
/// on a communication op or a wait, a queue the program lists, and only a
/// communication op or a wait off the compute queue.
LogicalResult verifyAsyncAttrs(KernelOp op, bool communication, bool wait) {
  if (Attribute a = op->getAttr(kTokenAttr)) {
    auto token = dyn_cast<IntegerAttr>(a);
    if (!token || !token.getType().isSignlessInteger(64) || token.getInt() < 0)
      return op.emitOpError("'") << kTokenAttr << "' must be an i64 >= 0, got " << a;
    if (!communication && !wait)
      return op.emitOpError("'") << kTokenAttr << "' on '" << op.getKernel()
                                 << "': only a communication op (all_reduce, all_gather, "
                                    "reduce_scatter, send, recv) or a wait has a token";
  } else if (wait) {
    return op.emitOpError("a wait needs a '") << kTokenAttr << "'";
  }
  Attribute a = op->getAttr(kQueueAttr);
  if (!a)
    return success();
  auto queue = dyn_cast<StringAttr>(a);
  if (!queue)
    return op.emitOpError("'") << kQueueAttr << "' must be a string, got " << a;
  if (queue.getValue() != kComputeQueue && !communication && !wait)
    return op.emitOpError("'") << op.getKernel() << "' is on queue '" << queue.getValue()
                               << "': only communication ops and waits leave the '"
                               << kComputeQueue << "' queue";
  auto program = op->getParentOfType<ProgramOp>();
  auto queues = program ? program->getAttrOfType<ArrayAttr>(kQueuesAttr) : ArrayAttr();
  bool listed = queue.getValue() == kComputeQueue && !queues;
  if (queues)
    listed = llvm::any_of(queues, [&](Attribute q) { return q == queue; });
  if (!listed)
    return op.emitOpError("queue '") << queue.getValue()
                                     << "' is not one of the program's '" << kQueuesAttr << "'";
  return success();
}
} // namespace

LogicalResult ProgramOp::verify() {
  Attribute a = (*this)->getAttr(kQueuesAttr);
  if (!a)
    return success();
  auto queues = dyn_cast<ArrayAttr>(a);
  if (!queues || queues.empty())
    return emitOpError("'") << kQueuesAttr << "' must be a non-empty array of queue names";
  llvm::StringSet<> seen;
  for (auto [i, q] : llvm::enumerate(queues)) {
    auto name = dyn_cast<StringAttr>(q);
    if (!name || !isQueueName(name.getValue()))
      return emitOpError("'") << kQueuesAttr << "'[" << i
                              << "] must be a queue name ([a-z0-9_]+), got " << q;
    if (!seen.insert(name.getValue()).second)
      return emitOpError("queue '") << name.getValue() << "' is listed twice";
  }
  if (cast<StringAttr>(queues[0]).getValue() != kComputeQueue)
    return emitOpError("the first of '") << kQueuesAttr << "' must be '" << kComputeQueue << "'";
  return success();
}

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
      !t.getElementType().isF64() && !t.getElementType().isInteger(32))
    return emitOpError("element type must be f32, bf16, f64 or i32 (what the "
                       "runtime stores), got ")
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
  if (getKernel() == kWaitKernel) {
    if (!getArgs().empty() || !getParams().empty())
      return emitOpError("a wait has no arguments and no parameters");
    return verifyAsyncAttrs(*this, /*communication=*/false, /*wait=*/true);
  }
  if (failed(verifyAsyncAttrs(*this, isCommunicationKernel(getKernel()), /*wait=*/false)))
    return failure();
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
