//===- PlanOverlapParamGather.cpp - ZeRO-1/2's gather into the next step --===//
//
// Megatron-LM's --overlap-param-gather on a ZeRO-1/2 plan (llcdist-plan-zero
// stage 1 or 2). There each dp rank updates its block of every parameter and
// the blocks are gathered back synchronously: after an f32 update in the
// optimizer (shard_slice value → shard, update the shard, all_gather shard →
// value), under mixed precision in step_begin (cast the master block to
// bf16, all_gather into the working copy). Here the gathers run while the
// next step's forward computes. Tokens do not cross steps, so they start at
// the beginning of the step (step_begin, queue "comm") and the first
// microbatch's forward, given a subroutine of its own (a clone run by that
// action only, as llcdist-plan-grad-buckets clones the last backward), waits
// for each just before its first read of the gathered parameter.
//
// The source of a gather at the step's start must hold the updated block
// from the previous step's optimizer, and on the first step the initial
// one. An f32 plan's `<name>.shard` is scratch (dead between steps, never
// initialized), so the pass first gives the f32 plan the mixed-precision
// layout: the value buffer holds the parameter's block, the master the
// update writes in place (`zero.value_block`: the runtime initializes it as
// the block of the whole initial parameter, so the first step's gather
// reproduces that parameter), and the whole parameter the forward and
// backward read is a new persistent `<name>.whole` (kind "param"). Under
// mixed precision the master already is the block and its bf16 block is
// cast in step_begin right before the gather, so only the gather moves.
//
//===----------------------------------------------------------------------===//
#include "KernelArgs.h"
#include "OverlapUtil.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"

#define DEBUG_TYPE "llcdist-plan-overlap-param-gather"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANOVERLAPPARAMGATHER
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {
bool isZeroGather(KernelOp k) {
  return k.getKernel() == "all_gather" && !k->hasAttr(kTokenAttr) &&
         collectiveOrigin(k) == llcdist::xf::CollectiveOrigin::Zero;
}

/// `k`'s arguments with every `from` replaced by `to`.
DictionaryAttr replaced(KernelOp k, Attribute from, Attribute to) {
  return remapKernelArgs(k, [&](Attribute a) { return a == from ? to : Attribute(); });
}

/// An f32 ZeRO update: value → shard (`slice`), `update`, shard → value
/// (`gather`).
struct F32Update {
  ParamOp param;
  KernelOp slice, update, gather;
};

/// The f32 updates of `params` in `optimizer`, checked for every parameter
/// before anything changes; nullopt where a parameter's update is not this
/// shape (another reader or writer of the whole value). Mixed precision's
/// (the value already the f32 master's block) are not listed.
std::optional<SmallVector<F32Update>> findF32Updates(ArrayRef<ParamOp> params, SubroutineOp optimizer) {
  SmallVector<F32Update> f32;
  for (ParamOp p : params) {
    auto z = p->getAttrOfType<DictionaryAttr>("zero");
    if (auto block = z.getAs<BoolAttr>("value_block"); block && block.getValue())
      continue;
    StringAttr value = p.getValueAttr().getAttr();
    F32Update u{p, {}, {}, {}};
    for (auto k : optimizer.getBody().front().getOps<KernelOp>()) {
      if (!overlap::referencesBuffer(k, value))
        continue;
      if (k.getKernel() == "shard_slice" && !u.slice)
        u.slice = k;
      else if (isZeroGather(k) && u.slice && !u.gather)
        u.gather = k;
      else
        return std::nullopt;
    }
    if (!u.slice != !u.gather)
      return std::nullopt;
    if (!u.slice)
      continue; // mixed precision: the master is the block already
    StringAttr shard = u.slice.getArgs().getAs<FlatSymbolRefAttr>("y").getAttr();
    for (auto k : optimizer.getBody().front().getOps<KernelOp>())
      if (k != u.slice && k != u.gather && overlap::referencesBuffer(k, shard)) {
        if (u.update || (k.getKernel() != "adamw" && k.getKernel() != "sgd"))
          return std::nullopt;
        u.update = k;
      }
    if (!u.update)
      return std::nullopt;
    f32.push_back(u);
  }
  return f32;
}

struct PlanOverlapParamGatherPass : public llcdist::plan::impl::PlanOverlapParamGatherBase<PlanOverlapParamGatherPass> {
  /// A gather started in step_begin: the whole buffer it writes, its token.
  struct Started {
    KernelOp gather;
    StringAttr whole;
    int64_t token;
  };

  void runOnOperation() override {
    ProgramOp program = getOperation();
    Block &body = program.getBody().front();
    SymbolTable symbols(program);
    SmallVector<ParamOp> params;
    for (auto p : body.getOps<ParamOp>()) {
      auto z = p->getAttrOfType<DictionaryAttr>("zero");
      auto stage = z ? z.getAs<IntegerAttr>("stage") : IntegerAttr();
      if (!stage || stage.getInt() >= 3 || p->hasAttr("pipeline.replica_of"))
        return; // not ZeRO-1/2, or a pipeline's tied replica: not this pass's shape
      params.push_back(p);
    }
    auto stepBegin = symbols.lookup<SubroutineOp>("step_begin");
    auto optimizer = symbols.lookup<SubroutineOp>("optimizer");
    if (params.empty() || !stepBegin || !optimizer)
      return;

    // The step's actions between step_begin's and the optimizer's: where
    // the gathered parameters are first read.
    SmallVector<ActionOp> actions;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto a : sched.getBody().front().getOps<ActionOp>())
        actions.push_back(a);
    SmallVector<ActionOp> steps; // the microbatch actions, in order
    for (ActionOp a : actions) {
      if (a.getSubroutine() == optimizer.getSymName())
        break;
      if (a.getSubroutine() != stepBegin.getSymName())
        steps.push_back(a);
    }
    if (steps.empty())
      return;

    // 1. The f32 updates: value → shard, update, shard → value, rewritten
    // to the master block updated in place and a whole copy step_begin
    // gathers.
    std::optional<SmallVector<F32Update>> f32 = findF32Updates(params, optimizer);
    if (!f32)
      return; // not this pass's shape
    OpBuilder b(program.getContext());
    rewriteF32Updates(program, symbols, *f32, stepBegin, optimizer, b);
    // 2. Every gather in step_begin (f32's new ones, mixed precision's into
    // the bf16 working copy) starts on the comm queue.
    int64_t token = overlap::firstFreeToken(program);
    SmallVector<Started> started;
    for (auto k : stepBegin.getBody().front().getOps<KernelOp>())
      if (isZeroGather(k)) {
        started.push_back({k, k.getArgs().getAs<FlatSymbolRefAttr>("y").getAttr(), token});
        overlap::start(k, "comm", token++);
      }
    if (started.empty())
      return;
    waitAtFirstReaders(program, symbols, started, actions, steps, optimizer, b);
  }

  /// Rewrites each f32 update to update the master block in place (the
  /// value becomes the block), the steps reading a whole copy that
  /// step_begin gathers from it, first, in parameter order.
  static void rewriteF32Updates(ProgramOp program, SymbolTable &symbols, ArrayRef<F32Update> f32,
                                SubroutineOp stepBegin, SubroutineOp optimizer, OpBuilder &b) {
    Block &body = program.getBody().front();
    NewBuffers fresh(program);
    SmallVector<KernelOp> f32Gathers;
    for (F32Update u : f32) {
      ParamOp p = u.param;
      FlatSymbolRefAttr value = p.getValueAttr();
      auto valueBuf = symbols.lookup<BufferOp>(value.getAttr());
      FlatSymbolRefAttr shard = u.slice.getArgs().getAs<FlatSymbolRefAttr>("y");
      auto shardBuf = symbols.lookup<BufferOp>(shard.getAttr());
      // The whole parameter the steps read, declared after the value.
      b.setInsertionPointAfter(valueBuf);
      auto whole =
          fresh.create(b, valueBuf.getLoc(), valueBuf.getTensorType(), (p.getName() + ".whole").str(), "param");
      symbols.insert(whole);
      auto wholeRef = FlatSymbolRefAttr::get(whole.getSymNameAttr());
      for (auto sub : body.getOps<SubroutineOp>())
        if (sub != optimizer)
          for (auto k : sub.getBody().front().getOps<KernelOp>())
            k.setArgsAttr(replaced(k, value, wholeRef));
      // The value is the f32 master's block, updated in place.
      valueBuf.setTypeAttr(shardBuf.getTypeAttr());
      valueBuf->setAttr("memory_class", b.getStringAttr("optimizer_state"));
      u.update.setArgsAttr(replaced(u.update, shard, value));
      NamedAttrList zero(p->getAttrOfType<DictionaryAttr>("zero"));
      zero.set("value_block", b.getBoolAttr(true));
      p->setAttr("zero", zero.getDictionary(program.getContext()));
      if (f32Gathers.empty())
        b.setInsertionPointToStart(&stepBegin.getBody().front());
      else
        b.setInsertionPointAfter(f32Gathers.back());
      auto g = cast<KernelOp>(b.clone(*u.gather));
      g.setArgsAttr(b.getDictionaryAttr({b.getNamedAttr("x", value), b.getNamedAttr("y", wholeRef)}));
      f32Gathers.push_back(g);
      u.slice.erase();
      u.gather.erase();
      shardBuf.erase();
    }
  }

  /// 3. Each gathered parameter's first reader in the step: the first
  /// action whose subroutine reads it (a pipeline stage's first forward of
  /// the parameter's chunk). That action gets a clone of its subroutine of
  /// its own, which waits for the gather just before the first read. A
  /// parameter no microbatch reads is waited at the optimizer's start. Then
  /// the comm queue and the report.
  static void waitAtFirstReaders(ProgramOp program, SymbolTable &symbols, ArrayRef<Started> started,
                                 ArrayRef<ActionOp> actions, ArrayRef<ActionOp> steps, SubroutineOp optimizer,
                                 OpBuilder &b) {
    // action -> (the subroutine it ran, its clone)
    llvm::MapVector<Operation *, std::pair<std::string, SubroutineOp>> cloneOf;
    SmallVector<std::string> waitedIn;
    int64_t bytes = 0;
    for (Started s : started) {
      ActionOp reader;
      for (ActionOp a : steps)
        if (llvm::any_of(symbols.lookup<SubroutineOp>(a.getSubroutine()).getBody().front().getOps<KernelOp>(),
                         [&](KernelOp k) { return overlap::referencesBuffer(k, s.whole); })) {
          reader = a;
          break;
        }
      Block *waitIn = &optimizer.getBody().front();
      KernelOp use;
      if (reader) {
        auto &[originalName, clone] = cloneOf[reader.getOperation()];
        if (!clone) {
          auto original = symbols.lookup<SubroutineOp>(reader.getSubroutine());
          originalName = original.getSymName().str();
          std::string name = (original.getSymName() + "_first").str();
          while (symbols.lookup(name))
            name += "_";
          b.setInsertionPointAfter(original);
          clone = cast<SubroutineOp>(b.clone(*original));
          clone.setSymName(name);
          symbols.insert(clone);
          reader.setSubroutine(clone.getSymName());
          waitedIn.push_back(name);
        }
        waitIn = &clone.getBody().front();
        for (auto k : waitIn->getOps<KernelOp>())
          if (overlap::referencesBuffer(k, s.whole)) {
            use = k;
            break;
          }
      } else {
        use = *waitIn->getOps<KernelOp>().begin();
        if (!llvm::is_contained(waitedIn, optimizer.getSymName().str()))
          waitedIn.push_back(optimizer.getSymName().str());
      }
      b.setInsertionPoint(use);
      overlap::createWait(b, s.gather.getLoc(), s.token);
      bytes += symbols.lookup<BufferOp>(s.whole).getNumBytes();
    }
    // A subroutine no action runs any more (one microbatch: the clone is
    // the whole forward) goes.
    for (auto &[action, cloned] : cloneOf) {
      const std::string &original = cloned.first;
      if (llvm::none_of(actions, [&](ActionOp a) { return a.getSubroutine() == original; }))
        symbols.erase(symbols.lookup(original));
    }
    overlap::addQueue(program, "comm");
    program->setAttr(kParamGatherOverlapAttr,
                     b.getDictionaryAttr({b.getNamedAttr("gathers", b.getI64IntegerAttr(int64_t(started.size()))),
                                          b.getNamedAttr("bytes", b.getI64IntegerAttr(bytes)),
                                          b.getNamedAttr("subroutine", b.getStringAttr(llvm::join(waitedIn, ", ")))}));
  }
};
} // namespace
