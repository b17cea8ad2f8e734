//===- PipelineSendTime.h - a pipeline stage's transfers ---------*- C++ -*-===//
//
// StepModel.cpp's pipeline sends and receives, apart: predictStep prices each
// stage's per-microbatch transfers and the fill's and drain's hops with them.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_COST_PIPELINESENDTIME_H
#define LLCDIST_LIB_COST_PIPELINESENDTIME_H

#include "llcdist/Cost/StepModel.h"

#include <cstdint>

namespace llcdist::cost::detail {
/// One stage's pipeline transfers, synchronous on compute (no --overlap-p2p
/// in the search): an activation's (or its gradient's) trip to the next
/// stage is one `send` and, under scatter/gather, the receivers' `gather`.
struct PipelineSends {
  double send = 0, gather = 0;
  int64_t pp = 1, virtualStages = 1;
  bool megatron = false; ///< Workload::scatterGatherP2P
  /// One hop (the fill's and the drain's).
  double hop() const { return send + gather; }
  /// What stage `st`'s transfers occupy of its timeline per microbatch.
  /// Megatron-LM posts a stage's send of one direction with its receive of
  /// the other (batch_isend_irecv): one transfer each way per chunk.
  /// llc-dist's plans run `send` and `recv` as two synchronous ops, so a
  /// stage is busy for both: per chunk it receives and sends the activation
  /// and its gradient (but for the model's first chunk, on stage 0, and its
  /// last, on the last stage), and all-gathers what it receives.
  double perMicrobatch(int64_t st) const {
    if (pp == 1)
      return 0;
    const double v = double(virtualStages);
    if (megatron)
      return 2 * v * hop();
    const double ends = double(st == 0) + double(st == pp - 1);
    return (4 * v - 2 * ends) * send + (2 * v - ends) * gather;
  }
};

/// The transfers of a microbatch of `T` tokens (`b` bytes an element) over
/// the pp axis of `c`, as `w`'s software runs them.
PipelineSends pipelineSends(const Hardware &hw, const Workload &w, const ParallelConfig &c, int64_t T, double b);
} // namespace llcdist::cost::detail

#endif
