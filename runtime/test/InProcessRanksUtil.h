// Test helper: every rank of a one-program plan as a thread, on one in-process communicator and a CPU
// backend each.
#pragma once

#include "PlanTestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace llcdist::rt::testing {

// The interpreters of every rank, and each rank's outcome.
struct Ranks {
  Plan plan;
  std::unique_ptr<Communicator> comm;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Interpreter>> in;
  std::vector<Status> status;
};

// Loads `b`, then on every rank (a thread each) writes its inputs (`write`) and runs subroutine 0; a
// failing rank aborts the communicator, so the others return instead of waiting out the timeout.
// nullptr (with a test failure) when the plan does not load.
inline std::unique_ptr<Ranks> runRanks(const PlanBuilder& b, const std::function<Status(int, Interpreter&)>& write) {
  auto out = std::make_unique<Ranks>();
  auto plan = parsePlan(b, false);
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  if (!plan.isOk()) return nullptr;
  out->plan = std::move(plan).value();
  const int world = int(out->plan.manifest.worldSize());
  InProcessCommunicatorOptions co;
  co.worldSize = world;
  co.mesh = out->plan.manifest.mesh();
  co.timeout = std::chrono::seconds(20);
  out->comm = makeInProcessCommunicator(co);
  for (int r = 0; r < world; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = out->comm.get();
    out->backends.push_back(makeCpuBackend(bo));
    auto i = Interpreter::create(out->plan, 0, *out->backends.back(), r);
    EXPECT_TRUE(i.isOk()) << i.status().message();
    if (!i.isOk()) return nullptr;
    out->in.push_back(std::move(i).value());
  }
  out->status.resize(size_t(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Interpreter& it = *out->in[size_t(r)];
      Status s = write(r, it);
      out->status[size_t(r)] = s.isOk() ? it.runSubroutine(0, 0, -1, 0.0, nullptr) : s;
      if (!out->status[size_t(r)].isOk()) out->comm->abort(out->status[size_t(r)]);
    });
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace llcdist::rt::testing
