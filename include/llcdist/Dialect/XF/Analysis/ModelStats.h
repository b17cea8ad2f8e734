//===- ModelStats.h - parameter and FLOP counts from xf IR -----*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_ANALYSIS_MODELSTATS_H
#define LLCDIST_DIALECT_XF_ANALYSIS_MODELSTATS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llcdist::xf {

/// What the IR says about a model: counted, never estimated from a config.
struct ModelStats {
  int64_t parameters = 0;        ///< unique parameter elements
  int64_t layers = 0;            ///< xf.layer calls in the entry function
  int64_t tokensPerMicrobatch = 0; ///< batch × sequence of the entry's ids
  int64_t seqLen = 0;
  double linearFlopsPerToken = 0;    ///< Σ 2·K·N over xf.linear
  double attentionFlopsPerToken = 0; ///< Σ 4·S·heads·head_dim over xf.attention
  double forwardFlopsPerToken() const {
    return linearFlopsPerToken + attentionFlopsPerToken;
  }
  /// Backward costs twice the forward (dX and dW GEMMs); no recomputation.
  double trainingFlopsPerToken() const { return 3 * forwardFlopsPerToken(); }
};

/// Forward FLOPs per token of one op (not following calls): 2·K·N for an
/// xf.linear, 4·S·heads·head_dim for an xf.attention (QKᵀ and PV over the
/// full S), 0 for anything else.
double forwardFlopsPerToken(mlir::Operation *op);

/// Unit attribute llcdist-recompute puts on a layer's forward call run again
/// before its backward (full recomputation) and on a recomputed attention.
constexpr const char kRecomputedAttr[] = "xf.recomputed";

/// The ops of `call`'s layer body `body` that a call computing only the
/// call's used results runs: every op a used result depends on, and every op
/// without results. A recomputed layer call (kRecomputedAttr) runs only
/// these: its backward reads the saved activations, not the layer's output,
/// so its last projection (with its reduction under tp) and residual add,
/// and its routers' load-balancing statistics, are not run again.
llvm::DenseSet<mlir::Operation *> opsForUsedResults(mlir::Operation *call, mlir::func::FuncOp body);

/// The ops of `body` a layer call runs: opsForUsedResults for a recomputed
/// call, nullopt (every op) for any other.
std::optional<llvm::DenseSet<mlir::Operation *>> opsRunBy(mlir::Operation *call, mlir::func::FuncOp body);

/// The function marked xf.entry, or null (with an error emitted on `module`).
mlir::func::FuncOp getEntryFunction(mlir::ModuleOp module);

/// The position in the training step's body where the backward begins (its
/// first loss gradient), or -1: forward ops before it, backward ops from it on.
int64_t backwardStart(mlir::Block &trainStep);

/// The entry function when it is a training step (llcdist-autodiff ran), or
/// null with an error naming `pass`: "<pass>: run llcdist-autodiff first".
mlir::func::FuncOp getTrainStep(mlir::ModuleOp module, llvm::StringRef pass);

/// The function marked xf.optimizer (llcdist-add-optimizer's step; the last
/// one where several are), or null. No diagnostic: callers say what is missing.
mlir::func::FuncOp getOptimizerStep(mlir::ModuleOp module);

/// The degrees of the module's @mesh, llcdist-attach-mesh's dp x tp x pp
/// grid (x cp when cp > 1).
struct MeshDegrees {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;
  /// Expert parallelism: ep consecutive dp ranks split the experts (the
  /// grid's `xf.ep`; MeshSpec's comment). size("ep"), size("edp") = dp / ep.
  int64_t ep = 1;
  /// The size of `axis`: one mesh axis, or several joined by '+' (their
  /// product: "dp+cp"); 0 for a name that is no axis.
  int64_t size(llvm::StringRef axis) const;
  /// The data-parallel group, over which gradients reduce and ZeRO shards:
  /// dp and cp (Megatron's dp × cp group under context parallelism), those
  /// of size > 1 ("dp+cp", "dp" or "cp"); "dp" when both are 1.
  std::string gradientAxis() const;
  /// The experts' data-parallel group (expertDataParallelAxis): "edp",
  /// "edp+cp" or "cp".
  std::string expertGradientAxis() const;
};
/// nullopt when the module has no @mesh, or one that is not a 3- or 4-axis
/// shard.grid (every degree is then 1 for a caller that takes the default).
std::optional<MeshDegrees> meshDegrees(mlir::ModuleOp module);

/// Counts parameters and FLOPs of `module`'s entry function, following its
/// xf.layer calls. Fails (with a diagnostic) when there is no entry function
/// or a parameter name is used with two different shapes.
mlir::FailureOr<ModelStats> computeModelStats(mlir::ModuleOp module);

} // namespace llcdist::xf

#endif
