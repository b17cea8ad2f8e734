//===- PlannedCompile.cpp - a planner configuration as a compilation ------===//
//
// PlannedCompile.h. Each field of ParallelConfig to the option its
// compileFlags() flag sets.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Pipelines/PlannedCompile.h"

using namespace llcdist;

PlannedCompile llcdist::plannedCompile(const cost::Workload &w, const cost::ParallelConfig &c) {
  PlannedCompile p;
  p.shape.seqLen = w.seqLen;
  p.shape.microBatch = c.microBatch;
  p.shape.globalBatch = w.globalBatch;
  p.shape.dtype = w.precision == cost::Precision::BF16 ? "bf16" : "f32";
  p.shape.moeCapacityFactor = w.moeCapacityFactor;
  p.mesh = c.mesh();
  TrainingPipelineOptions &t = p.options;
  t.zero = c.zero;
  t.recompute = c.recompute;
  t.pipelineSchedule = c.schedule;
  t.virtualStages = c.virtualStages;
  t.sequenceParallel = c.sequenceParallel;
  t.scatterGatherP2P = c.scatterGatherP2P;
  t.gradBucketSize = c.gradBucket;
  t.fsdpPrefetch = c.fsdpPrefetch;
  if (c.cp > 1)
    t.cpImpl = c.cpImpl;
  return p;
}
