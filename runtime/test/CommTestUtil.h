// Test helpers for the communicator tests: ranks as threads on one in-process communicator.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Mesh.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace llcdist::rt::testing {

// Runs fn(rank) on `world` threads; returns every rank's status.
inline std::vector<Status> onRanks(int world, const std::function<Status(int)>& fn) {
  std::vector<Status> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { out[size_t(r)] = fn(r); });
  for (std::thread& t : threads) t.join();
  return out;
}

inline void expectAllOk(const std::vector<Status>& s) {
  for (size_t r = 0; r < s.size(); ++r) EXPECT_TRUE(s[r].isOk()) << "rank " << r << ": " << s[r].message();
}

// An in-process communicator for every rank of `mesh`.
inline std::unique_ptr<Communicator> makeComm(const Mesh& mesh,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  InProcessCommunicatorOptions o;
  o.worldSize = int(mesh.worldSize());
  o.mesh = mesh;
  o.timeout = timeout;
  return makeInProcessCommunicator(o);
}

}  // namespace llcdist::rt::testing
