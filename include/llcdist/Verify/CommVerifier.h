//===- CommVerifier.h - static cross-rank communication verifier -*- C++ -*-===//
//
// verify-plan (design.md §2): executes every rank's communication events
// symbolically under blocking semantics and reports mismatched send/recv
// pairs, collectives that differ across a group, deadlocks (a cyclic wait, or
// a rank that waits on a rank that has already finished) and, with eager
// sends, messages that are never received, before anything is launched. MLIR-free, standard library only; see
// docs/plan-verifier.md for the model, the semantics and the message format.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_VERIFY_COMMVERIFIER_H
#define LLCDIST_VERIFY_COMMVERIFIER_H

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist {
namespace verify {

enum class EventKind { Send, Recv, Collective };

/// How a point-to-point Send completes (VerifyOptions::sendMode).
enum class SendMode {
  /// A Send completes together with its Recv, when both are their ranks'
  /// heads (unbuffered; NCCL send/recv issued one at a time). The strictest
  /// model: a plan accepted under it is also accepted under Eager.
  Rendezvous,
  /// A Send copies its message into the FIFO channel (sender -> receiver) and
  /// completes at once; a Recv(from q) completes when the channel (q -> self)
  /// holds a message and takes the oldest one. What the llc-dist runtime
  /// implements, so the compiler verifies its plans with this mode.
  Eager,
};

/// "rendezvous" or "eager".
const char *sendModeName(SendMode mode);

/// An interned name: a collective kind ("all_reduce.sum") or a dtype ("f32").
/// Events of a long schedule repeat a handful of names millions of times, so
/// an event holds a pointer into one process-wide pool instead of a string:
/// copying an event allocates nothing and two names compare as pointers. The
/// pool only grows with distinct names, a small closed vocabulary (dtypes and
/// collective kinds), and is safe to use from several threads.
class Name {
public:
  Name();
  Name(std::string_view text);
  Name(const char *text) : Name(std::string_view(text)) {}
  Name(const std::string &text) : Name(std::string_view(text)) {}
  const std::string &str() const { return *text; }
  friend bool operator==(Name a, Name b) { return a.text == b.text; }
  friend bool operator!=(Name a, Name b) { return a.text != b.text; }

private:
  const std::string *text;
};

/// A collective's member ranks, shared by every event on the group: the tp
/// group's all-gathers of every microbatch hold one list, not one copy each.
using Group = std::shared_ptr<const std::vector<int64_t>>;

/// One communication event of a rank's program (what remains of the program
/// once local compute is dropped). Send/Recv are point-to-point transfers
/// (rendezvous or eager, see SendMode), matched in program order per ordered
/// (sender, receiver) pair; a Collective blocks until every member of its group reaches a
/// collective on the same group.
struct CommEvent {
  EventKind kind = EventKind::Send;
  /// Send/Recv: the other rank (destination of a Send, source of a Recv).
  int64_t peer = -1;
  /// Collective: the member ranks, sorted ascending, no duplicates, and
  /// containing the issuing rank. Two collectives are on the same group iff
  /// their member lists are equal (whether or not they share the list).
  Group group;
  /// Collective: "all_reduce", "all_gather", "reduce_scatter", ... (compared
  /// as a name, so "all_reduce.sum" vs "all_reduce.max" also differ).
  Name collective;
  /// Elements per the producer's convention (for collectives: the same on
  /// every member, e.g. the per-member input count).
  int64_t count = 0;
  Name dtype;
  /// Send/Recv: an optional tag; compared only when both sides carry one.
  std::optional<int64_t> tag;
  /// Free text for messages: subroutine, op index, location ("bwd#12 (h.3.attn)").
  std::string provenance;
  /// For producers that describe events only when a message needs them
  /// (CommPlan::describeOrigin): an opaque reference to what issued the
  /// event, e.g. its action and op; -1 for none. Ignored when `provenance`
  /// is set.
  int64_t origin = -1;

  /// The group's members (empty without a group).
  const std::vector<int64_t> &members() const;

  static CommEvent send(int64_t to, int64_t count, Name dtype,
                        std::string provenance = {},
                        std::optional<int64_t> tag = std::nullopt);
  static CommEvent recv(int64_t from, int64_t count, Name dtype,
                        std::string provenance = {},
                        std::optional<int64_t> tag = std::nullopt);
  static CommEvent coll(Name kind, std::vector<int64_t> group, int64_t count,
                        Name dtype, std::string provenance = {});
};

/// The communication of a whole plan: ranks[r] is rank r's ordered event
/// list; the world size is ranks.size().
struct CommPlan {
  std::vector<std::vector<CommEvent>> ranks;
  /// The provenance of rank r's event with `origin` >= 0 and no provenance
  /// text, computed when a message names the event (a plan of a million
  /// events names a handful). Unset: such events have no provenance.
  std::function<std::string(int64_t rank, int64_t origin)> describeOrigin;

  explicit CommPlan(int64_t world = 0) : ranks(world) {}
  int64_t world() const { return static_cast<int64_t>(ranks.size()); }
  std::vector<CommEvent> &operator[](int64_t r) { return ranks[r]; }
  const std::vector<CommEvent> &operator[](int64_t r) const { return ranks[r]; }
  int64_t totalEvents() const;
  /// The provenance of ranks[r][i]: its text, else describeOrigin's.
  std::string provenance(int64_t r, size_t i) const;
};

enum class ErrorKind {
  /// A malformed event (peer out of range or self, bad group, negative count).
  InvalidEvent,
  /// A Send met its Recv but element count, dtype or tag differ.
  SendRecvMismatch,
  /// All members reached a collective on one group, but kinds/counts/dtypes differ.
  CollectiveMismatch,
  /// A Send/Recv whose peer has finished all its events (missing recv/send).
  PeerFinished,
  /// Eager sends only: a message still in its channel when the receiver has
  /// finished all its events (a missing recv).
  UnreceivedSend,
  /// A collective some member never reaches because it has finished
  /// (the collective was skipped on that rank).
  CollectiveSkipped,
  /// No rank can advance and the blocked ranks wait on each other in a cycle.
  CyclicWait,
};

const char *errorKindName(ErrorKind kind);

/// An event of the plan: rank and index into that rank's event list.
struct EventRef {
  int64_t rank = -1;
  int64_t index = -1;
  bool operator==(const EventRef &o) const {
    return rank == o.rank && index == o.index;
  }
};

struct VerifyError {
  ErrorKind kind = ErrorKind::InvalidEvent;
  /// One line; names the ranks, event indices and provenances (see the docs).
  std::string message;
  /// The events the message talks about (the blocked/mismatched heads).
  std::vector<EventRef> events;
  /// Extra lines; for deadlocks, the whole blocked set: each blocked rank,
  /// what it waits for, and the current head event of each rank it waits on.
  std::vector<std::string> notes;
};

struct VerifyResult {
  std::vector<VerifyError> errors;
  /// Events that completed during the symbolic execution / all events (an
  /// eager Send completes when its message is enqueued).
  int64_t eventsCompleted = 0;
  int64_t eventsTotal = 0;

  bool ok() const { return errors.empty(); }
  /// "ok: N events on W ranks" or one error per paragraph (message + notes).
  std::string str() const;
};

struct VerifyOptions {
  /// Stop after this many errors. Mismatches are reported and the matched
  /// events still complete, so later errors can be found; a deadlock ends the
  /// run. The first error is the one to fix first; later ones may be caused
  /// by it.
  int64_t maxErrors = 1;
  /// Cap on the lines of the blocked-set listing attached to a deadlock.
  int64_t maxNotes = 32;
  /// Point-to-point semantics. The default keeps the strict rendezvous model;
  /// the compiler passes SendMode::Eager because the runtime's sends are
  /// buffered (a 1F1B schedule whose stages send before they receive
  /// deadlocks under Rendezvous but runs with eager sends).
  SendMode sendMode = SendMode::Rendezvous;
};

/// Symbolically executes all ranks of `plan` and reports the errors.
/// O(total events + total group sizes of the collectives executed), plus a
/// deadlock diagnosis that is linear in the blocked ranks' wait-for edges
/// (and, for eager sends, O(p2p events x log channels) to set up the
/// channels).
VerifyResult verifyCommPlan(const CommPlan &plan, const VerifyOptions &opts = {});

/// "send of 1024 f32 to 1 (tag 3)", "recv of 1024 f32 from 0",
/// "all_reduce of 4096 f32 on group [0,1,2,3]".
std::string describe(const CommEvent &e);

} // namespace verify
} // namespace llcdist

#endif // LLCDIST_VERIFY_COMMVERIFIER_H
