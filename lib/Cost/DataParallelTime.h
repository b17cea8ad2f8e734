//===- DataParallelTime.h - the data-parallel group's step time -*- C++ -*-===//
//
// StepModel.cpp's gradient reduction over the data-parallel group (and
// ZeRO's parameter gathers), apart: predictStep calls it once per group (dp,
// and edp for the experts under expert parallelism).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_COST_DATAPARALLELTIME_H
#define LLCDIST_LIB_COST_DATAPARALLELTIME_H

#include "llcdist/Cost/StepModel.h"

#include <cstdint>
#include <utility>

namespace llcdist::cost::detail {
/// The data-parallel group's communication over the step (dp, or dp × cp
/// under context parallelism: one group; under expert parallelism called
/// for the dense parameters over dp and the experts' over edp), in all and
/// exposed: gradients and (ZeRO) parameters of the busiest stage's rank
/// (`rankParams` elements of `b` bytes in `maxTensors` tensors over
/// `maxLayers` layers of `layerF` / `layerB` seconds each, `mbs`
/// microbatches), reduced over `g`.
std::pair<double, double> dataParallelSeconds(const Hardware &hw, const ParallelConfig &c, const Group &g,
                                              double rankParams, int64_t maxTensors, int64_t maxLayers, double layerF,
                                              double layerB, int64_t mbs, double b);
} // namespace llcdist::cost::detail

#endif
