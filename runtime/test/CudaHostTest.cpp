// The CUDA backend's host logic, on the CPU (no CUDA needed): the NCCL channel plan derived from the
// mesh's groups (every rank's split calls create exactly its groups, with members in order), the
// bootstrap's message encoding, and the bootstrap's message flow over the in-process communicator
// (every rank ends with rank 0's unique id and the same plan).
#include "cuda/host/NcclPlan.h"

#include "llcdist/runtime/Mesh.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace llcdist::rt::cuda {
namespace {

// Every rank's groups as a plan would have them: each mesh axis of size > 1 at the rank's coordinates.
std::vector<std::vector<Group>> meshGroups(const Mesh& mesh) {
  std::vector<std::vector<Group>> out(size_t(mesh.worldSize()));
  for (int64_t r = 0; r < mesh.worldSize(); ++r)
    for (MeshAxis axis : {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}) {
      Group g = mesh.group(r, axis);
      if (g.size() > 1) out[size_t(r)].push_back(g);
    }
  return out;
}

// Simulates ncclCommSplit: in each round, the ranks with one color form a communicator whose ranks are
// ordered by key. Returns, per rank, the member lists of the communicators it got.
std::vector<std::set<Group>> simulateSplits(const std::vector<NcclChannelPlan>& plans) {
  const size_t world = plans.size();
  std::vector<std::set<Group>> got(world);
  const size_t rounds = plans[0].calls.size();
  for (size_t round = 0; round < rounds; ++round) {
    std::map<int, std::vector<std::pair<int, int>>> byColor;  // color -> (key, rank)
    for (size_t r = 0; r < world; ++r) {
      const NcclSplitCall& c = plans[r].calls[round];
      if (c.color >= 0) byColor[c.color].push_back({c.key, int(r)});
    }
    for (auto& [color, members] : byColor) {
      std::sort(members.begin(), members.end());
      Group g;
      for (size_t i = 0; i < members.size(); ++i) {
        EXPECT_EQ(members[i].first, int(i)) << "keys of one communicator are its members' indices";
        g.push_back(members[i].second);
      }
      for (int r : g) got[size_t(r)].insert(g);
    }
  }
  return got;
}

TEST(NcclChannelPlanTest, EverySplitCreatesExactlyTheRanksGroups) {
  for (auto [dp, tp, pp] : {std::tuple{2, 2, 2}, {4, 2, 1}, {1, 8, 1}, {2, 1, 4}, {3, 2, 2}}) {
    const Mesh mesh = Mesh::make(dp, tp, pp);
    const std::vector<std::vector<Group>> groups = meshGroups(mesh);
    std::vector<NcclChannelPlan> plans;
    for (int r = 0; r < int(mesh.worldSize()); ++r) {
      StatusOr<NcclChannelPlan> p = planNcclChannels(groups, r);
      ASSERT_TRUE(p.isOk()) << p.status().toString();
      plans.push_back(*p);
    }
    // Every rank makes the same number of split calls (ncclCommSplit is collective over the world).
    for (const NcclChannelPlan& p : plans) ASSERT_EQ(p.calls.size(), plans[0].calls.size());
    // One round per mesh axis of size > 1: an axis's groups partition the world.
    EXPECT_EQ(plans[0].rounds.size(), size_t((dp > 1) + (tp > 1) + (pp > 1))) << mesh.describe();
    const std::vector<std::set<Group>> got = simulateSplits(plans);
    for (size_t r = 0; r < plans.size(); ++r) {
      const std::set<Group> want(groups[r].begin(), groups[r].end());
      EXPECT_EQ(got[r], want) << "rank " << r << " of " << mesh.describe();
      for (const Group& g : groups[r]) EXPECT_EQ(plans[r].roundOf.count(g), 1u);
    }
  }
}

TEST(NcclChannelPlanTest, OverlappingGroupsGoToSeparateRoundsAndSingletonsNeedNone) {
  // Rank 0 is in {0,1} and {0,2}: they cannot come from one split; {3} needs no communicator.
  const std::vector<std::vector<Group>> groups = {{{0, 1}, {0, 2}}, {{0, 1}}, {{0, 2}}, {{3}}};
  std::vector<NcclChannelPlan> plans;
  for (int r = 0; r < 4; ++r) plans.push_back(*planNcclChannels(groups, r));
  EXPECT_EQ(plans[0].rounds.size(), 2u);
  EXPECT_EQ(plans[3].calls[0].color, -1);
  EXPECT_EQ(plans[3].calls[1].color, -1);
  EXPECT_EQ(plans[3].roundOf.size(), 0u);
  const std::vector<std::set<Group>> got = simulateSplits(plans);
  EXPECT_EQ(got[0], (std::set<Group>{{0, 1}, {0, 2}}));
  EXPECT_EQ(got[3].size(), 0u);
}

TEST(NcclChannelPlanTest, RejectsInconsistentGroups) {
  auto err = [](const std::vector<std::vector<Group>>& g, int rank) {
    StatusOr<NcclChannelPlan> p = planNcclChannels(g, rank);
    return p.isOk() ? std::string() : p.status().message();
  };
  EXPECT_NE(err({{{0, 1}}, {{1, 0}}}, 0).find("same members in different orders"), std::string::npos);
  EXPECT_NE(err({{{0, 2}}, {{1}}}, 0).find("outside [0, 2)"), std::string::npos);
  EXPECT_NE(err({{{1}}, {{1}}}, 0).find("does not contain the rank"), std::string::npos);
  EXPECT_NE(err({{{0, 0}}, {{1}}}, 0).find("twice"), std::string::npos);
  EXPECT_NE(err({{{0}}}, 3).find("outside a world"), std::string::npos);
}

TEST(NcclBootstrapTest, WordsRoundTripAndRejectJunk) {
  NcclId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(i * 37 + 5);
  const std::vector<Group> groups = {{0, 1, 2, 3}, {2, 6}};
  std::vector<double> w = encodeBootstrapWords(id, groups);
  w.resize(w.size() + 3, 0.0);  // padding to a longer message
  auto back = decodeBootstrapWords(w.data(), int64_t(w.size()), 8);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->first, id);
  EXPECT_EQ(back->second, groups);
  std::vector<double> bad = w;
  bad[3] = 256;  // not a byte
  EXPECT_FALSE(decodeBootstrapWords(bad.data(), int64_t(bad.size()), 8).isOk());
  bad = w;
  bad[130] = 9;  // a member past the world
  EXPECT_FALSE(decodeBootstrapWords(bad.data(), int64_t(bad.size()), 8).isOk());
  bad = w;
  bad.back() = 1;  // junk after the message
  EXPECT_FALSE(decodeBootstrapWords(bad.data(), int64_t(bad.size()), 8).isOk());
  EXPECT_FALSE(decodeBootstrapWords(w.data(), 100, 8).isOk());  // truncated
}

TEST(NcclBootstrapTest, EveryRankGetsRankZerosIdAndTheSamePlan) {
  const Mesh mesh = Mesh::make(2, 2, 2);
  const std::vector<std::vector<Group>> groups = meshGroups(mesh);
  InProcessCommunicatorOptions co;
  co.worldSize = int(mesh.worldSize());
  std::unique_ptr<Communicator> comm = makeInProcessCommunicator(co);
  std::vector<StatusOr<NcclBootstrap>> got(size_t(co.worldSize), Status::internal("not run"));
  std::atomic<int> idsMade{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < co.worldSize; ++r)
    threads.emplace_back([&, r] {
      got[size_t(r)] = bootstrapNccl(*comm, r, groups[size_t(r)], [&]() -> StatusOr<NcclId> {
        ++idsMade;
        NcclId id{};
        for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(255 - i);
        return id;
      });
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(idsMade.load(), 1) << "only rank 0 makes the unique id";
  for (int r = 0; r < co.worldSize; ++r) {
    ASSERT_TRUE(got[size_t(r)].isOk()) << got[size_t(r)].status().toString();
    EXPECT_EQ(got[size_t(r)]->id[0], 255);
    EXPECT_EQ(got[size_t(r)]->id[127], 128);
    EXPECT_EQ(got[size_t(r)]->groupsOfRank, groups) << "rank " << r;
    const NcclChannelPlan a = *planNcclChannels(got[size_t(r)]->groupsOfRank, r);
    EXPECT_EQ(a.rounds, planNcclChannels(groups, 0)->rounds);
  }
}

TEST(NcclBootstrapTest, RankZerosFailureReachesEveryRank) {
  InProcessCommunicatorOptions co;
  co.worldSize = 2;
  co.timeout = std::chrono::milliseconds(2000);
  std::unique_ptr<Communicator> comm = makeInProcessCommunicator(co);
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto b = bootstrapNccl(*comm, r, {{0, 1}}, []() -> StatusOr<NcclId> {
        return Status::internal("ncclGetUniqueId: no network");
      });
      st[size_t(r)] = b.isOk() ? Status::ok() : b.status();
      if (!b.isOk()) comm->abort(b.status());  // what the driver does with a failed rank
    });
  for (std::thread& t : threads) t.join();
  EXPECT_NE(st[0].message().find("no network"), std::string::npos) << st[0].toString();
  EXPECT_FALSE(st[1].isOk()) << "rank 1 does not wait forever for rank 0";
}

}  // namespace
}  // namespace llcdist::rt::cuda
