//===- PipelineSendTime.cpp - a pipeline stage's transfers ----------------===//
//
// PipelineSendTime.h: one stage's sends, receives and scatter/gather
// all-gathers per microbatch, as llc-dist's plans or Megatron-LM run them.
//
//===----------------------------------------------------------------------===//
#include "PipelineSendTime.h"

using namespace llcdist;
using namespace llcdist::cost;

detail::PipelineSends detail::pipelineSends(const Hardware &hw, const Workload &w, const ParallelConfig &c, int64_t T,
                                            double b) {
  PipelineSends out;
  out.pp = c.pp, out.virtualStages = c.virtualStages, out.megatron = w.scatterGatherP2P;
  if (c.pp == 1)
    return out;
  const double bytes = double(T) * double(w.model.hidden) * b / (c.sequenceParallel ? double(c.tp) : 1.0);
  const bool cross = axisGroup(c.mesh(), "pp", hw.topology).crossesNodes();
  // Scatter/gather: each tp rank sends its 1/tp of the (replicated)
  // activation, the receivers all-gather it.
  const bool scatterGather = (w.scatterGatherP2P || c.scatterGatherP2P) && c.scatterGatherApplies();
  out.send = p2pSeconds(hw, scatterGather ? bytes / double(c.tp) : bytes, cross);
  if (scatterGather)
    out.gather = collectiveSeconds(hw, Collective::AllGather, bytes, axisGroup(c.mesh(), "tp", hw.topology));
  return out;
}
