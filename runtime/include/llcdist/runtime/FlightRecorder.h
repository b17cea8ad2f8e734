// The flight recorder and the watchdog's dump (docs/cluster.md "Hangs: the flight recorder"): every
// rank keeps a ring of its last N communication calls, what PyTorch's NCCL flight recorder keeps plus
// what only the compiler knows — the plan op that made the call and why the compiler put it there.
//
// Records. A RecordingCommunicator (makeRecordingCommunicator) wraps the run's communicator and
// records each call of each local rank when it starts and when it returns:
//   channel   the call's channel: "group 0,1,2,3" (a collective's members in member order) or
//             "p2p 2->3" (messages from rank 2 to rank 3: the sender's send and the receiver's recv
//             name the same channel);
//   seq       the call's number on its channel for this rank (0, 1, ...): the members of a group
//             number their calls alike, and the k-th send of a pair meets the k-th recv, so records
//             of different ranks match by (channel, seq);
//   op, group, peer, count (elements), bytes, dtype, reduce op, tag, microbatch;
//   state     started (in the communicator), completed, or failed (with the error);
//   times     enqueued (when the interpreter issued it: earlier than started for a call of an
//             asynchronous queue, which a worker thread runs), started, completed: microseconds of
//             the system clock (comparable across the processes of one host);
//   call site the plan's provenance, set by the issuing thread with ScopedCallSite (Interpreter.cpp
//             does for every communication op and the CPU backend carries it to the worker thread
//             that runs the call): program file, subroutine, op index, action, step, microbatch and
//             the op's loc ("reason @ param or layer @ source", as the compiler wrote it); or, for
//             the training driver's own calls, what they are ("the plan's fingerprint").
// The ring keeps the last `capacity` calls of each rank (older ones are dropped and counted).
//
// Dumps. dump() writes DIR/flight-rank-R.json for each local rank (format "llc-dist-flight",
// version 1; written atomically). A dump carries the run's identity (run_id: the plan's fingerprint
// and rank 0's start time; every process of one run writes the same), the world, the mesh, why it
// was dumped, and the ring, oldest first. Diagnose.h reads the dumps of a directory back.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Status.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace llcdist::rt {

// Where a communication call comes from. Strings are borrowed (the plan's, or literals): valid while
// the call runs.
struct CommCallSite {
  const std::string* program = nullptr;     // the program file ("program-0.json")
  const std::string* subroutine = nullptr;  // its subroutine's name
  int64_t opIndex = -1;                     // the op's index in the subroutine
  const std::string* loc = nullptr;         // the op's provenance (Op::loc)
  int64_t step = -1, microbatch = -1, action = -1;
  const char* what = nullptr;  // a call of the driver itself (no program): what it is
  int64_t enqueuedUs = 0;      // when the call was issued (0: when it started)

  // A call of the training driver itself, not of a plan op.
  static CommCallSite driver(const char* what) {
    CommCallSite s;
    s.what = what;
    return s;
  }
};

// The call site of the calling thread's communication calls (nullptr: none set).
const CommCallSite* currentCallSite();
// Sets the calling thread's call site for its lifetime (restoring the previous one).
class ScopedCallSite {
public:
  explicit ScopedCallSite(const CommCallSite& site);
  ~ScopedCallSite();
  ScopedCallSite(const ScopedCallSite&) = delete;
  ScopedCallSite& operator=(const ScopedCallSite&) = delete;

private:
  CommCallSite site_;
  const CommCallSite* previous_;
};

// Microseconds of the system clock.
int64_t flightNowUs();

struct CommRecord {
  enum class State { kStarted, kCompleted, kFailed };
  int64_t id = 0;  // the rank's call number (all channels)
  std::string channel;
  int64_t seq = 0;
  std::string op;          // all_reduce, all_gather, reduce_scatter, all_to_all, send, recv
  std::vector<int> group;  // a collective's members; a send/recv: {sender, receiver}
  int peer = -1;           // send/recv: the other rank
  int64_t count = 0, bytes = 0;
  std::string dtype, reduceOp;  // reduceOp "" unless it reduces
  int64_t tag = -1, microbatch = -1;
  State state = State::kStarted;
  std::string error;
  int64_t enqueuedUs = 0, startedUs = 0, completedUs = 0;
  // The call site (CommCallSite, copied).
  std::string program, subroutine, loc, what;
  int64_t opIndex = -1, step = -1, action = -1;
};
const char* commRecordStateName(CommRecord::State s);

// What a dump says about the run.
struct FlightRunInfo {
  std::string runId;  // the same on every process of one run
  std::string planDir;
  int worldSize = 1;
  Mesh mesh;
  double commTimeoutSeconds = 0;
};

class FlightRecorder {
public:
  // Rings of `capacity` records (>= 1) for each of `localRanks`.
  FlightRecorder(FlightRunInfo info, const std::vector<int>& localRanks, size_t capacity);
  ~FlightRecorder();

  const FlightRunInfo& info() const { return info_; }
  void setRunId(std::string id);
  // A call of `rank` starts: `r`'s identity fields (op, group, peer, sizes, ...) are the call's; its
  // channel numbering, id, state and times are filled here. Returns the record's id.
  int64_t start(int rank, CommRecord r);
  void finish(int rank, int64_t id, const Status& result);

  // The records of `rank`, oldest first, and how many were dropped from its ring.
  std::vector<CommRecord> records(int rank, int64_t* dropped = nullptr) const;
  const std::vector<int>& localRanks() const { return ranks_; }
  // The local call that has been in the communicator longest (state started), and since when (us);
  // false when none is.
  bool oldestInFlight(int* rank, CommRecord* record) const;
  // Whether a local call is started or failed: a rank waited for others (or still does).
  bool anyUnfinished() const;

  // Writes DIR/flight-rank-R.json for every local rank (DIR is created if missing), each with
  // `reason`. Returns the paths written.
  StatusOr<std::vector<std::string>> dump(const std::string& dir, const std::string& reason) const;
  // One rank's dump as JSON text (what dump() writes).
  std::string dumpJson(int rank, const std::string& reason) const;

private:
  struct Ring;
  Ring& ring(int rank) const;
  FlightRunInfo info_;
  std::vector<int> ranks_;
  std::vector<std::unique_ptr<Ring>> rings_;
  mutable std::mutex infoMu_;
};

// A communicator that passes every call to `inner` and records it in `recorder` (the calling rank
// must be one of the recorder's local ranks).
std::unique_ptr<Communicator> makeRecordingCommunicator(Communicator& inner, FlightRecorder& recorder);

// How a dump reaches the other processes of a run (one process per rank; the MPI communicator's
// makeMpiDumpPeers). With every rank a thread of one process there is nothing to reach.
class DumpPeers {
public:
  virtual ~DumpPeers() = default;
  // Asks every other process to dump and waits until all have answered or `grace` has passed (a dead
  // or stopped process never answers); requests that arrive meanwhile are answered (this process has
  // dumped before it asks). Returns how many answered.
  virtual int requestDumps(const std::string& reason, std::chrono::milliseconds grace) = 0;
  // Whether another process asked this one to dump (its reason in *reason); answer() after dumping.
  virtual bool pollRequest(std::string* reason) = 0;
  virtual void answer() = 0;
};

struct WatchdogOptions {
  std::string dir;               // where dumps go (--flight-dir)
  double timeoutSeconds = 600;   // --comm-timeout
  Communicator* communicator = nullptr;  // aborted when the watchdog fires
  DumpPeers* peers = nullptr;    // one process per rank; nullptr: every rank is local
  std::ostream* errors = nullptr;  // the diagnosis (nullptr: std::cerr)
  std::chrono::milliseconds grace{5000};  // how long fire() waits for the others' dumps
  std::chrono::milliseconds poll{100};
};

// The watchdog thread of a process: every `poll` it answers other processes' dump requests (dumping
// this process's ranks first) and fires when a local call has been in the communicator longer than
// the timeout (+ 1 s, so that the communicator's own timeout error, which names the missing members,
// comes first): it dumps, asks the others to dump, prints the diagnosis (Diagnose.h) of the
// directory and aborts the communicator. The training driver fires it too when a run fails.
class Watchdog {
public:
  Watchdog(FlightRecorder& recorder, WatchdogOptions options);
  ~Watchdog();  // stops the thread
  // Once per process (later calls, and calls after this process dumped at another's request, only
  // dump again): dump, request the others' dumps, print the diagnosis. Thread-safe. A call after this
  // process answered another's request waits grace + 2 s before it returns, so that the process
  // that asked prints its diagnosis and ends the job first.
  void fire(const std::string& reason);

private:
  void loop();
  Status dumpHere(const std::string& reason);
  FlightRecorder& rec_;
  WatchdogOptions opts_;
  std::mutex mu_;
  bool fired_ = false, answered_ = false;
  std::atomic<bool> stop_{false};
  std::condition_variable wake_;
  std::mutex wakeMu_;
  std::thread thread_;
};

}  // namespace llcdist::rt
