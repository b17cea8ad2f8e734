// The NCCL channel plan and bootstrap (NcclPlan.h): host logic, no CUDA.
#include "NcclPlan.h"

#include <algorithm>
#include <set>
#include <string>

namespace llcdist::rt::cuda {
namespace {

std::string describe(const Group& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

}  // namespace

StatusOr<NcclChannelPlan> planNcclChannels(const std::vector<std::vector<Group>>& groupsOfRank, int rank) {
  const int world = int(groupsOfRank.size());
  if (rank < 0 || rank >= world)
    return Status::invalidArgument("NCCL channel plan: rank " + std::to_string(rank) + " outside a world of " +
                                   std::to_string(world));
  // The distinct groups of more than one rank (a group of one needs no communicator), checked.
  std::vector<Group> distinct;  // in discovery order (rank by rank), which every rank sees alike
  std::set<Group> seen;
  std::map<Group, Group> bySet;  // sorted members -> the order first seen
  for (int r = 0; r < world; ++r)
    for (const Group& g : groupsOfRank[size_t(r)]) {
      Group sorted = g;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        return Status::invalidArgument("NCCL channel plan: rank " + std::to_string(r) + "'s group " + describe(g) +
                                       " lists a rank twice");
      if (g.empty() || sorted.front() < 0 || sorted.back() >= world)
        return Status::invalidArgument("NCCL channel plan: rank " + std::to_string(r) + "'s group " + describe(g) +
                                       " has a rank outside [0, " + std::to_string(world) + ")");
      if (!std::binary_search(sorted.begin(), sorted.end(), r))
        return Status::invalidArgument("NCCL channel plan: rank " + std::to_string(r) + "'s group " + describe(g) +
                                       " does not contain the rank");
      auto [it, inserted] = bySet.emplace(sorted, g);
      if (!inserted && it->second != g)
        return Status::invalidArgument("NCCL channel plan: the groups " + describe(it->second) + " and " +
                                       describe(g) + " have the same members in different orders");
      if (g.size() > 1 && seen.insert(g).second) distinct.push_back(g);
    }
  NcclChannelPlan plan;
  std::vector<std::vector<bool>> used;  // used[round][rank]
  for (const Group& g : distinct) {
    size_t round = 0;
    for (; round < plan.rounds.size(); ++round)
      if (std::none_of(g.begin(), g.end(), [&](int m) { return used[round][size_t(m)]; })) break;
    if (round == plan.rounds.size()) {
      plan.rounds.emplace_back();
      used.emplace_back(size_t(world), false);
    }
    plan.rounds[round].push_back(g);
    for (int m : g) used[round][size_t(m)] = true;
  }
  for (size_t round = 0; round < plan.rounds.size(); ++round) {
    NcclSplitCall call;
    for (size_t c = 0; c < plan.rounds[round].size(); ++c) {
      const Group& g = plan.rounds[round][c];
      auto at = std::find(g.begin(), g.end(), rank);
      if (at == g.end()) continue;
      call.color = int(c);
      call.key = int(at - g.begin());
      plan.roundOf[g] = round;
    }
    plan.calls.push_back(call);
  }
  return plan;
}

std::vector<double> encodeBootstrapWords(const NcclId& id, const std::vector<Group>& groups) {
  std::vector<double> w;
  for (unsigned char b : id) w.push_back(double(b));
  w.push_back(double(groups.size()));
  for (const Group& g : groups) {
    w.push_back(double(g.size()));
    for (int m : g) w.push_back(double(m));
  }
  return w;
}

StatusOr<std::pair<NcclId, std::vector<Group>>> decodeBootstrapWords(const double* w, int64_t n, int world) {
  auto bad = [](const std::string& why) { return Status::dataLoss("NCCL bootstrap message: " + why); };
  // Every word is an integer in [lo, hi].
  auto word = [&](int64_t i, double lo, double hi, int64_t* out) -> Status {
    if (i >= n) return bad("truncated at word " + std::to_string(i));
    const double v = w[i];
    if (!(v >= lo && v <= hi) || v != double(int64_t(v)))
      return bad("word " + std::to_string(i) + " is " + std::to_string(v) + ", not an integer in [" +
                 std::to_string(int64_t(lo)) + ", " + std::to_string(int64_t(hi)) + "]");
    *out = int64_t(v);
    return Status::ok();
  };
  std::pair<NcclId, std::vector<Group>> out;
  int64_t i = 0, v = 0;
  for (unsigned char& b : out.first) {
    LLCDIST_RETURN_IF_ERROR(word(i++, 0, 255, &v));
    b = static_cast<unsigned char>(v);
  }
  int64_t groups = 0;
  LLCDIST_RETURN_IF_ERROR(word(i++, 0, double(n), &groups));
  for (int64_t g = 0; g < groups; ++g) {
    int64_t size = 0;
    LLCDIST_RETURN_IF_ERROR(word(i++, 1, double(world), &size));
    Group members;
    for (int64_t k = 0; k < size; ++k) {
      LLCDIST_RETURN_IF_ERROR(word(i++, 0, double(world - 1), &v));
      members.push_back(int(v));
    }
    out.second.push_back(std::move(members));
  }
  for (; i < n; ++i)  // the padding to the longest message
    if (w[i] != 0) return bad("word " + std::to_string(i) + " past the message is not padding");
  return out;
}

StatusOr<NcclBootstrap> bootstrapNccl(Communicator& comm, int rank, const std::vector<Group>& myGroups,
                                      const std::function<StatusOr<NcclId>()>& makeId) {
  const int world = comm.worldSize();
  Group all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) all[size_t(r)] = r;
  NcclId id{};
  if (rank == 0) {
    LLCDIST_ASSIGN_OR_RETURN(id, makeId());
  }
  std::vector<double> words = encodeBootstrapWords(id, myGroups);
  // Round 1: every rank's message length; round 2: the messages, padded to the longest.
  const double mine = double(words.size());
  std::vector<double> lengths(static_cast<size_t>(world));
  LLCDIST_RETURN_IF_ERROR(comm.allGather(rank, all, &mine, lengths.data(), 1, 1, CommDType::kF64)
                              .withContext("NCCL bootstrap: exchanging the message lengths"));
  const int64_t longest = int64_t(*std::max_element(lengths.begin(), lengths.end()));
  words.resize(size_t(longest), 0.0);
  std::vector<double> gathered(size_t(world) * size_t(longest));
  LLCDIST_RETURN_IF_ERROR(comm.allGather(rank, all, words.data(), gathered.data(), 1, longest, CommDType::kF64)
                              .withContext("NCCL bootstrap: exchanging the unique id and the groups"));
  NcclBootstrap out;
  out.groupsOfRank.resize(size_t(world));
  for (int r = 0; r < world; ++r) {
    auto decoded = decodeBootstrapWords(gathered.data() + size_t(r) * size_t(longest), longest, world);
    if (!decoded.isOk()) return Status(decoded.status()).withContext("from rank " + std::to_string(r));
    if (r == 0) out.id = decoded->first;
    out.groupsOfRank[size_t(r)] = std::move(decoded->second);
  }
  return out;
}

}  // namespace llcdist::rt::cuda
