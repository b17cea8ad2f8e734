//===- CommVerifier.cpp - static cross-rank communication verifier --------===//
#include "llcdist/Verify/CommVerifier.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

using namespace llcdist;
using namespace llcdist::verify;

//===----------------------------------------------------------------------===//
// Events and results
//===----------------------------------------------------------------------===//

namespace {
/// The pool behind Name: node-based, so the strings never move; never freed
/// (names live as long as the process, and there are few).
struct NamePool {
  std::mutex mutex;
  std::unordered_set<std::string> names;
};
NamePool &namePool() {
  static NamePool *pool = new NamePool;
  return *pool;
}
const std::string *intern(std::string_view text) {
  NamePool &pool = namePool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  return &*pool.names.emplace(text).first;
}
} // namespace

Name::Name() {
  // Events are default-constructed in bulk: the empty name is looked up once.
  static const std::string *empty = intern({});
  text = empty;
}
Name::Name(std::string_view text) : text(intern(text)) {}

const std::vector<int64_t> &CommEvent::members() const {
  static const std::vector<int64_t> kNoMembers;
  return group ? *group : kNoMembers;
}

CommEvent CommEvent::send(int64_t to, int64_t count, Name dtype,
                          std::string provenance, std::optional<int64_t> tag) {
  CommEvent e;
  e.kind = EventKind::Send;
  e.peer = to;
  e.count = count;
  e.dtype = dtype;
  e.provenance = std::move(provenance);
  e.tag = tag;
  return e;
}

CommEvent CommEvent::recv(int64_t from, int64_t count, Name dtype,
                          std::string provenance, std::optional<int64_t> tag) {
  CommEvent e = send(from, count, dtype, std::move(provenance), tag);
  e.kind = EventKind::Recv;
  return e;
}

CommEvent CommEvent::coll(Name kind, std::vector<int64_t> group, int64_t count,
                          Name dtype, std::string provenance) {
  CommEvent e;
  e.kind = EventKind::Collective;
  e.collective = kind;
  e.group = std::make_shared<const std::vector<int64_t>>(std::move(group));
  e.count = count;
  e.dtype = dtype;
  e.provenance = std::move(provenance);
  return e;
}

int64_t CommPlan::totalEvents() const {
  int64_t n = 0;
  for (const auto &r : ranks)
    n += static_cast<int64_t>(r.size());
  return n;
}

std::string CommPlan::provenance(int64_t r, size_t i) const {
  const CommEvent &e = ranks[r][i];
  if (!e.provenance.empty() || e.origin < 0 || !describeOrigin)
    return e.provenance;
  return describeOrigin(r, e.origin);
}

const char *verify::errorKindName(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::InvalidEvent:
    return "invalid-event";
  case ErrorKind::SendRecvMismatch:
    return "send-recv-mismatch";
  case ErrorKind::CollectiveMismatch:
    return "collective-mismatch";
  case ErrorKind::PeerFinished:
    return "peer-finished";
  case ErrorKind::UnreceivedSend:
    return "unreceived-send";
  case ErrorKind::CollectiveSkipped:
    return "collective-skipped";
  case ErrorKind::CyclicWait:
    return "cyclic-wait";
  }
  return "unknown";
}

const char *verify::sendModeName(SendMode mode) {
  switch (mode) {
  case SendMode::Rendezvous:
    return "rendezvous";
  case SendMode::Eager:
    return "eager";
  }
  return "unknown";
}

std::string VerifyResult::str() const {
  if (ok())
    return "ok: " + std::to_string(eventsTotal) + " communication events";
  std::string s;
  for (const VerifyError &e : errors) {
    if (!s.empty())
      s += "\n";
    s += std::string("error [") + errorKindName(e.kind) + "]: " + e.message + "\n";
    for (const std::string &n : e.notes)
      s += "  " + n + "\n";
  }
  return s;
}

static std::string groupStr(const std::vector<int64_t> &g) {
  std::string s = "[";
  for (size_t i = 0; i < g.size(); ++i)
    s += (i ? "," : "") + std::to_string(g[i]);
  return s + "]";
}

static std::string tagStr(const CommEvent &e) {
  return e.tag ? " (tag " + std::to_string(*e.tag) + ")" : "";
}

std::string verify::describe(const CommEvent &e) {
  std::string size = std::to_string(e.count) + " " + e.dtype.str();
  switch (e.kind) {
  case EventKind::Send:
    return "send of " + size + " to " + std::to_string(e.peer) + tagStr(e);
  case EventKind::Recv:
    return "recv of " + size + " from " + std::to_string(e.peer) + tagStr(e);
  case EventKind::Collective:
    return e.collective.str() + " of " + size + " on group " + groupStr(e.members());
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// The symbolic execution
//===----------------------------------------------------------------------===//

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

class SymbolicExecution {
public:
  SymbolicExecution(const CommPlan &plan, const VerifyOptions &opts, VerifyResult &res)
      : plan(plan), opts(opts), res(res), world(plan.world()),
        eager(opts.sendMode == SendMode::Eager) {}

  void run();

private:
  const CommPlan &plan;
  const VerifyOptions &opts;
  VerifyResult &res;
  int64_t world;
  bool eager;

  std::vector<size_t> pos;        ///< index of each rank's head event
  std::vector<size_t> arrivedPos; ///< the head index whose arrival was processed
  std::vector<std::vector<int32_t>> gid; ///< group id per collective event
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> arrived; ///< members whose head is a collective on the group
  std::vector<int64_t> work;

  /// Eager sends: one FIFO channel per ordered (sender, receiver) pair that
  /// carries traffic. Its messages are the sender's sends to the receiver in
  /// program order, so a channel is a fixed list plus two cursors:
  /// sends[0, received) were received, sends[received, sent) are in flight.
  struct Channel {
    int64_t sender = -1, receiver = -1;
    std::vector<size_t> sends; ///< event indices on `sender`
    size_t sent = 0, received = 0;
  };
  std::vector<Channel> channels;
  /// By sender · world + receiver.
  std::unordered_map<int64_t, int32_t> channelIds;
  std::vector<std::vector<int32_t>> cid; ///< channel id per p2p event (eager)

  bool full() const {
    return static_cast<int64_t>(res.errors.size()) >= opts.maxErrors;
  }
  size_t size(int64_t r) const { return plan.ranks[r].size(); }
  bool finished(int64_t r) const { return pos[r] >= size(r); }
  const CommEvent &head(int64_t r) const { return plan.ranks[r][pos[r]]; }
  int32_t headGroup(int64_t r) const {
    return finished(r) || head(r).kind != EventKind::Collective
               ? -1
               : gid[r][pos[r]];
  }

  // Message pieces.
  std::string at(int64_t r, size_t i) const {
    std::string prov = plan.provenance(r, i);
    return "at event " + std::to_string(i) + (prov.empty() ? "" : " (" + prov + ")");
  }
  std::string waitPhrase(int64_t r) const;
  std::string headPhrase(int64_t r) const;
  std::string finishedPhrase(int64_t r) const {
    return "rank " + std::to_string(r) + " has finished (all " +
           std::to_string(size(r)) + " of its events done)";
  }

  void addError(ErrorKind kind, std::string msg, std::vector<EventRef> evs,
                std::vector<std::string> notes = {}) {
    if (full())
      return;
    res.errors.push_back({kind, std::move(msg), std::move(evs), std::move(notes)});
  }

  bool validate();
  void arrive(int64_t r);
  void checkP2P(int64_t s, size_t si, int64_t q, size_t qi);
  void completeP2P(int64_t sender, int64_t receiver);
  bool tryRecvEager(int64_t q);
  void reportUnreceived();
  void completeCollective(int32_t g);
  void diagnoseDeadlock();
  std::vector<std::string> blockedNotes() const;
};

} // namespace

bool SymbolicExecution::validate() {
  std::map<std::vector<int64_t>, int32_t> ids;
  // By member list address: its group id, or -1 and why the list is invalid.
  struct ListCheck {
    int32_t id = -1;
    std::string problem;
  };
  std::unordered_map<const std::vector<int64_t> *, ListCheck> lists;
  const std::vector<int64_t> *lastList = nullptr;
  ListCheck *lastCheck = nullptr;
  gid.resize(world);
  if (eager)
    cid.resize(world);
  for (int64_t r = 0; r < world; ++r) {
    const auto &evs = plan.ranks[r];
    gid[r].assign(evs.size(), -1);
    if (eager)
      cid[r].assign(evs.size(), -1);
    for (size_t i = 0; i < evs.size(); ++i) {
      const CommEvent &e = evs[i];
      auto bad = [&](const std::string &why) {
        addError(ErrorKind::InvalidEvent,
                 "rank " + std::to_string(r) + " " + at(r, i) + ": " +
                     describe(e) + ": " + why,
                 {{r, static_cast<int64_t>(i)}});
      };
      if (e.count < 0)
        bad("negative element count");
      if (e.kind != EventKind::Collective) {
        if (e.peer < 0 || e.peer >= world)
          bad("peer " + std::to_string(e.peer) + " is not a rank in [0, " +
              std::to_string(world) + ")");
        else if (e.peer == r)
          bad("a rank cannot send to or receive from itself");
        else if (eager) {
          bool isSend = e.kind == EventKind::Send;
          int64_t sender = isSend ? r : e.peer, receiver = isSend ? e.peer : r;
          auto it = channelIds
                        .emplace(sender * world + receiver,
                                 static_cast<int32_t>(channels.size()))
                        .first;
          if (it->second == static_cast<int32_t>(channels.size())) {
            channels.emplace_back();
            channels.back().sender = sender;
            channels.back().receiver = receiver;
          }
          cid[r][i] = it->second;
          if (isSend) // rank r's events are scanned in program order
            channels[it->second].sends.push_back(i);
        }
        continue;
      }
      // Each distinct member list is checked and interned once; the events
      // that share it (a producer's one list per group) find it by address.
      bool fresh = false;
      if (e.group.get() != lastList || !lastCheck) {
        auto it = lists.try_emplace(e.group.get());
        fresh = it.second;
        lastList = e.group.get();
        lastCheck = &it.first->second;
      }
      ListCheck &check = *lastCheck;
      if (fresh) {
        const std::vector<int64_t> &g = e.members();
        if (g.empty())
          check.problem = "empty group";
        else if (!std::is_sorted(g.begin(), g.end()) ||
                 std::adjacent_find(g.begin(), g.end()) != g.end())
          check.problem = "group members must be sorted and distinct";
        else if (g.front() < 0 || g.back() >= world)
          check.problem = "group member out of [0, " + std::to_string(world) + ")";
        else {
          auto id = ids.emplace(g, static_cast<int32_t>(groups.size())).first;
          if (id->second == static_cast<int32_t>(groups.size()))
            groups.push_back(g);
          check.id = id->second;
        }
      }
      if (check.id < 0) {
        bad(check.problem);
        continue;
      }
      const std::vector<int64_t> &g = groups[check.id];
      if (!std::binary_search(g.begin(), g.end(), r)) {
        bad("the issuing rank is not a member of the group");
        continue;
      }
      gid[r][i] = check.id;
    }
  }
  return res.errors.empty();
}

std::string SymbolicExecution::waitPhrase(int64_t r) const {
  const CommEvent &e = head(r);
  std::string size = std::to_string(e.count) + " " + e.dtype.str();
  std::string s;
  switch (e.kind) {
  case EventKind::Send:
    s = "waits to send " + size + " to " + std::to_string(e.peer) + tagStr(e);
    break;
  case EventKind::Recv:
    s = "waits to recv " + size + " from " + std::to_string(e.peer) + tagStr(e);
    break;
  case EventKind::Collective:
    s = "waits in " + describe(e);
    break;
  }
  return s + " " + at(r, pos[r]);
}

std::string SymbolicExecution::headPhrase(int64_t r) const {
  if (finished(r))
    return finishedPhrase(r);
  std::string prov = plan.provenance(r, pos[r]);
  return "rank " + std::to_string(r) + " is at event " + std::to_string(pos[r]) +
         ": " + describe(head(r)) + (prov.empty() ? "" : " (" + prov + ")");
}

void SymbolicExecution::arrive(int64_t r) {
  if (arrivedPos[r] == pos[r])
    return;
  arrivedPos[r] = pos[r];
  if (finished(r))
    return;
  const CommEvent &e = head(r);
  switch (e.kind) {
  case EventKind::Send: {
    int64_t q = e.peer;
    if (eager) {
      // Enqueue and move on; wake the receiver if it waits on this channel.
      Channel &c = channels[cid[r][pos[r]]];
      ++c.sent;
      ++res.eventsCompleted;
      ++pos[r];
      work.push_back(r);
      if (!finished(q) && head(q).kind == EventKind::Recv && head(q).peer == r)
        tryRecvEager(q);
    } else if (!finished(q) && head(q).kind == EventKind::Recv &&
               head(q).peer == r) {
      completeP2P(r, q);
    }
    break;
  }
  case EventKind::Recv: {
    int64_t q = e.peer;
    if (eager)
      tryRecvEager(r); // otherwise it waits until q enqueues a message
    else if (!finished(q) && head(q).kind == EventKind::Send && head(q).peer == r)
      completeP2P(q, r);
    break;
  }
  case EventKind::Collective: {
    int32_t g = gid[r][pos[r]];
    if (++arrived[g] == static_cast<int64_t>(groups[g].size()))
      completeCollective(g);
    break;
  }
  }
}

void SymbolicExecution::checkP2P(int64_t s, size_t si, int64_t q, size_t qi) {
  const CommEvent &se = plan.ranks[s][si], &re = plan.ranks[q][qi];
  std::string why;
  if (se.count != re.count)
    why = "element counts differ";
  else if (se.dtype != re.dtype)
    why = "dtypes differ";
  else if (se.tag && re.tag && *se.tag != *re.tag)
    why = "tags differ";
  if (!why.empty())
    addError(ErrorKind::SendRecvMismatch,
             "send/recv mismatch (" + why + "): rank " + std::to_string(s) +
                 " sends " + std::to_string(se.count) + " " + se.dtype.str() + " to " +
                 std::to_string(q) + tagStr(se) + " " + at(s, si) +
                 " but rank " + std::to_string(q) + " receives " +
                 std::to_string(re.count) + " " + re.dtype.str() + " from " +
                 std::to_string(s) + tagStr(re) + " " + at(q, qi),
             {{s, static_cast<int64_t>(si)}, {q, static_cast<int64_t>(qi)}});
}

void SymbolicExecution::completeP2P(int64_t s, int64_t q) {
  checkP2P(s, pos[s], q, pos[q]);
  res.eventsCompleted += 2;
  ++pos[s];
  ++pos[q];
  work.push_back(s);
  work.push_back(q);
}

// Eager: rank q's head is a Recv; take the oldest message of its channel if
// there is one. O(1).
bool SymbolicExecution::tryRecvEager(int64_t q) {
  Channel &c = channels[cid[q][pos[q]]];
  if (c.received == c.sent)
    return false;
  checkP2P(c.sender, c.sends[c.received++], q, pos[q]);
  ++res.eventsCompleted;
  ++pos[q];
  work.push_back(q);
  return true;
}

// Eager: messages left in a channel whose receiver has finished can never be
// received. (A blocked receiver is part of a deadlock, reported already; its
// messages might be received once that is fixed.) Channels in (sender,
// receiver) order, messages in send order.
void SymbolicExecution::reportUnreceived() {
  std::vector<const Channel *> order;
  for (const Channel &c : channels)
    order.push_back(&c);
  std::sort(order.begin(), order.end(), [](const Channel *a, const Channel *b) {
    return std::make_pair(a->sender, a->receiver) < std::make_pair(b->sender, b->receiver);
  });
  for (const Channel *cp : order) {
    const Channel &c = *cp;
    if (c.received == c.sent || !finished(c.receiver))
      continue;
    for (size_t k = c.received; k < c.sent && !full(); ++k) {
      int64_t s = c.sender, q = c.receiver;
      size_t si = c.sends[k];
      const CommEvent &e = plan.ranks[s][si];
      addError(ErrorKind::UnreceivedSend,
               "rank " + std::to_string(s) + "'s send of " +
                   std::to_string(e.count) + " " + e.dtype.str() + " to " +
                   std::to_string(q) + tagStr(e) + " " + at(s, si) +
                   " is never received: " + finishedPhrase(q) +
                   " after receiving " + std::to_string(c.received) + " of the " +
                   std::to_string(c.sent) + " messages rank " + std::to_string(s) +
                   " sent it (a missing recv?)",
               {{s, static_cast<int64_t>(si)}});
    }
  }
}

void SymbolicExecution::completeCollective(int32_t g) {
  const std::vector<int64_t> &members = groups[g];
  using Sig = std::tuple<Name, int64_t, Name>;
  auto sig = [&](int64_t m) {
    const CommEvent &e = head(m);
    return Sig(e.collective, e.count, e.dtype);
  };
  // The reference signature is the most common one (ties: the lowest rank).
  bool same = true;
  for (int64_t m : members)
    same = same && sig(m) == sig(members.front());
  if (!same) {
    int64_t ref = members.front();
    size_t best = 0;
    for (int64_t m : members) {
      size_t n = 0;
      for (int64_t o : members)
        n += sig(o) == sig(m);
      if (n > best)
        best = n, ref = m;
    }
    auto does = [&](int64_t m) {
      const CommEvent &e = head(m);
      return "rank " + std::to_string(m) + " does " + e.collective.str() + " of " +
             std::to_string(e.count) + " " + e.dtype.str() + " " + at(m, pos[m]);
    };
    std::string msg = "collective mismatch on group " + groupStr(members) + ": ";
    std::vector<EventRef> evs;
    std::vector<std::string> notes;
    bool firstClause = true;
    for (int64_t m : members) {
      evs.push_back({m, static_cast<int64_t>(pos[m])});
      notes.push_back(does(m));
      if (sig(m) == sig(ref))
        continue;
      msg += (firstClause ? "" : "; ") + does(m) + " while " + does(ref);
      firstClause = false;
    }
    if (static_cast<int64_t>(notes.size()) > opts.maxNotes)
      notes.resize(opts.maxNotes);
    addError(ErrorKind::CollectiveMismatch, std::move(msg), std::move(evs),
             std::move(notes));
  }
  arrived[g] = 0;
  res.eventsCompleted += static_cast<int64_t>(members.size());
  for (int64_t m : members) {
    ++pos[m];
    work.push_back(m);
  }
}

std::vector<std::string> SymbolicExecution::blockedNotes() const {
  std::vector<std::string> notes;
  for (int64_t r = 0; r < world; ++r) {
    if (finished(r))
      continue;
    if (static_cast<int64_t>(notes.size()) >= opts.maxNotes) {
      notes.push_back("...");
      break;
    }
    std::string s = "rank " + std::to_string(r) + " (" +
                    std::to_string(size(r) - pos[r]) + " events left) " +
                    waitPhrase(r);
    const CommEvent &e = head(r);
    if (e.kind != EventKind::Collective) {
      s += "; " + headPhrase(e.peer);
    } else {
      int32_t g = gid[r][pos[r]];
      int shown = 0;
      for (int64_t m : groups[g]) {
        if (m == r || headGroup(m) == g)
          continue;
        if (shown++ == 4) {
          s += "; ...";
          break;
        }
        s += "; " + headPhrase(m);
      }
    }
    notes.push_back(std::move(s));
  }
  return notes;
}

void SymbolicExecution::diagnoseDeadlock() {
  std::vector<int64_t> blocked;
  for (int64_t r = 0; r < world; ++r)
    if (!finished(r))
      blocked.push_back(r);
  if (blocked.empty())
    return;
  std::vector<std::string> notes = blockedNotes();
  bool othersDone = blocked.size() == 1;

  // Wait-for edges: a p2p event waits on its peer, a collective on every
  // member whose head is not a collective on the same group.
  std::vector<std::vector<int64_t>> waitsOn(world);
  std::vector<char> doomed(world, 0); // can never complete
  for (int64_t r : blocked) {
    const CommEvent &e = head(r);
    if (e.kind != EventKind::Collective) {
      waitsOn[r].push_back(e.peer);
    } else {
      int32_t g = gid[r][pos[r]];
      for (int64_t m : groups[g])
        if (m != r && headGroup(m) != g)
          waitsOn[r].push_back(m);
    }
    for (int64_t q : waitsOn[r])
      doomed[r] |= finished(q);
  }

  // Root causes 1: point-to-point events whose peer has finished.
  for (int64_t r : blocked) {
    const CommEvent &e = head(r);
    if (e.kind == EventKind::Collective || !finished(e.peer))
      continue;
    std::string hint = e.kind == EventKind::Send
                           ? "no matching recv was posted (a missing recv?)"
                           : "it never sends this (a missing send, or an extra recv)";
    addError(ErrorKind::PeerFinished,
             "rank " + std::to_string(r) + " " + waitPhrase(r) + " but " +
                 finishedPhrase(e.peer) + ": " + hint + "; rank " +
                 std::to_string(r) + " has " + std::to_string(size(r) - pos[r]) +
                 " events left" + (othersDone ? " after all other ranks finished" : ""),
             {{r, static_cast<int64_t>(pos[r])}}, notes);
  }
  // Root causes 2: collectives that a finished member skipped.
  std::vector<char> reported(groups.size(), 0);
  for (int64_t r : blocked) {
    int32_t g = headGroup(r);
    if (g < 0 || reported[g] || !doomed[r])
      continue;
    reported[g] = 1;
    std::string done, waiting, elsewhere;
    std::vector<EventRef> evs;
    for (int64_t m : groups[g]) {
      if (finished(m)) {
        done += (done.empty() ? "" : ", ") + finishedPhrase(m);
      } else if (headGroup(m) == g) {
        waiting += (waiting.empty() ? "" : ", ") + ("rank " + std::to_string(m) +
                                                    " " + waitPhrase(m));
        evs.push_back({m, static_cast<int64_t>(pos[m])});
      } else {
        elsewhere += "; rank " + std::to_string(m) + " is stuck elsewhere: " +
                     waitPhrase(m);
        evs.push_back({m, static_cast<int64_t>(pos[m])});
      }
    }
    addError(ErrorKind::CollectiveSkipped,
             "collective skipped on group " + groupStr(groups[g]) + ": " + done +
                 " while " + waiting + elsewhere,
             std::move(evs), notes);
  }

  // Everything that (transitively) waits on a doomed rank is explained.
  std::vector<std::vector<int64_t>> waitedBy(world);
  for (int64_t r : blocked)
    for (int64_t q : waitsOn[r])
      waitedBy[q].push_back(r);
  std::vector<int64_t> stack;
  for (int64_t r : blocked)
    if (doomed[r])
      stack.push_back(r);
  auto spread = [&](std::vector<int64_t> &st) {
    while (!st.empty()) {
      int64_t q = st.back();
      st.pop_back();
      for (int64_t r : waitedBy[q])
        if (!doomed[r]) {
          doomed[r] = 1;
          st.push_back(r);
        }
    }
  };
  spread(stack);

  // The rest wait only on blocked, non-doomed ranks: every one has an
  // out-edge, so following edges must close a cycle.
  std::vector<int64_t> visitIdx(world, -1);
  for (int64_t start : blocked) {
    if (doomed[start] || full())
      continue;
    std::vector<int64_t> path;
    int64_t r = start;
    bool stuck = false;
    while (visitIdx[r] < 0) {
      visitIdx[r] = static_cast<int64_t>(path.size());
      path.push_back(r);
      int64_t next = -1;
      for (int64_t q : waitsOn[r])
        if (!doomed[q]) {
          next = q;
          break;
        }
      if (next < 0) {
        stuck = true; // cannot happen (see above): report generically
        break;
      }
      r = next;
    }
    std::vector<int64_t> cycle;
    if (!stuck)
      cycle.assign(path.begin() + visitIdx[r], path.end());
    if (cycle.empty()) {
      addError(ErrorKind::CyclicWait,
               "deadlock: no rank can advance; rank " + std::to_string(start) +
                   " " + waitPhrase(start),
               {{start, static_cast<int64_t>(pos[start])}}, notes);
    } else {
      std::string msg = "cyclic wait: ";
      std::vector<EventRef> evs;
      for (size_t i = 0; i < cycle.size(); ++i) {
        int64_t c = cycle[i], n = cycle[(i + 1) % cycle.size()];
        msg += (i ? " while rank " : "rank ") + std::to_string(c) + " " +
               waitPhrase(c);
        if (head(c).kind == EventKind::Collective)
          msg += " for rank " + std::to_string(n);
        evs.push_back({c, static_cast<int64_t>(pos[c])});
      }
      addError(ErrorKind::CyclicWait, std::move(msg), std::move(evs), notes);
    }
    // Mark the cycle and everything waiting on it as explained; reset the
    // visit marks of the path so later walks start clean.
    for (int64_t p : path)
      visitIdx[p] = -1;
    for (int64_t c : path)
      if (!doomed[c]) {
        doomed[c] = 1;
        stack.push_back(c);
      }
    spread(stack);
  }
}

void SymbolicExecution::run() {
  res.eventsTotal = plan.totalEvents();
  if (!validate())
    return;
  pos.assign(world, 0);
  arrivedPos.assign(world, kNone);
  arrived.assign(groups.size(), 0);
  work.reserve(static_cast<size_t>(world) * 2);
  for (int64_t r = world - 1; r >= 0; --r)
    work.push_back(r);
  while (!work.empty() && !full()) {
    int64_t r = work.back();
    work.pop_back();
    arrive(r);
  }
  if (!full())
    diagnoseDeadlock();
  if (eager && !full())
    reportUnreceived();
}

VerifyResult verify::verifyCommPlan(const CommPlan &plan,
                                    const VerifyOptions &opts) {
  VerifyResult res;
  SymbolicExecution(plan, opts, res).run();
  return res;
}
