//===- Generators.cpp - GPipe, 1F1B, interleaved 1F1B, ZB-H1 --------------===//
#include "llcdist/Schedule/Schedule.h"

#include <algorithm>
#include <optional>

using namespace llcdist::schedule;

namespace {

std::optional<Error> checkCounts(int64_t p, int64_t m) {
  if (p < 1)
    return Error{"pipeline stages must be >= 1 (got p=" + std::to_string(p) +
                 ")"};
  if (m < 1)
    return Error{"microbatches must be >= 1 (got m=" + std::to_string(m) +
                 "); m = global batch / (micro-batch size x dp)"};
  return std::nullopt;
}

Schedule empty(ScheduleKind kind, int64_t p, int64_t m, int64_t v,
               bool split) {
  Schedule s;
  s.kind = kind;
  s.stages = p;
  s.microbatches = m;
  s.virtualStages = v;
  s.splitBackward = split;
  s.perStage.resize((size_t)p);
  return s;
}

Action F(int64_t mb, int64_t c = 0) { return {ActionKind::F, mb, c}; }
Action B(int64_t mb, int64_t c = 0) { return {ActionKind::B, mb, c}; }
Action W(int64_t mb, int64_t c = 0) { return {ActionKind::W, mb, c}; }

} // namespace

Expected<Schedule> llcdist::schedule::generateGPipe(int64_t p, int64_t m) {
  if (auto e = checkCounts(p, m))
    return *e;
  Schedule sch = empty(ScheduleKind::GPipe, p, m, 1, false);
  for (auto &list : sch.perStage) {
    for (int64_t i = 0; i < m; ++i)
      list.push_back(F(i));
    for (int64_t i = 0; i < m; ++i)
      list.push_back(B(i));
  }
  return sch;
}

Expected<Schedule> llcdist::schedule::generate1F1B(int64_t p, int64_t m) {
  if (auto e = checkCounts(p, m))
    return *e;
  Schedule sch = empty(ScheduleKind::OneFOneB, p, m, 1, false);
  for (int64_t s = 0; s < p; ++s) {
    auto &list = sch.perStage[s];
    int64_t warmup = std::min(p - 1 - s, m);
    for (int64_t i = 0; i < warmup; ++i)
      list.push_back(F(i));
    for (int64_t i = 0; i < m - warmup; ++i) {
      list.push_back(F(warmup + i));
      list.push_back(B(i));
    }
    for (int64_t i = m - warmup; i < m; ++i)
      list.push_back(B(i));
  }
  return sch;
}

Expected<Schedule> llcdist::schedule::generateInterleaved1F1B(int64_t p,
                                                              int64_t m,
                                                              int64_t v) {
  if (auto e = checkCounts(p, m))
    return *e;
  if (v < 1)
    return Error{"virtual stages per device must be >= 1 (got v=" +
                 std::to_string(v) + ")"};
  if (m % p != 0)
    return Error{"interleaved 1F1B needs the number of microbatches to be a "
                 "multiple of the pipeline stages: m=" +
                 std::to_string(m) + " is not a multiple of p=" +
                 std::to_string(p) + " (use m=" +
                 std::to_string(std::max<int64_t>(p, m / p * p)) + " or m=" +
                 std::to_string((m / p + 1) * p) + ")"};
  if (v == 1) {
    Expected<Schedule> s = generate1F1B(p, m);
    if (s)
      s->kind = ScheduleKind::Interleaved1F1B;
    return s;
  }
  Schedule sch = empty(ScheduleKind::Interleaved1F1B, p, m, v, false);
  // Megatron-LM (schedules.py, forward_backward_pipelining_with_interleaving):
  // the k-th forward on a device runs chunk (k mod pv) / p of microbatch
  // (k / pv) p + k mod p; backwards visit the chunks in reverse.
  const int64_t total = m * v, group = p * v;
  auto fwd = [&](int64_t k) {
    return F((k / group) * p + k % p, (k % group) / p);
  };
  auto bwd = [&](int64_t k) {
    return B((k / group) * p + k % p, v - 1 - (k % group) / p);
  };
  for (int64_t s = 0; s < p; ++s) {
    auto &list = sch.perStage[s];
    int64_t warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
    for (int64_t k = 0; k < warmup; ++k)
      list.push_back(fwd(k));
    for (int64_t k = 0; k < total - warmup; ++k) {
      list.push_back(fwd(warmup + k));
      list.push_back(bwd(k));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      list.push_back(bwd(k));
  }
  return sch;
}

Expected<Schedule> llcdist::schedule::generateZBH1(int64_t p, int64_t m) {
  if (auto e = checkCounts(p, m))
    return *e;
  Schedule sch = empty(ScheduleKind::ZBH1, p, m, 1, true);
  for (int64_t s = 0; s < p; ++s) {
    auto &list = sch.perStage[s];
    // 1F1B's forward/backward order; W(i - s) follows the i-th backward, so
    // stage s keeps s weight gradients back and runs them after its last
    // backward, where 1F1B's cool-down leaves stage s idle.
    int64_t warmup = std::min(p - 1 - s, m), nextW = 0;
    for (int64_t i = 0; i < warmup; ++i)
      list.push_back(F(i));
    for (int64_t i = 0; i < m; ++i) {
      if (warmup + i < m)
        list.push_back(F(warmup + i));
      list.push_back(B(i));
      if (i >= s)
        list.push_back(W(nextW++));
    }
    while (nextW < m)
      list.push_back(W(nextW++));
  }
  return sch;
}

Expected<Schedule>
llcdist::schedule::generateSchedule(const ScheduleOptions &o) {
  if (o.virtualStages < 1)
    return Error{"virtual stages per device must be >= 1 (got v=" +
                 std::to_string(o.virtualStages) + ")"};
  if (o.virtualStages != 1 && o.kind != ScheduleKind::Interleaved1F1B)
    return Error{std::string("virtual stages (v=") +
                 std::to_string(o.virtualStages) +
                 ") apply only to the interleaved schedule, not " +
                 kindName(o.kind)};
  switch (o.kind) {
  case ScheduleKind::GPipe:
    return generateGPipe(o.stages, o.microbatches);
  case ScheduleKind::OneFOneB:
    return generate1F1B(o.stages, o.microbatches);
  case ScheduleKind::Interleaved1F1B:
    return generateInterleaved1F1B(o.stages, o.microbatches, o.virtualStages);
  case ScheduleKind::ZBH1:
    return generateZBH1(o.stages, o.microbatches);
  case ScheduleKind::Custom:
    break;
  }
  return Error{"a custom schedule cannot be generated; parse it instead"};
}
