// The CUDA backend's NCCL channel plan and bootstrap, host logic only (no CUDA or NCCL header: it is
// compiled and unit-tested everywhere, CudaHostTest.cpp).
//
// A plan channel is one communication group (Backend::createChannel). On NCCL each becomes a
// communicator split from the world communicator, created once at start-up: ncclCommSplit is
// collective over the world, so every rank must make the same sequence of split calls. The plan
// (planNcclChannels) derives that sequence from every rank's groups, gathered in the bootstrap: the
// distinct groups of all ranks, in the order rank 0's, rank 1's, ... list them, are dealt into rounds
// of pairwise disjoint groups (first fit; a mesh axis's groups, which partition the world, share one), and in round i every rank calls ncclCommSplit(world, color, key) with color = the index of
// its group in the round (or NCCL_SPLIT_NOCOLOR when it has none there) and key = its member index, so
// the split communicator's ranks are the group's members in member order. Point-to-point (send / recv)
// runs on the world communicator with the peer's global rank.
//
// The bootstrap (bootstrapNccl) runs over the run's host Communicator (in-process, or MPI with one
// process per rank, #10): rank 0 makes the NCCL unique id and all-gathers it with every rank's groups
// (each value carried exactly as an integer-valued f64), so every rank derives the same plan.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Status.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace llcdist::rt::cuda {

using Group = std::vector<int>;

struct NcclSplitCall {
  int color = -1;  // -1: NCCL_SPLIT_NOCOLOR (this rank is in no group of the round)
  int key = 0;     // this rank's member index in its group
};

struct NcclChannelPlan {
  // rounds[i]: the disjoint groups created by the i-th split, in color order.
  std::vector<std::vector<Group>> rounds;
  // This rank's arguments for each round's ncclCommSplit.
  std::vector<NcclSplitCall> calls;
  // Each of this rank's groups: the round whose split creates its communicator.
  std::map<Group, size_t> roundOf;
};

// The plan for `rank` given every rank's groups (groupsOfRank[r]: rank r's channels' groups; each group
// lists global ranks in member order and contains r). Errors: a group with a rank outside [0, world) or
// twice, a rank's group without that rank, two ranks listing the same members in different orders.
StatusOr<NcclChannelPlan> planNcclChannels(const std::vector<std::vector<Group>>& groupsOfRank, int rank);

// NCCL's unique id (ncclUniqueId: 128 bytes), as the bootstrap carries it.
using NcclId = std::array<unsigned char, 128>;

struct NcclBootstrap {
  NcclId id{};
  std::vector<std::vector<Group>> groupsOfRank;  // every rank's groups
};

// Every rank of the world calls this together (each on its own thread or process) with its groups;
// `makeId` is called on rank 0 only. Two all-gathers over the world group on `comm`: each rank's
// number of words, then the words (rank 0's id; each rank's groups), padded to the longest.
StatusOr<NcclBootstrap> bootstrapNccl(Communicator& comm, int rank, const std::vector<Group>& myGroups,
                                      const std::function<StatusOr<NcclId>()>& makeId);

// The words a rank contributes (exposed for the tests): [id bytes (128, zero but on rank 0)], number
// of groups, then per group its size and members; decodeBootstrapWords is the inverse for one rank.
std::vector<double> encodeBootstrapWords(const NcclId& id, const std::vector<Group>& groups);
StatusOr<std::pair<NcclId, std::vector<Group>>> decodeBootstrapWords(const double* words, int64_t n, int world);

}  // namespace llcdist::rt::cuda
