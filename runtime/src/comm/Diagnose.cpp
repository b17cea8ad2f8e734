// llc-dist diagnose: the flight recorder's dumps, matched. See Diagnose.h.
#include "llcdist/runtime/Diagnose.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace llcdist::rt {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxRanks = 1 << 20;
constexpr size_t kMaxDumpBytes = size_t(1) << 30;

// Field access that names the file and the field.
struct Reader {
  const std::string& file;
  Status bad(const std::string& field, const std::string& why) const {
    return Status::dataLoss(file + ": field '" + field + "': " + why +
                            " (a flight recorder dump, format llc-dist-flight version 1)");
  }
  StatusOr<int64_t> integer(const json& j, const std::string& key, const std::string& path, int64_t lo,
                            int64_t hi, bool required = true, int64_t dflt = -1) const {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return bad(path + key, "missing");
      return dflt;
    }
    if (!it->is_number_integer()) return bad(path + key, "must be an integer");
    const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : it->get<int64_t>();
    if (v < lo || v > hi)
      return bad(path + key, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]: " +
                                 std::to_string(v));
    return v;
  }
  StatusOr<std::string> string(const json& j, const std::string& key, const std::string& path,
                               bool required = true) const {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return bad(path + key, "missing");
      return std::string();
    }
    if (!it->is_string()) return bad(path + key, "must be a string");
    return it->get<std::string>();
  }
};

constexpr int64_t kBig = int64_t(1) << 62;

StatusOr<CommRecord> parseRecord(const Reader& rd, const json& j, const std::string& path, int worldSize) {
  if (!j.is_object()) return rd.bad(path, "must be an object");
  CommRecord r;
  LLCDIST_ASSIGN_OR_RETURN(r.id, rd.integer(j, "id", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.channel, rd.string(j, "channel", path));
  LLCDIST_ASSIGN_OR_RETURN(r.seq, rd.integer(j, "seq", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.op, rd.string(j, "op", path));
  if (r.op != "all_reduce" && r.op != "all_gather" && r.op != "reduce_scatter" && r.op != "all_to_all" &&
      r.op != "all_to_all_v" && r.op != "send" && r.op != "recv")
    return rd.bad(path + "op", "unknown operation '" + r.op + "'");
  auto g = j.find("group");
  if (g == j.end() || !g->is_array() || g->empty() || g->size() > size_t(worldSize))
    return rd.bad(path + "group", "must be a non-empty list of at most world_size ranks");
  for (const json& m : *g) {
    if (!m.is_number_integer() || m.get<int64_t>() < 0 || m.get<int64_t>() >= worldSize)
      return rd.bad(path + "group", "members must be ranks in [0, world_size)");
    r.group.push_back(int(m.get<int64_t>()));
  }
  const bool p2p = r.op == "send" || r.op == "recv";
  if (p2p && r.group.size() != 2) return rd.bad(path + "group", "a send/recv's group is [sender, receiver]");
  LLCDIST_ASSIGN_OR_RETURN(int64_t peer, rd.integer(j, "peer", path, 0, worldSize - 1, p2p));
  r.peer = int(peer);
  LLCDIST_ASSIGN_OR_RETURN(r.count, rd.integer(j, "count", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.bytes, rd.integer(j, "bytes", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.dtype, rd.string(j, "dtype", path));
  LLCDIST_ASSIGN_OR_RETURN(r.reduceOp, rd.string(j, "reduce_op", path, false));
  LLCDIST_ASSIGN_OR_RETURN(r.tag, rd.integer(j, "tag", path, -kBig, kBig, false, -1));
  LLCDIST_ASSIGN_OR_RETURN(r.microbatch, rd.integer(j, "microbatch", path, -kBig, kBig, false, -1));
  LLCDIST_ASSIGN_OR_RETURN(std::string state, rd.string(j, "state", path));
  if (state == "started") r.state = CommRecord::State::kStarted;
  else if (state == "completed") r.state = CommRecord::State::kCompleted;
  else if (state == "failed") r.state = CommRecord::State::kFailed;
  else return rd.bad(path + "state", "must be started, completed or failed, got '" + state + "'");
  LLCDIST_ASSIGN_OR_RETURN(r.error, rd.string(j, "error", path, false));
  LLCDIST_ASSIGN_OR_RETURN(r.enqueuedUs, rd.integer(j, "enqueued_us", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.startedUs, rd.integer(j, "started_us", path, 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(r.completedUs, rd.integer(j, "completed_us", path, 0, kBig,
                                                      r.state != CommRecord::State::kStarted, 0));
  LLCDIST_ASSIGN_OR_RETURN(r.step, rd.integer(j, "step", path, -1, kBig, false, -1));
  LLCDIST_ASSIGN_OR_RETURN(r.what, rd.string(j, "what", path, false));
  LLCDIST_ASSIGN_OR_RETURN(r.program, rd.string(j, "program", path, false));
  LLCDIST_ASSIGN_OR_RETURN(r.subroutine, rd.string(j, "subroutine", path, false));
  LLCDIST_ASSIGN_OR_RETURN(r.opIndex, rd.integer(j, "op_index", path, -1, kBig, false, -1));
  LLCDIST_ASSIGN_OR_RETURN(r.action, rd.integer(j, "action", path, -1, kBig, false, -1));
  LLCDIST_ASSIGN_OR_RETURN(r.loc, rd.string(j, "loc", path, false));
  return r;
}

// run_id = "<fingerprint>-<start us>": the start time orders runs.
int64_t runStart(const std::string& runId) {
  const size_t dash = runId.rfind('-');
  if (dash == std::string::npos) return 0;
  return std::strtoll(runId.c_str() + dash + 1, nullptr, 10);
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}
std::string ranksWord(const std::vector<int>& ranks) { return ranks.size() == 1 ? "rank " : "ranks "; }

std::string seconds(int64_t us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", double(us) / 1e6);
  return b;
}

// ---- the matching -------------------------------------------------------------------------------------

struct RankView {
  const FlightDump* dump = nullptr;                 // nullptr: no dump from this rank
  std::map<std::string, int64_t> maxSeq;            // per channel
  std::map<std::pair<std::string, int64_t>, const CommRecord*> byKey;
  std::vector<const CommRecord*> waiting;           // started or failed, oldest first
  const CommRecord* last = nullptr;                 // the latest record
  const CommRecord* lastCompleted = nullptr;
};

struct Blocked {
  std::string channel;
  int64_t seq = 0;
  const CommRecord* sample = nullptr;  // a waiting rank's record: the op and its provenance
  std::vector<int> members, waiting, arrived, never, unknown;
  int64_t sinceUs = 0;                 // the earliest start among the waiting ranks
  int64_t waitedUs = 0;                // the longest wait until a dump
};

struct Diagnosis {
  std::vector<RankView> ranks;
  // With a member that never reached it or is unknown: first, where each root cause stopped (in the
  // order of d.roots); then the others, by the earliest wait.
  std::vector<Blocked> blocked;
  size_t matchedEverywhere = 0;      // blocked operations every member reached
  std::vector<int> roots, missing;   // root causes; ranks without a dump
  bool cycle = false;
};

Diagnosis diagnose(const FlightSet& set) {
  Diagnosis d;
  d.ranks.resize(size_t(set.worldSize));
  for (const FlightDump& f : set.dumps) {
    RankView& v = d.ranks[size_t(f.rank)];
    v.dump = &f;
    for (const CommRecord& r : f.records) {
      int64_t& m = v.maxSeq.try_emplace(r.channel, -1).first->second;
      m = std::max(m, r.seq);
      v.byKey[{r.channel, r.seq}] = &r;
      if (r.state != CommRecord::State::kCompleted) v.waiting.push_back(&r);
      if (!v.last || r.id > v.last->id) v.last = &r;
      if (r.state == CommRecord::State::kCompleted && (!v.lastCompleted || r.id > v.lastCompleted->id))
        v.lastCompleted = &r;
    }
  }
  for (int r = 0; r < set.worldSize; ++r)
    if (!d.ranks[size_t(r)].dump) d.missing.push_back(r);
  std::map<std::pair<std::string, int64_t>, Blocked> ops;
  for (int r = 0; r < set.worldSize; ++r) {
    const RankView& v = d.ranks[size_t(r)];
    for (const CommRecord* w : v.waiting) {
      Blocked& b = ops[{w->channel, w->seq}];
      if (!b.sample) {
        b.channel = w->channel, b.seq = w->seq, b.sample = w, b.members = w->group;
        b.sinceUs = w->startedUs;
      }
      b.waiting.push_back(r);
      b.sinceUs = std::min(b.sinceUs, w->startedUs);
      const int64_t until = w->state == CommRecord::State::kStarted ? v.dump->dumpedUs : w->completedUs;
      b.waitedUs = std::max(b.waitedUs, until - w->startedUs);
    }
  }
  std::set<int> culprits;
  for (auto& [key, b] : ops) {
    for (int m : b.members) {
      if (std::find(b.waiting.begin(), b.waiting.end(), m) != b.waiting.end()) continue;
      const RankView& v = d.ranks[size_t(m)];
      if (!v.dump) {
        b.unknown.push_back(m);
        continue;
      }
      auto it = v.maxSeq.find(b.channel);
      if (it != v.maxSeq.end() && it->second >= b.seq) b.arrived.push_back(m);
      else b.never.push_back(m);
    }
    if (b.never.empty() && b.unknown.empty()) {
      ++d.matchedEverywhere;
      continue;
    }
    culprits.insert(b.never.begin(), b.never.end());
    culprits.insert(b.unknown.begin(), b.unknown.end());
    d.blocked.push_back(b);
  }
  std::sort(d.blocked.begin(), d.blocked.end(), [](const Blocked& a, const Blocked& b) {
    return a.sinceUs != b.sinceUs ? a.sinceUs < b.sinceUs : a.channel < b.channel;
  });
  for (int c : culprits)
    if (!d.ranks[size_t(c)].dump || d.ranks[size_t(c)].waiting.empty()) d.roots.push_back(c);
  d.cycle = !culprits.empty() && d.roots.empty();
  // Where each root cause stopped: of the operations it never reached, the first in its own program's
  // order — (step, action, op index) of the waiting ranks' records from its program (the members of
  // a collective run one program) — else the one waited at longest (a recv for its send, in another
  // stage's program).
  auto stoppedBefore = [&](int root) {
    const RankView& v = d.ranks[size_t(root)];
    const std::string program = v.last ? v.last->program : "";
    auto key = [&](const Blocked& b) {
      const CommRecord& r = *b.sample;
      return !program.empty() && r.program == program ? std::make_tuple(0, r.step, r.action, r.opIndex, int64_t(0))
                                                      : std::make_tuple(1, int64_t(0), int64_t(0), int64_t(0), b.sinceUs);
    };
    int best = -1;
    for (size_t i = 0; i < d.blocked.size(); ++i) {
      const Blocked& b = d.blocked[i];
      const bool here = std::count(b.never.begin(), b.never.end(), root) + std::count(b.unknown.begin(), b.unknown.end(), root);
      if (here && (best < 0 || key(b) < key(d.blocked[size_t(best)]))) best = int(i);
    }
    return best;
  };
  std::vector<Blocked> ordered;
  std::vector<bool> taken(d.blocked.size(), false);
  for (int root : d.roots) {
    const int i = stoppedBefore(root);
    if (i >= 0 && !taken[size_t(i)]) taken[size_t(i)] = true, ordered.push_back(d.blocked[size_t(i)]);
  }
  for (size_t i = 0; i < d.blocked.size(); ++i)
    if (!taken[i]) ordered.push_back(d.blocked[i]);
  d.blocked = std::move(ordered);
  return d;
}

// ---- rendering -------------------------------------------------------------------------------------

std::string axisOf(const FlightSet& set, const CommRecord& r) {
  if (r.op == "send" || r.op == "recv") {
    std::optional<MeshAxis> a = set.mesh.axisBetween(r.group[0], r.group[1]);
    return a ? std::string(meshAxisName(*a)) : "";
  }
  std::optional<AxisSet> a = r.group.size() >= 2 ? set.mesh.axisSetOfGroup(r.group) : std::nullopt;
  return a ? axisSetName(*a) : "";
}

// "all_reduce #5 on group 0,1,2,3 (axis tp)" / "... (axis dp+cp)" / "send #2 of p2p 1->3 (axis pp)".
std::string opName(const FlightSet& set, const CommRecord& r, int64_t seq) {
  const std::string axis = axisOf(set, r);
  std::string s = r.op + " #" + std::to_string(seq) + (r.op == "send" || r.op == "recv" ? " of " : " on ") + r.channel;
  if (!axis.empty()) s += " (axis " + axis + ")";
  return s;
}

// The loc's parts: "reason @ where @ source" (the compiler's provenance; docs/plan-format.md).
void splitLoc(const std::string& loc, std::string* reason, std::string* where) {
  const size_t at = loc.find(" @ ");
  if (at == std::string::npos) {
    *reason = loc;
    where->clear();
    return;
  }
  *reason = loc.substr(0, at);
  *where = loc.substr(at + 3);
}

std::string callSite(const CommRecord& r) {
  if (r.program.empty()) return r.what.empty() ? "outside the plan" : "the driver: " + r.what;
  std::string s = r.program + " subroutine '" + r.subroutine + "' op " + std::to_string(r.opIndex);
  if (r.action >= 0) s += ", action " + std::to_string(r.action);
  if (r.step >= 0) s += ", step " + std::to_string(r.step);
  if (r.microbatch >= 0) s += ", microbatch " + std::to_string(r.microbatch);
  return s;
}

std::string sizeText(const CommRecord& r) {
  std::string s = std::to_string(r.count) + " " + r.dtype + " elements";
  if (!r.reduceOp.empty()) s += ", " + r.reduceOp;
  if (r.tag >= 0) s += ", tag " + std::to_string(r.tag);
  return s;
}

// What a rank that never reached an operation is doing.
std::string rankNow(const FlightSet& set, const Diagnosis& d, int rank) {
  const RankView& v = d.ranks[size_t(rank)];
  if (!v.dump) return "left no dump: it died, or was stopped, before it could write one";
  if (!v.waiting.empty()) {
    const CommRecord& w = *v.waiting.back();
    return "waits itself at " + opName(set, w, w.seq) + " (" + callSite(w) + ")";
  }
  std::string s = "is in no communication call";
  if (v.lastCompleted) {
    const CommRecord& c = *v.lastCompleted;
    s += "; its last one, " + opName(set, c, c.seq) + " (" + callSite(c) + "), completed " +
         seconds(v.dump->dumpedUs - c.completedUs) + " before its dump";
  } else {
    s += " and made none";
  }
  return s + ": it computes, loads data, or is stopped";
}

}  // namespace

StatusOr<FlightDump> parseFlightDump(const std::string& text, const std::string& file) {
  const Reader rd{file};
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::dataLoss(file + ": not valid JSON (a flight recorder dump)");
  if (!j.is_object()) return rd.bad("", "the dump must be a JSON object");
  FlightDump f;
  f.file = file;
  LLCDIST_ASSIGN_OR_RETURN(std::string format, rd.string(j, "format", ""));
  if (format != "llc-dist-flight") return rd.bad("format", "must be \"llc-dist-flight\", got '" + format + "'");
  LLCDIST_ASSIGN_OR_RETURN(int64_t version, rd.integer(j, "version", "", 1, 1));
  (void)version;
  LLCDIST_ASSIGN_OR_RETURN(f.runId, rd.string(j, "run_id", ""));
  LLCDIST_ASSIGN_OR_RETURN(int64_t world, rd.integer(j, "world_size", "", 1, kMaxRanks));
  f.worldSize = int(world);
  LLCDIST_ASSIGN_OR_RETURN(int64_t rank, rd.integer(j, "rank", "", 0, world - 1));
  f.rank = int(rank);
  auto mesh = j.find("mesh");
  if (mesh == j.end() || !mesh->is_object()) return rd.bad("mesh", "missing or not an object");
  int64_t sizes[kNumMeshAxes] = {1, 1, 1, 1};
  for (size_t a = 0; a < kNumMeshAxes; ++a) {
    const std::string axis(meshAxisName(MeshAxis(a)));
    // cp: written only when > 1
    LLCDIST_ASSIGN_OR_RETURN(sizes[a], rd.integer(*mesh, axis, "mesh.", 1, kMaxRanks, MeshAxis(a) != MeshAxis::kCp, 1));
  }
  const bool cp = sizes[3] > 1;
  int64_t product = 1;  // stepwise: four factors of up to 2^20 would overflow
  for (int64_t size : sizes) product = product > world ? product : product * size;
  if (product != world) return rd.bad("mesh", cp ? "dp·tp·pp·cp is not world_size" : "dp·tp·pp is not world_size");
  f.mesh = Mesh::make(sizes[0], sizes[1], sizes[2], sizes[3]);
  // ep (expert parallelism): written only when > 1; names the ep / edp groups.
  LLCDIST_ASSIGN_OR_RETURN(int64_t ep, rd.integer(*mesh, "ep", "mesh.", 1, kMaxRanks, false, 1));
  if (sizes[0] % ep != 0) return rd.bad("mesh.ep", "must divide dp");
  f.mesh.ep = ep;
  auto order = mesh->find("rank_order");
  const size_t axes = cp ? kNumMeshAxes : kNumMeshAxes - 1;
  if (order == mesh->end() || !order->is_array() || order->size() != axes)
    return rd.bad("mesh.rank_order", cp ? "must list the four axes" : "must list the three axes");
  std::vector<MeshAxis> listed;
  for (size_t i = 0; i < axes; ++i) {
    std::optional<MeshAxis> a = (*order)[i].is_string() ? parseMeshAxis((*order)[i].get<std::string>()) : std::nullopt;
    if (a) listed.push_back(*a);
  }
  if (listed.size() != axes || !f.mesh.setOrder(listed))
    return rd.bad("mesh.rank_order",
                  cp ? "must list dp, tp, pp and cp once each" : "must list dp, tp and pp once each");
  LLCDIST_ASSIGN_OR_RETURN(f.plan, rd.string(j, "plan", "", false));
  LLCDIST_ASSIGN_OR_RETURN(f.host, rd.string(j, "host", "", false));
  LLCDIST_ASSIGN_OR_RETURN(f.reason, rd.string(j, "reason", "", false));
  LLCDIST_ASSIGN_OR_RETURN(f.dumpedUs, rd.integer(j, "dumped_us", "", 0, kBig));
  LLCDIST_ASSIGN_OR_RETURN(f.dropped, rd.integer(j, "dropped", "", 0, kBig, false, 0));
  if (auto t = j.find("comm_timeout_s"); t != j.end() && t->is_number()) f.commTimeoutSeconds = t->get<double>();
  auto recs = j.find("records");
  if (recs == j.end() || !recs->is_array()) return rd.bad("records", "missing or not a list");
  for (size_t i = 0; i < recs->size(); ++i) {
    LLCDIST_ASSIGN_OR_RETURN(CommRecord r,
                             parseRecord(rd, (*recs)[i], "records[" + std::to_string(i) + "].", f.worldSize));
    f.records.push_back(std::move(r));
  }
  return f;
}

StatusOr<FlightSet> loadFlightDir(const std::string& dir) {
  DIR* dp = opendir(dir.c_str());
  if (!dp) return Status::notFound("'" + dir + "': no such directory (the flight recorder's --flight-dir)");
  std::vector<std::string> files;
  while (dirent* e = readdir(dp)) {
    const std::string n = e->d_name;
    if (n.rfind("flight-rank-", 0) == 0 && n.size() > 17 && n.compare(n.size() - 5, 5, ".json") == 0)
      files.push_back(n);
  }
  closedir(dp);
  std::sort(files.begin(), files.end());
  if (files.empty())
    return Status::notFound("'" + dir + "': no flight-rank-*.json (a run dumps them there when it fails)");
  std::vector<FlightDump> all;
  for (const std::string& n : files) {
    const std::string path = dir + "/" + n;
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::ioError(path + ": cannot read it");
    std::string text;
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size < 0 || size_t(size) > kMaxDumpBytes) return Status::dataLoss(path + ": larger than 1 GiB");
    text.resize(size_t(size));
    in.seekg(0);
    in.read(text.data(), size);
    LLCDIST_ASSIGN_OR_RETURN(FlightDump f, parseFlightDump(text, path));
    all.push_back(std::move(f));
  }
  FlightSet set;
  set.dir = dir;
  const FlightDump* newest = &all[0];
  for (const FlightDump& f : all)
    if (runStart(f.runId) > runStart(newest->runId)) newest = &f;
  set.runId = newest->runId;
  set.worldSize = newest->worldSize;
  set.mesh = newest->mesh;
  std::vector<bool> have(size_t(set.worldSize), false);
  for (FlightDump& f : all) {
    if (f.runId != set.runId) {
      set.ignored.push_back(f.file);
      continue;
    }
    if (f.worldSize != set.worldSize)
      return Status::dataLoss(f.file + ": field 'world_size': " + std::to_string(f.worldSize) + ", but " +
                              newest->file + " of the same run says " + std::to_string(set.worldSize));
    if (have[size_t(f.rank)]) return Status::dataLoss(f.file + ": a second dump of rank " + std::to_string(f.rank));
    have[size_t(f.rank)] = true;
    set.dumps.push_back(std::move(f));
  }
  std::sort(set.dumps.begin(), set.dumps.end(), [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  return set;
}

std::string diagnoseText(const FlightSet& set) {
  const Diagnosis d = diagnose(set);
  std::ostringstream o;
  o << "flight recorder dumps in " << set.dir << ": run " << set.runId << ", " << set.worldSize << " ranks ("
    << set.mesh.describe() << "), dumps from " << set.dumps.size() << " of them";
  if (!d.missing.empty()) o << " (none from " << ranksWord(d.missing) << rankList(d.missing) << ")";
  o << "\n";
  for (const std::string& f : set.ignored) o << "  ignored " << f << ": another run\n";
  if (!set.dumps.empty() && !set.dumps.front().reason.empty()) o << "dumped because: " << set.dumps.front().reason << "\n";
  if (d.blocked.empty()) {
    o << (d.matchedEverywhere ? "every rank reached every operation where a rank waits: the ranks are not stuck "
                                "waiting for one another (see the ranks' errors, e.g. a mismatched call)\n"
                              : "no rank waits in a communication call\n");
    return o.str();
  }
  // Each root cause's first operation (the earliest wait) in full, its later ones in a line; then
  // the ranks that wait behind ranks that wait themselves.
  auto isRoot = [&](int r) { return std::find(d.roots.begin(), d.roots.end(), r) != d.roots.end(); };
  std::set<int> shown;
  std::vector<const Blocked*> behind;
  for (const Blocked& b : d.blocked) {
    const CommRecord& r = *b.sample;
    std::vector<int> rootsHere, firstHere;
    for (const std::vector<int>* v : {&b.never, &b.unknown})
      for (int m : *v)
        if (isRoot(m)) rootsHere.push_back(m);
    if (rootsHere.empty()) {
      behind.push_back(&b);
      continue;
    }
    for (int m : rootsHere)
      if (!shown.count(m)) firstHere.push_back(m);
    const std::string step = r.step >= 0 ? " in step " + std::to_string(r.step) : "";
    if (firstHere.empty()) {  // a later operation of roots already shown
      o << "  " << ranksWord(rootsHere) << rankList(rootsHere) << " did not reach " << opName(set, r, b.seq) << step
        << " either: " << ranksWord(b.waiting) << rankList(b.waiting) << (b.waiting.size() == 1 ? " waits" : " wait")
        << " there (" << callSite(r) << ")\n";
      continue;
    }
    shown.insert(firstHere.begin(), firstHere.end());
    o << "\n";
    if (!b.never.empty())
      o << ranksWord(b.never) << rankList(b.never) << " never reached " << opName(set, r, b.seq);
    if (!b.unknown.empty())
      o << (b.never.empty() ? "" : "; ") << ranksWord(b.unknown) << rankList(b.unknown)
        << " (no dump) did not arrive at " << (b.never.empty() ? opName(set, r, b.seq) : "it");
    o << step << "\n";
    o << "  waiting there: " << ranksWord(b.waiting) << rankList(b.waiting) << " (up to " << seconds(b.waitedUs) << ")";
    if (!b.arrived.empty()) o << "; arrived and done: " << rankList(b.arrived);
    o << "\n";
    o << "  the operation: " << callSite(r) << ": " << r.op << ", " << sizeText(r) << "\n";
    if (!r.loc.empty()) {
      std::string reason, where;
      splitLoc(r.loc, &reason, &where);
      o << "  why the compiler put it there: " << reason << "\n";
      if (!where.empty()) o << "  for: " << where << "\n";
    }
    for (int m : b.never) o << "  rank " << m << " " << rankNow(set, d, m) << "\n";
  }
  if (!behind.empty()) {
    o << "\nwaiting behind ranks that wait themselves:\n";
    for (const Blocked* b : behind) {
      const CommRecord& r = *b->sample;
      o << "  " << ranksWord(b->waiting) << rankList(b->waiting) << " at " << opName(set, r, b->seq) << " ("
        << callSite(r) << ") for " << ranksWord(b->never) << rankList(b->never);
      for (int m : b->never) {
        const RankView& v = d.ranks[size_t(m)];
        if (!v.waiting.empty())
          o << "; rank " << m << " waits at " << opName(set, *v.waiting.back(), v.waiting.back()->seq);
      }
      o << "\n";
    }
  }
  o << "\n";
  if (!d.roots.empty())
    o << "root cause: " << ranksWord(d.roots) << rankList(d.roots)
      << " (never reached an operation the others wait at, and waits at none)\n";
  else if (d.cycle)
    o << "root cause: a cycle: every rank that did not arrive waits itself for another (a deadlock in the "
         "order of the calls)\n";
  return o.str();
}

std::string diagnoseJson(const FlightSet& set) {
  const Diagnosis d = diagnose(set);
  nlohmann::ordered_json j;
  j["dir"] = set.dir;
  j["run_id"] = set.runId;
  j["world_size"] = set.worldSize;
  j["dumps"] = set.dumps.size();
  j["missing"] = d.missing;
  j["ignored"] = set.ignored;
  nlohmann::ordered_json blocked = nlohmann::ordered_json::array();
  for (const Blocked& b : d.blocked) {
    const CommRecord& r = *b.sample;
    std::string reason, where;
    splitLoc(r.loc, &reason, &where);
    nlohmann::ordered_json e;
    e["op"] = r.op;
    e["channel"] = b.channel;
    e["seq"] = b.seq;
    e["axis"] = axisOf(set, r);
    e["members"] = b.members;
    e["never_reached"] = b.never;
    e["no_dump"] = b.unknown;
    e["waiting"] = b.waiting;
    e["arrived"] = b.arrived;
    e["waited_s"] = double(b.waitedUs) / 1e6;
    e["step"] = r.step;
    e["microbatch"] = r.microbatch;
    e["program"] = r.program;
    e["subroutine"] = r.subroutine;
    e["op_index"] = r.opIndex;
    e["action"] = r.action;
    e["count"] = r.count;
    e["dtype"] = r.dtype;
    e["loc"] = r.loc;
    e["reason"] = reason;
    e["where"] = where;
    blocked.push_back(std::move(e));
  }
  j["blocked"] = std::move(blocked);
  j["root_causes"] = d.roots;
  j["cycle"] = d.cycle;
  return j.dump(2) + "\n";
}

}  // namespace llcdist::rt
