//===- Fusion.h - what the fusion passes share --------------------*- C++ -*-===//
//
// The plan→plan fusion passes (llcdist-plan-fuse-optimizer,
// llcdist-plan-fuse-norm) replace runs of kernels by one kernel whose
// contract is theirs in turn (docs/plan-format.md). Each records what it
// fused on the program (kFusedAttr) for the compile summary's "fused" lines,
// and where a group of kernels may become one (placement: the others move to
// one of them across kernels independent of them only).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_FUSION_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_FUSION_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <string>
#include <vector>

namespace llcdist::plan {

/// What one pass fused on one program, per pattern: `ops` kernels of the
/// pattern `from` (" + "-joined kinds) became `into` kernels `to`.
class FusionRecord {
public:
  void add(llvm::StringRef from, llvm::StringRef to, int64_t ops, int64_t into = 1) {
    auto it = llvm::find_if(counts, [&](const Counts &c) { return c.from == from && c.to == to; });
    if (it == counts.end())
      it = counts.insert(counts.end(), Counts{from.str(), to.str()});
    it->ops += ops;
    it->into += into;
  }

  /// Appends the counts to the program's kFusedAttr under `pass` (nothing
  /// when nothing was fused).
  void write(ProgramOp program, llvm::StringRef pass) const {
    if (counts.empty())
      return;
    mlir::Builder b(program.getContext());
    llvm::SmallVector<mlir::Attribute> record;
    if (auto old = program->getAttrOfType<mlir::ArrayAttr>(kFusedAttr))
      record.assign(old.begin(), old.end());
    for (const Counts &c : counts)
      record.push_back(b.getDictionaryAttr({b.getNamedAttr("pass", b.getStringAttr(pass)),
                                            b.getNamedAttr("from", b.getStringAttr(c.from)),
                                            b.getNamedAttr("to", b.getStringAttr(c.to)),
                                            b.getNamedAttr("ops", b.getI64IntegerAttr(c.ops)),
                                            b.getNamedAttr("into", b.getI64IntegerAttr(c.into))}));
    program->setAttr(kFusedAttr, b.getArrayAttr(record));
  }

private:
  struct Counts {
    std::string from, to;
    int64_t ops = 0, into = 0;
  };
  std::vector<Counts> counts; // in order of first fusion

};

/// The buffer `k` names for `role` (null when the role is absent).
inline mlir::Attribute argOf(KernelOp k, llvm::StringRef role) { return k.getArgs().get(role); }

/// The integer param `name` of `k`, or -1 when it has none.
inline int64_t intParamOf(KernelOp k, llvm::StringRef name) {
  auto a = k.getParams().getAs<mlir::IntegerAttr>(name);
  return a ? a.getInt() : -1;
}

/// The symbol a buffer reference names.
inline mlir::StringAttr symbolOf(mlir::Attribute ref) { return mlir::cast<mlir::FlatSymbolRefAttr>(ref).getAttr(); }

/// Whether `k` is a `kind` kernel that runs synchronously on the compute
/// queue (isSyncCompute); false for a null `k`.
inline bool isSyncKernel(KernelOp k, llvm::StringRef kind);

/// The program's buffers by name, for the fusion passes: one hash table built
/// once (ProgramOp::lookupSymbol scans the program, so a lookup per fused
/// group made the passes quadratic in the layers), and the fused kernels'
/// intermediates, erased by `finish` where nothing names them any more (one
/// walk over the program, however many).
class FusionBuffers {
public:
  explicit FusionBuffers(ProgramOp program) : program(program) {
    for (BufferOp buf : program.getBody().front().getOps<BufferOp>())
      byName[buf.getSymNameAttr()] = buf;
  }

  /// The buffer `ref` names (null when none).
  BufferOp lookup(mlir::Attribute ref) const {
    auto sym = mlir::dyn_cast_or_null<mlir::FlatSymbolRefAttr>(ref);
    return sym ? byName.lookup(sym.getAttr()) : BufferOp();
  }
  /// The element type of buffer `ref` (null when it names none).
  mlir::Type elementTypeOf(mlir::Attribute ref) const {
    BufferOp buf = lookup(ref);
    return buf ? buf.getTensorType().getElementType() : mlir::Type();
  }
  /// Erases buffer `ref` at `finish` if no op of the program names it then.
  void eraseIfUnused(mlir::Attribute ref) { candidates.push_back(ref); }

  /// Erases the candidates nothing names any more.
  void finish() {
    if (candidates.empty())
      return;
    llvm::DenseSet<mlir::StringAttr> used;
    program->walk([&](mlir::Operation *op) {
      if (op == program.getOperation())
        return;
      op->getAttrDictionary().walk([&](mlir::FlatSymbolRefAttr r) { used.insert(r.getAttr()); });
    });
    for (mlir::Attribute ref : candidates) {
      BufferOp buf = lookup(ref);
      if (buf && !used.contains(buf.getSymNameAttr())) {
        byName.erase(buf.getSymNameAttr());
        buf.erase();
      }
    }
    candidates.clear();
  }

private:
  ProgramOp program;
  llvm::DenseMap<mlir::StringAttr, BufferOp> byName;
  llvm::SmallVector<mlir::Attribute> candidates;
};

/// The first kernel after `k` in its subroutine that reads `buf`, or null.
inline KernelOp nextReader(KernelOp k, mlir::Attribute buf) {
  const mlir::StringAttr name = mlir::cast<mlir::FlatSymbolRefAttr>(buf).getAttr();
  for (mlir::Operation *x = k->getNextNode(); x; x = x->getNextNode())
    if (auto r = mlir::dyn_cast<KernelOp>(x); r && accessOf(r).reads.contains(name))
      return r;
  return {};
}

/// How many kernels of the program name each buffer (once per kernel): a
/// buffer only a fused group touches may go with the fusion.
inline llvm::DenseMap<mlir::Attribute, int64_t> kernelsTouching(ProgramOp program) {
  llvm::DenseMap<mlir::Attribute, int64_t> touches;
  program.walk([&](KernelOp k) {
    llvm::SmallDenseSet<mlir::Attribute, 8> seen;
    auto note = [&](mlir::Attribute a) {
      if (seen.insert(a).second)
        ++touches[a];
    };
    for (mlir::NamedAttribute role : k.getArgs()) {
      if (auto list = mlir::dyn_cast<mlir::ArrayAttr>(role.getValue()))
        llvm::for_each(list, note);
      else
        note(role.getValue());
    }
  });
  return touches;
}

/// Whether `k` runs synchronously on the compute queue (no token, no queue):
/// the only kernels a fusion pass touches.
inline bool isSyncCompute(KernelOp k) {
  return !k->hasAttr(kTokenAttr) && !k->hasAttr(kQueueAttr);
}

inline bool isSyncKernel(KernelOp k, llvm::StringRef kind) {
  return k && k.getKernel() == kind && isSyncCompute(k);
}

/// The buffers each kernel touches, for moving kernels across others. A
/// `wait` touches what the operation it waits for touches (the kernel
/// started with its token): a kernel independent of those may move across it
/// either way; a wait for no known start is a barrier.
class Accesses {
public:
  explicit Accesses(ProgramOp program) {
    program.walk([&](KernelOp k) {
      if (k.getKernel() != kWaitKernel)
        if (auto t = k->getAttrOfType<mlir::IntegerAttr>(kTokenAttr)) {
          // One token may start several operations (in a subroutine and its
          // clones): a wait for it touches what any of them touches.
          KernelAccess &all = started[t.getInt()], one = accessOf(k);
          all.reads.insert(one.reads.begin(), one.reads.end());
          all.writes.insert(one.writes.begin(), one.writes.end());
        }
    });
  }
  /// Whether `a` (a kernel that moves) may cross `k`.
  bool mayCross(const KernelAccess &a, KernelOp k) const {
    if (k.getKernel() != kWaitKernel)
      return !dependent(a, accessOf(k));
    auto t = k->getAttrOfType<mlir::IntegerAttr>(kTokenAttr);
    auto it = t ? started.find(t.getInt()) : started.end();
    return it != started.end() && !dependent(a, it->second);
  }

private:
  llvm::DenseMap<int64_t, KernelAccess> started;
};

/// Where the kernels `members` (of one subroutine) may become one kernel:
/// before the member every other one can move to, each across kernels it
/// may cross only (Accesses::mayCross). The last member is tried first. Null
/// when none can.
inline KernelOp placement(llvm::ArrayRef<KernelOp> members, const Accesses &accesses) {
  auto isMember = [&](mlir::Operation *op) { return llvm::is_contained(members, op); };
  for (KernelOp at : llvm::reverse(members)) {
    bool ok = true;
    for (KernelOp m : members) {
      if (m == at)
        continue;
      const bool later = m->isBeforeInBlock(at);
      KernelAccess acc = accessOf(m);
      for (mlir::Operation *x = later ? m->getNextNode() : at.getOperation(); ok && x != (later ? at : m);
           x = x->getNextNode()) {
        if (isMember(x))
          continue;
        auto k = mlir::dyn_cast<KernelOp>(x);
        ok = k && accesses.mayCross(acc, k);
      }
      if (!ok)
        break;
    }
    if (ok)
      return at;
  }
  return {};
}

/// Replaces the kernels `keep` and `other` (of one subroutine) by one kernel
/// of `keep`'s kind with `args` and `params`, where they may meet
/// (placement); false (nothing changed) when they cannot.
inline bool fusePair(mlir::OpBuilder &b, KernelOp keep, KernelOp other, llvm::ArrayRef<mlir::NamedAttribute> args,
                     mlir::DictionaryAttr params, const Accesses &accesses) {
  llvm::SmallVector<KernelOp> members{keep, other};
  if (other->isBeforeInBlock(keep))
    std::swap(members[0], members[1]);
  KernelOp at = placement(members, accesses);
  if (!at)
    return false;
  b.setInsertionPoint(at);
  KernelOp::create(b, keep.getLoc(), keep.getKernelAttr(), b.getDictionaryAttr(args), params);
  keep.erase();
  other.erase();
  return true;
}

} // namespace llcdist::plan

#endif
