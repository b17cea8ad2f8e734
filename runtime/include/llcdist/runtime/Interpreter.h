// Executes one program of a validated plan (Plan.h) on a Backend (Backend.h).
//
// create() allocates the program's arena on the backend (zero-filled) and binds every op once: buffer
// ids become device addresses, attrs become a KernelCall, RoPE tables are built. runStep(step) then
// runs the program's actions in order; an action runs its subroutine's ops in order on the default
// stream. Ops other than load_microbatch are backend launches; load_microbatch asks the data source
// for the (step, microbatch) batch and copies it into its ids/targets buffers. Optimizer ops (adamw,
// sgd) get the step's learning rate and t = step + 1.
//
// Multi-rank plans: the interpreter runs one rank (`rank`, its global rank in the manifest's mesh).
// Collective ops (all_reduce, all_gather, reduce_scatter) and grad_norm's `sharded` list act on the
// group of `rank` on the op's `axis` (Mesh::group); all_reduce issues one backend all-reduce per buffer
// of `x`, in list order, and every collective is waited for on the default stream before the next op.
// Ops with attr `shard_axis` (vocabulary-parallel embedding and cross entropy) get the group of `rank`
// on that axis and the rank's vocabulary slice (KernelCall::vocabShard); the cross entropy's
// all-reduces run inside its kernel launch, through the backend. Position embeddings with `shard_axis`
// (sequence parallelism) get KernelCall::posBegin = c·S, c the rank's coordinate on that axis.
// grad_norm with `stage_axis` gets the rank's group on that axis (KernelCall::stageGroup).
// Pipeline plans: send / recv resolve their peer once, at bind time: the global rank with this rank's
// coordinates except `peer` on `axis` (Mesh::withCoord); a peer equal to the rank's own coordinate is a
// bind error naming the op. At run time they call the backend's sendAsync / recvAsync with the op's tag
// and the running action's microbatch (-1 when it has none), and wait for them on the default stream.
// The data source is per rank: the caller binds the rank's dp coordinate into it (Train.h).
//
// Errors from an op carry where it is: "<program file>: subroutine 'backward' op 3 (linear_bwd_input,
// loc 'h.0.mlp.c_fc'): <kernel message>".
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt {

// Fills ids[B·S] and targets[B·S] (row-major [B,S]) of microbatch `microbatch` at `step` for this
// program's data-parallel rank.
using MicrobatchSource =
    std::function<Status(int64_t step, int64_t microbatch, int32_t* ids, int32_t* targets, int64_t B, int64_t S)>;

class Interpreter {
public:
  // `plan` and `backend` must outlive the interpreter. The backend must not have an arena yet. `rank`
  // is the global rank this interpreter runs (in [0, world size), one of programs[programIndex]'s ranks).
  static StatusOr<std::unique_ptr<Interpreter>> create(const Plan& plan, size_t programIndex, Backend& backend,
                                                       int rank = 0);
  int rank() const { return rank_; }
  size_t programIndex() const { return programIndex_; }  // index into plan.programs

  const Program& program() const { return *program_; }
  Backend& backend() { return *backend_; }

  // Runs every action of the program once: one training step. `lr` is the step's learning rate.
  Status runStep(int64_t step, double lr, const MicrobatchSource& data);
  // Runs one subroutine (by index) with the given microbatch (-1: none); for tests and tools.
  Status runSubroutine(size_t subroutine, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data);

  // Host <-> buffer copies of a whole buffer (the host side has buffer.bytes bytes); synchronous.
  Status readBuffer(int64_t id, void* dst);
  Status writeBuffer(int64_t id, const void* src);
  StatusOr<std::vector<float>> readF32(int64_t id);

private:
  struct BoundOp {
    KernelCall call;
    const Op* op = nullptr;
    std::shared_ptr<RopeTable> rope;
  };
  Interpreter() = default;
  Status bind(const Op& op, BoundOp* out);
  Status runCollective(const BoundOp& bound);
  Status runPointToPoint(const BoundOp& bound, int64_t microbatch);
  Status runOp(const BoundOp& bound, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data);
  std::string where(size_t subroutine, size_t opIndex) const;

  const Plan* plan_ = nullptr;
  const Program* program_ = nullptr;
  Backend* backend_ = nullptr;
  int rank_ = 0;
  size_t programIndex_ = 0;
  Stream stream_;
  std::vector<std::vector<BoundOp>> subroutines_;  // parallel to program_->subroutines
  std::vector<int32_t> idsHost_, targetsHost_;      // load_microbatch staging
};

}  // namespace llcdist::rt
