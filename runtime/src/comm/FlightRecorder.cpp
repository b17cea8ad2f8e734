// The flight recorder. See FlightRecorder.h.
#include "llcdist/runtime/FlightRecorder.h"

#include "llcdist/runtime/Diagnose.h"

#include "Reduce.h"

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace llcdist::rt {

namespace {
thread_local const CommCallSite* tlsSite = nullptr;
}  // namespace

const CommCallSite* currentCallSite() { return tlsSite; }

ScopedCallSite::ScopedCallSite(const CommCallSite& site) : site_(site), previous_(tlsSite) {
  if (!site_.enqueuedUs) site_.enqueuedUs = flightNowUs();
  tlsSite = &site_;
}
ScopedCallSite::~ScopedCallSite() { tlsSite = previous_; }

int64_t flightNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* commRecordStateName(CommRecord::State s) {
  return s == CommRecord::State::kStarted ? "started" : s == CommRecord::State::kCompleted ? "completed" : "failed";
}

struct FlightRecorder::Ring {
  mutable std::mutex mu;
  std::vector<CommRecord> slots;       // record id k at slots[k % capacity]
  int64_t next = 0;                    // the next record's id
  std::map<std::string, int64_t> seq;  // per channel: the next call's number
};

FlightRecorder::FlightRecorder(FlightRunInfo info, const std::vector<int>& localRanks, size_t capacity)
    : info_(std::move(info)), ranks_(localRanks) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    rings_.push_back(std::make_unique<Ring>());
    rings_.back()->slots.resize(std::max<size_t>(capacity, 1));
  }
}
FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::setRunId(std::string id) {
  std::lock_guard<std::mutex> lock(infoMu_);
  info_.runId = std::move(id);
}

FlightRecorder::Ring& FlightRecorder::ring(int rank) const {
  const auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  return *rings_[size_t(it - ranks_.begin())];  // callers pass local ranks (the communicator checks)
}

int64_t FlightRecorder::start(int rank, CommRecord r) {
  Ring& g = ring(rank);
  const int64_t now = flightNowUs();
  std::lock_guard<std::mutex> lock(g.mu);
  r.id = g.next++;
  r.seq = g.seq[r.channel]++;
  r.state = CommRecord::State::kStarted;
  r.startedUs = now;
  if (!r.enqueuedUs || r.enqueuedUs > now) r.enqueuedUs = now;
  const int64_t id = r.id;
  g.slots[size_t(id) % g.slots.size()] = std::move(r);
  return id;
}

void FlightRecorder::finish(int rank, int64_t id, const Status& result) {
  Ring& g = ring(rank);
  const int64_t now = flightNowUs();
  std::lock_guard<std::mutex> lock(g.mu);
  CommRecord& r = g.slots[size_t(id) % g.slots.size()];
  if (r.id != id) return;  // dropped from the ring already
  r.state = result.isOk() ? CommRecord::State::kCompleted : CommRecord::State::kFailed;
  r.completedUs = now;
  if (!result.isOk()) r.error = result.toString();
}

std::vector<CommRecord> FlightRecorder::records(int rank, int64_t* dropped) const {
  const Ring& g = ring(rank);
  std::lock_guard<std::mutex> lock(g.mu);
  const int64_t n = int64_t(g.slots.size());
  const int64_t first = std::max<int64_t>(0, g.next - n);
  if (dropped) *dropped = first;
  std::vector<CommRecord> out;
  for (int64_t id = first; id < g.next; ++id) out.push_back(g.slots[size_t(id % n)]);
  return out;
}

bool FlightRecorder::oldestInFlight(int* rank, CommRecord* record) const {
  bool found = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Ring& g = *rings_[i];
    std::lock_guard<std::mutex> lock(g.mu);
    for (const CommRecord& r : g.slots)
      if (r.state == CommRecord::State::kStarted && !r.op.empty() && (!found || r.startedUs < record->startedUs)) {
        found = true;
        *rank = ranks_[i];
        *record = r;
      }
  }
  return found;
}

bool FlightRecorder::anyUnfinished() const {
  for (const std::unique_ptr<Ring>& g : rings_) {
    std::lock_guard<std::mutex> lock(g->mu);
    for (const CommRecord& r : g->slots)
      if (!r.op.empty() && r.state != CommRecord::State::kCompleted) return true;
  }
  return false;
}

namespace {
nlohmann::ordered_json recordJson(const CommRecord& r) {
  nlohmann::ordered_json j;
  j["id"] = r.id;
  j["channel"] = r.channel;
  j["seq"] = r.seq;
  j["op"] = r.op;
  j["group"] = r.group;
  if (r.peer >= 0) j["peer"] = r.peer;
  j["count"] = r.count;
  j["bytes"] = r.bytes;
  j["dtype"] = r.dtype;
  if (!r.reduceOp.empty()) j["reduce_op"] = r.reduceOp;
  if (r.tag >= 0) j["tag"] = r.tag;
  j["microbatch"] = r.microbatch;
  j["state"] = commRecordStateName(r.state);
  if (!r.error.empty()) j["error"] = r.error;
  j["enqueued_us"] = r.enqueuedUs;
  j["started_us"] = r.startedUs;
  if (r.state != CommRecord::State::kStarted) j["completed_us"] = r.completedUs;
  j["step"] = r.step;
  if (!r.what.empty()) j["what"] = r.what;
  if (!r.program.empty()) {
    j["program"] = r.program;
    j["subroutine"] = r.subroutine;
    j["op_index"] = r.opIndex;
    j["action"] = r.action;
    j["loc"] = r.loc;
  }
  return j;
}
}  // namespace

std::string FlightRecorder::dumpJson(int rank, const std::string& reason) const {
  int64_t dropped = 0;
  const std::vector<CommRecord> recs = records(rank, &dropped);
  nlohmann::ordered_json j;
  j["format"] = "llc-dist-flight";
  j["version"] = 1;
  {
    std::lock_guard<std::mutex> lock(infoMu_);
    j["run_id"] = info_.runId;
  }
  j["rank"] = rank;
  j["world_size"] = info_.worldSize;
  // cp and its place in the order only when cp > 1 (a dump without context parallelism reads as before).
  const bool cp = info_.mesh.axisSize(MeshAxis::kCp) > 1;
  nlohmann::ordered_json order = nlohmann::ordered_json::array();
  for (MeshAxis a : info_.mesh.order)
    if (a != MeshAxis::kCp || cp) order.push_back(std::string(meshAxisName(a)));
  j["mesh"] = {{"dp", info_.mesh.axisSize(MeshAxis::kDp)},
               {"tp", info_.mesh.axisSize(MeshAxis::kTp)},
               {"pp", info_.mesh.axisSize(MeshAxis::kPp)},
               {"rank_order", order}};
  if (cp) j["mesh"]["cp"] = info_.mesh.axisSize(MeshAxis::kCp);
  if (info_.mesh.ep > 1) j["mesh"]["ep"] = info_.mesh.ep;  // expert parallelism: written only when > 1
  j["plan"] = info_.planDir;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  j["host"] = host;
  j["pid"] = int64_t(getpid());
  j["comm_timeout_s"] = info_.commTimeoutSeconds;
  j["dumped_us"] = flightNowUs();
  j["reason"] = reason;
  j["dropped"] = dropped;
  nlohmann::ordered_json rs = nlohmann::ordered_json::array();
  for (const CommRecord& r : recs) rs.push_back(recordJson(r));
  j["records"] = std::move(rs);
  return j.dump(1) + "\n";
}

StatusOr<std::vector<std::string>> FlightRecorder::dump(const std::string& dir, const std::string& reason) const {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    return Status::ioError("flight recorder: cannot create directory '" + dir + "': " + std::strerror(errno));
  std::vector<std::string> paths;
  for (int rank : ranks_) {
    const std::string path = dir + "/flight-rank-" + std::to_string(rank) + ".json";
    const std::string tmp = path + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << dumpJson(rank, reason);
      if (!f) return Status::ioError("flight recorder: cannot write '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      return Status::ioError("flight recorder: cannot rename '" + tmp + "' to '" + path + "'");
    paths.push_back(path);
  }
  return paths;
}

namespace {

std::string groupChannel(const std::vector<int>& group) {
  std::string s = "group ";
  for (size_t i = 0; i < group.size(); ++i) s += (i ? "," : "") + std::to_string(group[i]);
  return s;
}
std::string p2pChannel(int from, int to) { return "p2p " + std::to_string(from) + "->" + std::to_string(to); }

class Recording final : public Communicator {
 public:
  Recording(Communicator& inner, FlightRecorder& rec) : inner_(inner), rec_(rec) {}
  int worldSize() const override { return inner_.worldSize(); }

  Status allReduce(int rank, const std::vector<int>& group, void* buf, int64_t count, CommDType dtype,
                   ReduceOp op) override {
    CommRecord r = collective("all_reduce", group, count, dtype);
    r.reduceOp = comm::opName(op);
    return run(rank, std::move(r), [&] { return inner_.allReduce(rank, group, buf, count, dtype, op); });
  }
  Status allGather(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                   CommDType dtype) override {
    return run(rank, collective("all_gather", group, outer * inner, dtype),
               [&] { return inner_.allGather(rank, group, x, y, outer, inner, dtype); });
  }
  Status reduceScatter(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                       CommDType dtype, ReduceOp op) override {
    // count: the input's elements (n · outer · inner)
    CommRecord r = collective("reduce_scatter", group, outer * inner * int64_t(group.size()), dtype);
    r.reduceOp = comm::opName(op);
    return run(rank, std::move(r), [&] { return inner_.reduceScatter(rank, group, x, y, outer, inner, dtype, op); });
  }
  Status allToAll(int rank, const std::vector<int>& group, const void* send, void* recv, int64_t count,
                  CommDType dtype) override {
    // count: the input's elements (n blocks of `count`)
    return run(rank, collective("all_to_all", group, count * int64_t(group.size()), dtype),
               [&] { return inner_.allToAll(rank, group, send, recv, count, dtype); });
  }
  Status allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows, const int32_t* sendSplits,
                   void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                   CommDType dtype) override {
    // count: x's elements (the capacity; the rows sent vary per call)
    return run(rank, collective("all_to_all_v", group, xRows * rowElems, dtype), [&] {
      return inner_.allToAllV(rank, group, x, xRows, sendSplits, y, yRows, recvSplits, chunks, rowElems, dtype);
    });
  }
  Status send(int rank, int peer, const void* x, int64_t count, CommDType dtype, int64_t tag,
              int64_t microbatch) override {
    return run(rank, p2p("send", rank, peer, peer, count, dtype, tag, microbatch),
               [&] { return inner_.send(rank, peer, x, count, dtype, tag, microbatch); });
  }
  Status recv(int rank, int peer, void* y, int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) override {
    return run(rank, p2p("recv", peer, rank, peer, count, dtype, tag, microbatch),
               [&] { return inner_.recv(rank, peer, y, count, dtype, tag, microbatch); });
  }
  void abort(const Status& reason) override { inner_.abort(reason); }
  Status abortReason() const override { return inner_.abortReason(); }

 private:
  static CommRecord collective(const char* op, const std::vector<int>& group, int64_t count, CommDType dtype) {
    CommRecord r;
    r.op = op;
    r.channel = groupChannel(group);
    r.group = group;
    r.count = count;
    r.bytes = count * commDTypeSize(dtype);
    r.dtype = commDTypeName(dtype);
    return r;
  }
  // A message from rank `from` to rank `to`; `peer` is the caller's other rank.
  static CommRecord p2p(const char* op, int from, int to, int peer, int64_t count, CommDType dtype, int64_t tag,
                        int64_t microbatch) {
    CommRecord r;
    r.op = op;
    r.channel = p2pChannel(from, to);
    r.group = {from, to};
    r.peer = peer;
    r.count = count;
    r.bytes = count * commDTypeSize(dtype);
    r.dtype = commDTypeName(dtype);
    r.tag = tag;
    r.microbatch = microbatch;
    return r;
  }
  template <typename Fn>
  Status run(int rank, CommRecord r, Fn&& call) {
    if (const CommCallSite* s = currentCallSite()) {
      if (s->program) r.program = *s->program;
      if (s->subroutine) r.subroutine = *s->subroutine;
      if (s->loc) r.loc = *s->loc;
      if (s->what) r.what = s->what;
      r.opIndex = s->opIndex;
      r.step = s->step;
      r.action = s->action;
      if (r.microbatch < 0) r.microbatch = s->microbatch;
      r.enqueuedUs = s->enqueuedUs;
    }
    const int64_t id = rec_.start(rank, std::move(r));
    Status st = call();
    rec_.finish(rank, id, st);
    return st;
  }

  Communicator& inner_;
  FlightRecorder& rec_;
};

}  // namespace

std::unique_ptr<Communicator> makeRecordingCommunicator(Communicator& inner, FlightRecorder& recorder) {
  return std::make_unique<Recording>(inner, recorder);
}

// ---- the watchdog -------------------------------------------------------------------------------------

Watchdog::Watchdog(FlightRecorder& recorder, WatchdogOptions options) : rec_(recorder), opts_(std::move(options)) {
  if (!opts_.errors) opts_.errors = &std::cerr;
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(wakeMu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Status Watchdog::dumpHere(const std::string& reason) {
  StatusOr<std::vector<std::string>> paths = rec_.dump(opts_.dir, reason);
  if (!paths.isOk()) {
    *opts_.errors << "llc-dist: " << paths.status().toString() << "\n" << std::flush;
    return paths.status();
  }
  return Status::ok();
}

void Watchdog::fire(const std::string& reason) {
  std::unique_lock<std::mutex> lock(mu_);
  if (fired_ || answered_) {  // the diagnosis is the first firing process's
    (void)dumpHere(reason);
    if (!fired_) {
      // Another process asked for this dump: it is reading the dumps and will end the job; ending
      // it from here first would cut its diagnosis off. (Bounded: that process may be gone.)
      lock.unlock();
      std::this_thread::sleep_for(opts_.grace + std::chrono::seconds(2));
    }
    return;
  }
  fired_ = true;
  if (!dumpHere(reason).isOk()) return;
  int answered = 0;
  const int others = rec_.info().worldSize - int(rec_.localRanks().size());
  if (opts_.peers && others > 0) answered = opts_.peers->requestDumps(reason, opts_.grace);
  std::ostream& e = *opts_.errors;
  e << "llc-dist: flight recorder: dumped rank" << (rec_.localRanks().size() == 1 ? " " : "s ");
  for (size_t i = 0; i < rec_.localRanks().size(); ++i) e << (i ? "," : "") << rec_.localRanks()[i];
  e << " to " << opts_.dir << "/";
  if (others > 0) e << " (" << answered << " of the " << others << " other ranks dumped too)";
  e << "; the diagnosis (llc-dist diagnose " << opts_.dir << "):\n";
  StatusOr<FlightSet> set = loadFlightDir(opts_.dir);
  if (!set.isOk())
    e << "  " << set.status().toString() << "\n";
  else {
    std::istringstream text(diagnoseText(*set));
    for (std::string line; std::getline(text, line);) e << "  " << line << "\n";
  }
  e << std::flush;
}

void Watchdog::loop() {
  const int64_t limitUs = int64_t(opts_.timeoutSeconds * 1e6) + 1000000;
  bool timedOut = false;  // the watchdog fires once
  std::unique_lock<std::mutex> lock(wakeMu_);
  while (!stop_) {
    wake_.wait_for(lock, opts_.poll, [&] { return stop_.load(); });
    if (stop_) break;
    lock.unlock();
    std::string why;
    if (opts_.peers && opts_.peers->pollRequest(&why)) {
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!fired_) answered_ = true;
        (void)dumpHere(why);
      }
      opts_.peers->answer();
    }
    int rank = -1;
    CommRecord r;
    if (!timedOut && rec_.oldestInFlight(&rank, &r) && flightNowUs() - r.startedUs > limitUs) {
      timedOut = true;
      const std::string reason = "watchdog: rank " + std::to_string(rank) + " has waited " +
                                 std::to_string((flightNowUs() - r.startedUs) / 1000000) + " s in " + r.op + " #" +
                                 std::to_string(r.seq) + " on " + r.channel + " (--comm-timeout " +
                                 std::to_string(int64_t(opts_.timeoutSeconds)) + ")";
      fire(reason);
      if (opts_.communicator) opts_.communicator->abort(Status::deadlineExceeded(reason));
    }
    lock.lock();
  }
}

}  // namespace llcdist::rt
