//===- Buffers.cpp - parameter buffers: values, masters, copies, grads ----===//
//
// A parameter's buffers are made where the program first reads it. Under
// mixed precision the manifest's parameter is the f32 master and the ops
// read a bf16 working copy made from it at every step_begin. (ZeRO's row
// blocks are llcdist-plan-zero's rewrite of these buffers.)
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xftoplan;

ParamInfo &ParamBuffers::param(const std::string &name, RankedTensorType type) {
  auto [it, inserted] = params.try_emplace(name);
  if (inserted) {
    ParamInfo &p = it->second;
    p.type = type;
    if (step.mixed) {
      // The manifest's parameter is the f32 master (what the runtime
      // initializes and saves); the ops read a bf16 copy, made from the
      // master at the start of every step (emitStepBegin).
      p.value = pb.newBuffer(name, "param", ProgramBuilder::withF32(type));
      pb.setMemoryClass(p.value, "optimizer_state"); // the paper's 12Ψ: master + m + v
      p.working = pb.newBuffer(name + ".bf16", "param", type);
    } else {
      p.value = p.working = pb.newBuffer(name, "param", type);
    }
    p.grad = pb.newBuffer(name + ".grad", "grad", type);
    p.isNormOrBias = type.getRank() == 1;
    paramOrder.push_back(name);
  }
  return it->second;
}

void ParamBuffers::emitStepBegin(Location loc, Buf loss) {
  OpBuilder &b = pb.b;
  pb.current = pb.stepBegin;
  if (step.mixed)
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      Location castLoc = NameLoc::get(
          b.getStringAttr("mixed precision: the step's bf16 copy of the f32 master"),
          NameLoc::get(b.getStringAttr(name), loc));
      int64_t n = pb.bufferOp(p.working).getTensorType().getNumElements();
      pb.kernel("cast", {pb.arg("x", p.value), pb.arg("y", p.working)}, {pb.i64("n", n)},
                castLoc);
    }
  SmallVector<Attribute> zeroed;
  for (const std::string &name : paramOrder)
    zeroed.push_back(params[name].grad);
  if (loss)
    zeroed.push_back(loss);
  pb.kernel("fill_zero", {pb.arg("x", b.getArrayAttr(zeroed))}, {}, loc);
}
