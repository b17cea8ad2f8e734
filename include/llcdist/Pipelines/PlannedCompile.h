//===- PlannedCompile.h - a planner configuration as a compilation -*- C++ -*-===//
//
// What `llc-dist plan`'s configuration compiles as: the step's shape, the
// mesh and the training pipeline's options that `llc-dist compile` gets from
// the flags ParallelConfig::compileFlags() prints. One mapping, here, for the
// planner's exact check (tools/llc-dist/PlanCmd.cpp) and anything else that
// compiles a planned configuration.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_PIPELINES_PLANNEDCOMPILE_H
#define LLCDIST_PIPELINES_PLANNEDCOMPILE_H

#include "llcdist/Cost/StepModel.h"
#include "llcdist/Pipelines/Pipelines.h"

namespace llcdist {

struct PlannedCompile {
  TrainingShape shape;
  MeshSpec mesh;
  TrainingPipelineOptions options; ///< compileInMemory sets its mesh from `mesh`
};

/// Configuration `c` of workload `w` (global batch, sequence length,
/// precision) as a compilation, every other option at its default.
PlannedCompile plannedCompile(const cost::Workload &w, const cost::ParallelConfig &c);

} // namespace llcdist

#endif // LLCDIST_PIPELINES_PLANNEDCOMPILE_H
