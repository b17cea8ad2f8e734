//===- ProgramBuilder.cpp - buffers, subroutines, kernels of a program ----===//
#include "Lowering.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xftoplan;

void ProgramBuilder::beginProgram(StringRef name) {
  b.setInsertionPointToEnd(module.getBody());
  program = plan::ProgramOp::create(b, module.getLoc(), name, IntegerAttr());
  bufferOps.clear();
  b.setInsertionPointToStart(&program.getBody().emplaceBlock());
  stepBegin = plan::SubroutineOp::create(b, module.getLoc(), "step_begin");
  optimizer = plan::SubroutineOp::create(b, module.getLoc(), "optimizer");
  for (auto sub : {stepBegin, optimizer})
    sub.getBody().emplaceBlock();
  firstSubroutine = stepBegin;
}

plan::SubroutineOp ProgramBuilder::addSubroutine(StringRef name) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(optimizer);
  auto sub = plan::SubroutineOp::create(b, module.getLoc(), name);
  sub.getBody().emplaceBlock();
  return sub;
}

Buf ProgramBuilder::newBuffer(std::string name, StringRef kind, Type type) {
  if (unsigned n = bufferNames[name]++)
    name += "#" + std::to_string(n);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(firstSubroutine);
  std::string sym = "b" + std::to_string(nextBuffer++);
  auto op = plan::BufferOp::create(b, module.getLoc(), b.getStringAttr(sym), TypeAttr::get(type),
                                   b.getStringAttr(name), b.getStringAttr(kind), IntegerAttr());
  if (slots > 1 && (kind == "activation" || kind == "scratch" || kind == "input"))
    op->setAttr(plan::kSlotsAttr, b.getI64IntegerAttr(slots));
  Buf ref = FlatSymbolRefAttr::get(ctx, sym);
  bufferOps[ref] = op;
  return ref;
}

void ProgramBuilder::setMemoryClass(Buf buf, StringRef cls) {
  if (auto op = bufferOps.lookup(buf))
    op->setAttr("memory_class", b.getStringAttr(cls));
}

plan::KernelOp ProgramBuilder::kernel(StringRef name, ArrayRef<NamedAttribute> args,
                                      ArrayRef<NamedAttribute> attrs, Location loc) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToEnd(&current.getBody().front());
  auto k = plan::KernelOp::create(b, loc, name, b.getDictionaryAttr(args),
                                  b.getDictionaryAttr(attrs));
  if (!pendingScopes.empty()) {
    k->setAttr(plan::kParamScopesAttr, b.getArrayAttr(pendingScopes));
    pendingScopes.clear();
  }
  return k;
}

void ProgramBuilder::transfer(StringRef op, Buf buf, int64_t peer, int64_t tag, Location loc,
                              StringRef payload, xf::CollectiveOrigin origin) {
  plan::KernelOp k = kernel(op, {arg(op == "send" ? "x" : "y", buf)},
                            {str("axis", "pp"), i64("peer", peer), i64("tag", tag)}, loc);
  k->setAttr("plan.payload", b.getStringAttr(payload));
  plan::setCollectiveOrigin(k, origin);
}

void ProgramBuilder::beginSchedule() {
  b.setInsertionPointToEnd(&program.getBody().front());
  auto sched = plan::ScheduleOp::create(b, module.getLoc());
  b.setInsertionPointToStart(&sched.getBody().emplaceBlock());
}

void ProgramBuilder::action(plan::SubroutineOp sub, std::optional<int64_t> mb,
                            ArrayRef<NamedAttribute> attrs) {
  auto a = plan::ActionOp::create(b, module.getLoc(), FlatSymbolRefAttr::get(sub.getSymNameAttr()),
                                  mb ? b.getI64IntegerAttr(*mb) : IntegerAttr());
  for (NamedAttribute attr : attrs)
    a->setAttr(attr.getName(), attr.getValue());
}
