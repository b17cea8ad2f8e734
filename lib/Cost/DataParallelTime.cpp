//===- DataParallelTime.cpp - the data-parallel group's step time --------===//
//
// DataParallelTime.h: the gradient reduction (and ZeRO's parameter gathers)
// of one rank over its data-parallel group, as llc-dist's plans run them.
//
//===----------------------------------------------------------------------===//
#include "DataParallelTime.h"

#include <algorithm>
#include <cmath>

using namespace llcdist;
using namespace llcdist::cost;

std::pair<double, double> cost::detail::dataParallelSeconds(const Hardware &hw, const ParallelConfig &c, const Group &g,
                                                            double rankParams, int64_t maxTensors, int64_t maxLayers,
                                                            double layerF, double layerB, int64_t mbs, double b) {
  double dpTotal = 0, dpExposed = 0;
  // As the compiler emits them (docs/cost-model.md): ZeRO's collectives
  // one per parameter tensor (each paying the ring's latency), ZeRO-0's one
  // flat all-reduce, or one per bucket. `g`: the group they reduce over.
  const double gradBytes = rankParams * b;
  const double tensors = double(maxTensors);
  const double layersHere = double(maxLayers);
  // `n` collectives of `bytes` in all.
  auto many = [&](Collective k, double bytes, double n) {
    return collectiveSeconds(hw, k, bytes, g) + (n - 1) * collectiveLatency(hw, k, g);
  };
  // What the last microbatch's backward can hide (the buckets start as
  // their gradients complete; the last bucket is exposed).
  const double lastBackward = layersHere * layerB;
  auto hiddenBy = [&](double comm, double n) {
    return std::max(0.0, std::min(comm * (1 - 1 / std::max(n, 1.0)), lastBackward));
  };
  const double agStep = many(Collective::AllGather, gradBytes, tensors);
  if (c.zero == 0) {
    double buckets = c.gradBucket ? std::min(tensors, std::ceil(rankParams / double(c.gradBucket))) : 1;
    dpTotal = many(Collective::AllReduce, gradBytes, buckets);
    dpExposed = dpTotal - (c.gradBucket ? hiddenBy(dpTotal, buckets) : 0);
  } else if (c.zero == 1) {
    double rs = many(Collective::ReduceScatter, gradBytes, tensors);
    dpTotal = rs + agStep; // the updated parameters gathered at the step's start
    dpExposed = dpTotal - (c.gradBucket ? hiddenBy(rs, tensors) : 0);
  } else {
    // ZeRO-2/3: every microbatch reduce-scatters every gradient in its
    // backward, synchronously.
    double rs = double(mbs) * many(Collective::ReduceScatter, gradBytes, tensors);
    dpTotal = rs;
    dpExposed = rs;
    if (c.zero == 2) {
      dpTotal += agStep;
      dpExposed += agStep;
    } else {
      // ZeRO-3: every parameter gathered per microbatch in the forward and
      // again in the backward; with prefetch on the comm queue, a layer's
      // gathers hide under the previous layer's compute where they fit.
      double ag = 2 * double(mbs) * agStep;
      dpTotal += ag;
      double agLayer = agStep / layersHere;
      dpExposed += c.fsdpPrefetch
                       ? double(mbs) * layersHere * (std::max(0.0, agLayer - layerF) + std::max(0.0, agLayer - layerB))
                       : ag;
    }
  }

  return {dpTotal, dpExposed};
}
