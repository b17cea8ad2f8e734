//===- PlanGradBuckets.cpp - overlap the dp gradient all-reduce ------------===//
//
// The first overlap pass (PyTorch DDP's and Megatron-LM's gradient buckets,
// docs/plan-format.md "Asynchronous plans"). A synchronous plan reduces every
// gradient over dp in one all_reduce at the start of the optimizer, after
// the whole backward. Here the last microbatch's backward gets a subroutine
// of its own (a clone of the backward, run by that microbatch's action
// only), the gradients are grouped into buckets in the order the clone
// finishes writing them (about the reverse of the parameters'), and each
// bucket's all_reduce is started on queue "comm" right after the bucket's
// last gradient write, so it runs while the backward goes on; the optimizer
// waits for each bucket's token where the synchronous all_reduce was. Earlier
// microbatches only accumulate and communicate nothing, as DDP's no_sync.
// Under ZeRO-1 the reduction is one reduce_scatter per gradient (into its
// block, llcdist-plan-zero's): a bucket's scatters start together, one token
// each, and the optimizer waits for each where it was.
//
// A bucket closes once it holds at least `bucket-size` gradient elements
// (Megatron-LM's bucket_size counts parameters), so the last one may be
// smaller. The buckets are recorded on the program (plan.grad_buckets: one
// {collective, grads, elements, bytes, subroutine} per bucket) for the
// compile summary.
//
//===----------------------------------------------------------------------===//
#include "OverlapUtil.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#define DEBUG_TYPE "llcdist-plan-grad-buckets"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANGRADBUCKETS
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;
namespace schema = llcdist::rt::schema;

namespace {
/// The synchronous gradient all-reduce over dp (llcdist-lower-to-plan's
/// optimizer), or null.
KernelOp findGradientAllReduce(ProgramOp program) {
  KernelOp found;
  program.walk([&](KernelOp k) {
    auto origin = k->getAttrOfType<StringAttr>(kOriginAttr);
    auto axis = k.getParams().getAs<StringAttr>("axis");
    if (k.getKernel() == "all_reduce" && origin && origin.getValue() == "dp_gradients" && axis &&
        !k->hasAttr(kTokenAttr)) {
      found = k;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

/// ZeRO-1's gradient reduce-scatters over dp (llcdist-plan-zero: one per
/// parameter the optimizer updates, from its gradient into its block), all in
/// one subroutine, or nothing.
SmallVector<KernelOp> findGradientReduceScatters(ProgramOp program, SymbolTable &symbols) {
  SmallVector<KernelOp> found;
  program.walk([&](KernelOp k) {
    auto origin = k->getAttrOfType<StringAttr>(kOriginAttr);
    auto axis = k.getParams().getAs<StringAttr>("axis");
    auto x = k.getArgs().getAs<FlatSymbolRefAttr>("x");
    if (k.getKernel() != "reduce_scatter" || !origin || origin.getValue() != "zero" || !axis ||
        k->hasAttr(kTokenAttr) || !x)
      return;
    auto buf = symbols.lookup<BufferOp>(x.getAttr());
    if (buf && buf.getKind() == "grad") // ZeRO-2's reduce the microbatch's part
      found.push_back(k);
  });
  if (llvm::any_of(found, [&](KernelOp k) { return k->getParentOp() != found.front()->getParentOp(); }))
    return {};
  return found;
}

/// Whether kernel `k` writes buffer `name` (a written or read-written role).
bool writes(KernelOp k, StringAttr name) {
  auto kind = schema::parseOpKind(k.getKernel().str());
  for (NamedAttribute arg : k.getArgs()) {
    if (kind)
      if (int idx = schema::argIndex(*kind, arg.getName().strref());
          idx >= 0 && schema::opSpec(*kind).args[idx].access == schema::ArgAccess::kRead)
        continue;
    auto is = [&](Attribute a) { return cast<FlatSymbolRefAttr>(a).getAttr() == name; };
    if (auto list = dyn_cast<ArrayAttr>(arg.getValue())) {
      if (llvm::any_of(list, is))
        return true;
    } else if (is(arg.getValue())) {
      return true;
    }
  }
  return false;
}

struct PlanGradBucketsPass : public llcdist::plan::impl::PlanGradBucketsBase<PlanGradBucketsPass> {
  using PlanGradBucketsBase::PlanGradBucketsBase;

  /// ZeRO-2: every microbatch's backward reduce-scatters each gradient
  /// contribution into a part of the gradient's block and adds the part to
  /// the block right after (llcdist-plan-zero stage 2). Here each scatter
  /// starts on queue "comm" where it was; the contributions are grouped into
  /// buckets of at least `bucket-size` elements in the backward's order, and
  /// a bucket's waits and adds run once the next bucket is complete (at the
  /// subroutine's end for the last), so a bucket's reduction overlaps the
  /// computation of the next one. Before a kernel that would write a
  /// contribution or touch a part still in flight, every bucket in flight
  /// is waited and added first (the buffer rule). The adds keep their order.
  void bucketZero2(ProgramOp program, SymbolTable &symbols) {
    Block &body = program.getBody().front();
    MLIRContext *ctx = program.getContext();
    OpBuilder b(ctx);
    const int64_t firstToken = overlap::firstFreeToken(program);
    SmallVector<Attribute> report;
    for (auto sub : body.getOps<SubroutineOp>()) {
      if (sub.getSymName() == "optimizer" || sub.getSymName() == "step_begin")
        continue;
      struct InFlight {
        KernelOp accumulate;
        StringAttr x, y;
        int64_t token;
      };
      SmallVector<SmallVector<InFlight>> buckets; // the open ones, oldest first
      int64_t token = firstToken, elements = 0;
      struct Closed {
        int64_t grads = 0, elements = 0, bytes = 0;
      };
      SmallVector<Closed> closed;
      // Waits for the oldest bucket's tokens and adds its parts, before `at`
      // (null: at the subroutine's end).
      auto drainOldest = [&](Operation *at) {
        SmallVector<InFlight> bucket = buckets.front();
        buckets.erase(buckets.begin());
        for (InFlight &f : bucket) {
          if (at)
            f.accumulate->moveBefore(at);
          else
            f.accumulate->moveBefore(&sub.getBody().front(), sub.getBody().front().end());
          b.setInsertionPoint(f.accumulate);
          overlap::createWait(b, f.accumulate.getLoc(), f.token);
        }
      };
      SmallVector<KernelOp> kernels(sub.getBody().front().getOps<KernelOp>());
      bool any = false;
      for (size_t i = 0; i < kernels.size(); ++i) {
        KernelOp k = kernels[i];
        auto origin = k->getAttrOfType<StringAttr>(kOriginAttr);
        KernelOp next = i + 1 < kernels.size() ? kernels[i + 1] : KernelOp();
        auto x = k.getArgs().getAs<FlatSymbolRefAttr>("x");
        auto y = k.getArgs().getAs<FlatSymbolRefAttr>("y");
        bool scatter = k.getKernel() == "reduce_scatter" && origin && origin.getValue() == "zero" &&
                       !k->hasAttr(kTokenAttr) && x && y && next && next.getKernel() == "accumulate" &&
                       next.getArgs().get("x") == y;
        if (!scatter) {
          // The buffer rule: nothing writes a contribution or touches a
          // part in flight.
          auto conflicts = [&](const SmallVector<InFlight> &bucket) {
            return llvm::any_of(bucket,
                                [&](const InFlight &f) { return writes(k, f.x) || overlap::referencesBuffer(k, f.y); });
          };
          while (!buckets.empty() && llvm::any_of(buckets, conflicts))
            drainOldest(k);
          continue;
        }
        if (auto buf = symbols.lookup<BufferOp>(x.getAttr()); !buf || buf.getKind() == "grad")
          continue; // not ZeRO-2's per-microbatch contribution
        any = true;
        if (buckets.empty() || elements >= bucketSize) {
          // A new bucket: the one before the last complete one is waited.
          if (buckets.size() >= 2)
            drainOldest(k);
          buckets.emplace_back();
          closed.emplace_back();
          elements = 0;
        }
        overlap::start(k, "comm", token);
        buckets.back().push_back({next, x.getAttr(), y.getAttr(), token++});
        auto xBuf = symbols.lookup<BufferOp>(x.getAttr());
        elements += xBuf.getTensorType().getNumElements();
        closed.back().grads += 1;
        closed.back().elements += xBuf.getTensorType().getNumElements();
        closed.back().bytes += xBuf.getNumBytes();
        ++i; // the accumulate moves with its wait
      }
      while (!buckets.empty())
        drainOldest(nullptr);
      if (!any)
        continue;
      for (const Closed &c : closed)
        report.push_back(b.getDictionaryAttr({b.getNamedAttr("collective", b.getStringAttr("reduce_scatter")),
                                              b.getNamedAttr("grads", b.getI64IntegerAttr(c.grads)),
                                              b.getNamedAttr("elements", b.getI64IntegerAttr(c.elements)),
                                              b.getNamedAttr("bytes", b.getI64IntegerAttr(c.bytes)),
                                              b.getNamedAttr("every_microbatch", b.getBoolAttr(true)),
                                              b.getNamedAttr("subroutine", sub.getSymNameAttr())}));
    }
    if (report.empty())
      return;
    overlap::addQueue(program, "comm");
    program->setAttr(kGradBucketsAttr, ArrayAttr::get(ctx, report));
  }

  /// Which gradients the buckets take: per gradient, the one subroutine that
  /// writes it (writerOf); those that stay synchronous; every action; and the
  /// subroutines that finish overlapped gradients, each with its last action
  /// before the optimizer's, in action order. False where the optimizer does
  /// not run exactly once (a schedule this pass does not know).
  struct Writers {
    llvm::DenseMap<StringAttr, SubroutineOp> writerOf;
    llvm::DenseSet<StringAttr> synchronous;
    SmallVector<ActionOp> actions;
    SmallVector<std::pair<SubroutineOp, ActionOp>> writers;
  };
  static bool findWriters(Block &body, SymbolTable &symbols, KernelOp first, ArrayRef<StringAttr> grads, Writers &w) {
    // The backward: per gradient, the one subroutine that references it
    // (step_begin's `fill_zero` aside) and writes it — a pipeline's chunk, or
    // under ZB-H1 a chunk's weight-gradient part. A gradient some other
    // subroutine touches too (a tied parameter's, which the optimizer
    // accumulates from another stage before reducing it) stays synchronous.
    auto optimizer = first->getParentOfType<SubroutineOp>();
    llvm::DenseSet<Operation *> beforeReduction; // the optimizer's kernels before it
    for (Operation &op : optimizer.getBody().front()) {
      if (&op == first.getOperation())
        break;
      beforeReduction.insert(&op);
    }
    llvm::DenseMap<StringAttr, SubroutineOp> &writerOf = w.writerOf;
    llvm::DenseSet<StringAttr> &synchronous = w.synchronous;
    llvm::DenseSet<StringAttr> written;
    for (auto sub : body.getOps<SubroutineOp>())
      for (KernelOp k : sub.getBody().front().getOps<KernelOp>()) {
        if (k.getKernel() == "fill_zero" && sub.getSymName() == "step_begin")
          continue;
        if (sub == optimizer && !beforeReduction.contains(k))
          continue; // the reduction and what follows it
        for (StringAttr g : grads) {
          if (!overlap::referencesBuffer(k, g))
            continue;
          auto it = writerOf.try_emplace(g, sub).first;
          if (sub == optimizer || it->second != sub)
            synchronous.insert(g);
          if (writes(k, g))
            written.insert(g);
        }
      }
    for (StringAttr g : grads)
      if (!written.contains(g))
        synchronous.insert(g);
    // The subroutines that finish gradients, in their last actions' order,
    // each with that last action before the optimizer's.
    SmallVector<ActionOp> &actions = w.actions;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto a : sched.getBody().front().getOps<ActionOp>())
        actions.push_back(a);
    ActionOp optimizerAction;
    int64_t optimizerRuns = 0;
    llvm::MapVector<StringAttr, ActionOp> lastOf; // writer -> its last action
    for (ActionOp a : actions) {
      if (a.getSubroutine() == optimizer.getSymName()) {
        ++optimizerRuns;
        optimizerAction = a;
      } else if (!optimizerAction) {
        lastOf[a.getSubroutineAttr().getAttr()] = a;
      }
    }
    if (optimizerRuns != 1)
      return false;
    for (StringAttr g : grads)
      if (!writerOf.lookup(g) || !lastOf.count(writerOf.lookup(g).getSymNameAttr()))
        synchronous.insert(g); // its writer never runs before the optimizer
    SmallVector<std::pair<SubroutineOp, ActionOp>> &writers = w.writers;
    for (auto &[name, action] : lastOf)
      if (auto sub = symbols.lookup<SubroutineOp>(name); sub && llvm::any_of(grads, [&](StringAttr g) {
                                                           return !synchronous.contains(g) && writerOf.lookup(g) == sub;
                                                         }))
        writers.push_back({sub, action});
    llvm::stable_sort(writers, [&](auto &x, auto &y) { return x.second->isBeforeInBlock(y.second); });
    return true;
  }

  void runOnOperation() override {
    ProgramOp program = getOperation();
    if (bucketSize < 1) {
      program.emitError("llcdist-plan-grad-buckets: bucket-size must be >= 1, got ")
          << static_cast<int64_t>(bucketSize);
      return signalPassFailure();
    }
    Block &body = program.getBody().front();
    SymbolTable symbols(program);
    // The synchronous gradient reduction over dp: the optimizer's one
    // all_reduce, or under ZeRO-1 its reduce_scatter per gradient.
    KernelOp reduce = findGradientAllReduce(program);
    SmallVector<KernelOp> scatters;
    if (!reduce)
      scatters = findGradientReduceScatters(program, symbols);
    if (!reduce && scatters.empty()) {
      bucketZero2(program, symbols); // or no data parallelism: nothing to overlap
      return;
    }
    SmallVector<StringAttr> grads;
    llvm::DenseMap<StringAttr, KernelOp> scatterOf;
    if (reduce) {
      for (Attribute a : reduce.getArgs().getAs<ArrayAttr>("x"))
        grads.push_back(cast<FlatSymbolRefAttr>(a).getAttr());
    } else {
      for (KernelOp rs : scatters) {
        StringAttr g = rs.getArgs().getAs<FlatSymbolRefAttr>("x").getAttr();
        if (!scatterOf.try_emplace(g, rs).second)
          return; // two reductions of one gradient: not the shape this pass knows
        grads.push_back(g);
      }
    }

    // The backward: which gradients overlap, and the subroutines that finish them.
    Writers w;
    if (!findWriters(body, symbols, reduce ? reduce : scatters.front(), grads, w) || w.writers.empty())
      return;
    Bucketing bucketing(program, symbols, bucketSize, reduce, scatters, scatterOf, grads, w);
    for (auto [backward, last] : w.writers)
      bucketing.overlapLastBackward(backward, last);
    bucketing.waitInOptimizer();
    bucketing.record();
  }

  /// The buckets of one program: made per backward subroutine that finishes
  /// gradients, started in its last microbatch's clone, waited in the
  /// optimizer.
  class Bucketing {
  public:
    Bucketing(ProgramOp program, SymbolTable &symbols, int64_t bucketSize, KernelOp reduce, ArrayRef<KernelOp> scatters,
              const llvm::DenseMap<StringAttr, KernelOp> &scatterOf, ArrayRef<StringAttr> grads, const Writers &w)
        : program(program), symbols(symbols), b(program.getContext()), bucketSize(bucketSize), reduce(reduce),
          scatters(scatters), scatterOf(scatterOf), grads(grads), w(w), tokens(overlap::firstFreeToken(program)),
          firstToken(tokens) {}

    /// `backward`'s last microbatch (action `last`) runs a clone of it that
    /// starts each bucket's reduction as soon as its gradients are final.
    void overlapLastBackward(SubroutineOp backward, ActionOp last) {
      // 1. The last microbatch's backward: a clone, run by its action only.
      std::string name = (backward.getSymName() + "_last").str();
      while (symbols.lookup(name))
        name += "_";
      b.setInsertionPointAfter(backward);
      auto clone = cast<SubroutineOp>(b.clone(*backward));
      clone.setSymName(name);
      symbols.insert(clone);
      last.setSubroutine(clone.getSymName());
      SmallVector<KernelOp> kernels(clone.getBody().front().getOps<KernelOp>());
      const size_t firstBucket = buckets.size();
      fillBuckets(backward, clone, kernels);
      startBuckets(clone, kernels, firstBucket);
      if (llvm::none_of(w.actions, [&](ActionOp a) { return a.getSubroutine() == backward.getSymName(); }))
        symbols.erase(backward); // one microbatch: the clone is the whole backward
    }

    /// 5. The optimizer waits where it reduced: for every bucket at the
    /// all_reduce (which keeps the synchronous gradients, if any), for each
    /// scatter's token at that scatter.
    void waitInOptimizer() {
      auto wait = [&](KernelOp at, int64_t token) {
        b.setInsertionPoint(at);
        overlap::createWait(b, at.getLoc(), token);
      };
      if (!reduce) {
        for (KernelOp rs : scatters)
          if (auto it = tokenOf.find(rs); it != tokenOf.end()) {
            wait(rs, it->second);
            rs.erase();
          }
        return;
      }
      for (int64_t t = firstToken; t < tokens; ++t)
        wait(reduce, t);
      SmallVector<Attribute> kept;
      for (StringAttr g : grads)
        if (w.synchronous.contains(g))
          kept.push_back(FlatSymbolRefAttr::get(g));
      if (kept.empty())
        reduce.erase();
      else
        reduce.setArgsAttr(b.getDictionaryAttr({b.getNamedAttr("x", b.getArrayAttr(kept))}));
    }

    /// 6. The comm queue, and the report.
    void record() {
      overlap::addQueue(program, "comm");
      StringRef collective = reduce ? "all_reduce" : "reduce_scatter";
      SmallVector<Attribute> report;
      for (const Bucket &bk : buckets)
        report.push_back(b.getDictionaryAttr({b.getNamedAttr("collective", b.getStringAttr(collective)),
                                              b.getNamedAttr("grads", b.getI64IntegerAttr(int64_t(bk.grads.size()))),
                                              b.getNamedAttr("elements", b.getI64IntegerAttr(bk.elements)),
                                              b.getNamedAttr("bytes", b.getI64IntegerAttr(bk.bytes)),
                                              b.getNamedAttr("subroutine", bk.subroutine)}));
      program->setAttr(kGradBucketsAttr, ArrayAttr::get(program.getContext(), report));
    }

  private:
    struct Bucket {
      SmallVector<Attribute> grads;
      int64_t elements = 0, bytes = 0, readyAt = -1;
      StringAttr subroutine; // the clone that starts it
    };

    /// 2. When each of `backward`'s gradients is final: its last write in
    /// the clone; 3. buckets in that order, each closed at bucket-size
    /// elements.
    void fillBuckets(SubroutineOp backward, SubroutineOp clone, SmallVectorImpl<KernelOp> &kernels) {
      SmallVector<StringAttr> ready;
      for (StringAttr g : grads)
        if (!w.synchronous.contains(g) && w.writerOf.lookup(g) == backward)
          ready.push_back(g);
      llvm::DenseSet<StringAttr> mine(ready.begin(), ready.end());
      llvm::DenseMap<StringAttr, int64_t> lastWrite;
      for (auto [i, k] : llvm::enumerate(kernels))
        for (NamedAttribute arg : k.getArgs()) {
          auto note = [&](Attribute a) {
            StringAttr g = cast<FlatSymbolRefAttr>(a).getAttr();
            if (mine.contains(g) && writes(k, g))
              lastWrite[g] = int64_t(i);
          };
          if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
            llvm::for_each(list, note);
          else
            note(arg.getValue());
        }
      llvm::stable_sort(
          ready, [&](StringAttr x, StringAttr y) { return lastWrite.lookup_or(x, -1) < lastWrite.lookup_or(y, -1); });
      const size_t firstBucket = buckets.size();
      for (StringAttr g : ready) {
        if (buckets.size() == firstBucket || buckets.back().elements >= bucketSize)
          buckets.emplace_back();
        Bucket &bk = buckets.back();
        auto buf = symbols.lookup<BufferOp>(g);
        bk.grads.push_back(FlatSymbolRefAttr::get(g));
        bk.elements += buf.getTensorType().getNumElements();
        bk.bytes += buf.getNumBytes();
        bk.readyAt = std::max(bk.readyAt, lastWrite.lookup_or(g, -1));
        bk.subroutine = clone.getSymNameAttr();
      }
    }

    /// 4. Each bucket's reduction started after its last gradient write (a
    /// bucket ready before the clone's first kernel starts it), with the
    /// synchronous one's parameters, provenance and location: one
    /// all_reduce of the bucket's gradients, or (ZeRO-1) each gradient's
    /// reduce_scatter, one token each.
    void startBuckets(SubroutineOp clone, SmallVectorImpl<KernelOp> &kernels, size_t firstBucket) {
      Block &cloneBody = clone.getBody().front();
      Operation *previous = nullptr;
      int64_t previousAt = -2;
      auto start = [&](Operation *op) {
        op->setAttr(kQueueAttr, b.getStringAttr("comm"));
        op->setAttr(kTokenAttr, b.getI64IntegerAttr(tokens++));
        previous = op;
      };
      for (Bucket &bk : llvm::drop_begin(buckets, firstBucket)) {
        if (bk.readyAt == previousAt && previous)
          b.setInsertionPointAfter(previous);
        else if (bk.readyAt < 0)
          b.setInsertionPointToStart(&cloneBody);
        else
          b.setInsertionPointAfter(kernels[bk.readyAt]);
        previousAt = bk.readyAt;
        if (!reduce) {
          for (Attribute g : bk.grads) {
            KernelOp rs = scatterOf.lookup(cast<FlatSymbolRefAttr>(g).getAttr());
            tokenOf[rs] = tokens;
            start(b.clone(*rs));
            b.setInsertionPointAfter(previous);
          }
          continue;
        }
        auto op =
            KernelOp::create(b, reduce.getLoc(), reduce.getKernel(),
                             b.getDictionaryAttr({b.getNamedAttr("x", b.getArrayAttr(bk.grads))}), reduce.getParams());
        for (NamedAttribute a : reduce->getDiscardableAttrs())
          op->setAttr(a.getName(), a.getValue());
        start(op);
      }
    }

    ProgramOp program;
    SymbolTable &symbols;
    OpBuilder b;
    const int64_t bucketSize;
    KernelOp reduce;
    ArrayRef<KernelOp> scatters;
    const llvm::DenseMap<StringAttr, KernelOp> &scatterOf;
    ArrayRef<StringAttr> grads;
    const Writers &w;
    SmallVector<Bucket> buckets; // all writers', in token order
    int64_t tokens;
    const int64_t firstToken;
    llvm::DenseMap<Operation *, int64_t> tokenOf; // ZeRO-1: the scatter's token
  };
};
} // namespace
