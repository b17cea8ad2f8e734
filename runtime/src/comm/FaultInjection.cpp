// Fault injection. See FaultInjection.h.
#include "llcdist/runtime/FaultInjection.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace llcdist::rt {
namespace {

Status bad(const std::string& why) {
  return Status::invalidArgument(
      "LLCDIST_FAULT: " + why +
      " (expected rank:R,step:S,op:K,kind:exit|stall|delay[,seconds:X], e.g. rank:1,step:2,kind:stall)");
}

StatusOr<int64_t> parseCount(const std::string& key, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || n < 0 || n > (int64_t(1) << 40))
    return bad(key + " must be an integer >= 0, got '" + v + "'");
  return int64_t(n);
}

class Faulty final : public FaultCommunicator {
 public:
  Faulty(Communicator& inner, const FaultSpec& spec) : inner_(inner), spec_(spec) {}

  void beginStep(int rank, int64_t step) override {
    if (rank != spec_.rank) return;
    step_.store(step);
    calls_.store(0);
  }
  int worldSize() const override { return inner_.worldSize(); }
  Status allReduce(int rank, const std::vector<int>& group, void* buf, int64_t count, CommDType dtype,
                   ReduceOp op) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "all_reduce"));
    return inner_.allReduce(rank, group, buf, count, dtype, op);
  }
  Status allGather(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                   CommDType dtype) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "all_gather"));
    return inner_.allGather(rank, group, x, y, outer, inner, dtype);
  }
  Status reduceScatter(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                       CommDType dtype, ReduceOp op) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "reduce_scatter"));
    return inner_.reduceScatter(rank, group, x, y, outer, inner, dtype, op);
  }
  Status allToAll(int rank, const std::vector<int>& group, const void* send, void* recv, int64_t count,
                  CommDType dtype) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "all_to_all"));
    return inner_.allToAll(rank, group, send, recv, count, dtype);
  }
  Status allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows, const int32_t* sendSplits,
                   void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                   CommDType dtype) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "all_to_all_v"));
    return inner_.allToAllV(rank, group, x, xRows, sendSplits, y, yRows, recvSplits, chunks, rowElems, dtype);
  }
  Status send(int rank, int peer, const void* x, int64_t count, CommDType dtype, int64_t tag,
              int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "send to rank " + std::to_string(peer)));
    return inner_.send(rank, peer, x, count, dtype, tag, microbatch);
  }
  Status recv(int rank, int peer, void* y, int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(maybeFault(rank, "recv from rank " + std::to_string(peer)));
    return inner_.recv(rank, peer, y, count, dtype, tag, microbatch);
  }
  void abort(const Status& reason) override { inner_.abort(reason); }
  Status abortReason() const override { return inner_.abortReason(); }

 private:
  Status maybeFault(int rank, const std::string& what) {
    if (rank != spec_.rank || step_.load() != spec_.step) return Status::ok();
    if (calls_.fetch_add(1) != spec_.op) return Status::ok();
    const char* kind = spec_.kind == FaultSpec::Kind::kExit    ? "exit"
                       : spec_.kind == FaultSpec::Kind::kStall ? "stall"
                                                               : "delay";
    std::fprintf(stderr, "llc-dist: LLCDIST_FAULT: rank %d, step %lld, communication call %lld (%s): %s\n", rank,
                 static_cast<long long>(spec_.step), static_cast<long long>(spec_.op), what.c_str(), kind);
    std::fflush(stderr);
    switch (spec_.kind) {
      case FaultSpec::Kind::kExit:
        std::_Exit(3);
      case FaultSpec::Kind::kStall:
        // Until the job ends: a process of one rank is killed by the launcher (MPI_Abort); a rank
        // that is a thread ends when the others have aborted the communicator.
        while (inner_.abortReason().isOk()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return Status::aborted("LLCDIST_FAULT: the stalled rank ends with the job");
      case FaultSpec::Kind::kDelay:
        std::this_thread::sleep_for(std::chrono::duration<double>(spec_.seconds));
        break;
    }
    return Status::ok();
  }

  Communicator& inner_;
  FaultSpec spec_;
  std::atomic<int64_t> step_{-1}, calls_{0};
};

}  // namespace

StatusOr<FaultSpec> parseFaultSpec(const std::string& text) {
  FaultSpec f;
  std::map<std::string, std::string> kv;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return bad("'" + item + "' is not key:value");
    const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    if (key != "rank" && key != "step" && key != "op" && key != "kind" && key != "seconds")
      return bad("unknown field '" + key + "'");
    if (!kv.emplace(key, value).second) return bad("field '" + key + "' given twice");
  }
  for (const char* required : {"rank", "step", "kind"})
    if (!kv.count(required)) return bad(std::string("missing field '") + required + "'");
  LLCDIST_ASSIGN_OR_RETURN(int64_t rank, parseCount("rank", kv["rank"]));
  if (rank > (1 << 30)) return bad("rank out of range");
  f.rank = int(rank);
  LLCDIST_ASSIGN_OR_RETURN(f.step, parseCount("step", kv["step"]));
  if (kv.count("op")) {
    LLCDIST_ASSIGN_OR_RETURN(f.op, parseCount("op", kv["op"]));
  }
  const std::string& kind = kv["kind"];
  if (kind == "exit")
    f.kind = FaultSpec::Kind::kExit;
  else if (kind == "stall")
    f.kind = FaultSpec::Kind::kStall;
  else if (kind == "delay")
    f.kind = FaultSpec::Kind::kDelay;
  else
    return bad("kind must be exit, stall or delay, got '" + kind + "'");
  if (kv.count("seconds")) {
    if (f.kind != FaultSpec::Kind::kDelay) return bad("seconds is for kind:delay");
    char* end = nullptr;
    const std::string& v = kv["seconds"];
    const double s = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(s) || s < 0 || s > 86400)
      return bad("seconds must be a number in [0, 86400], got '" + v + "'");
    f.seconds = s;
  }
  return f;
}

StatusOr<std::optional<FaultSpec>> faultSpecFromEnvironment() {
  const char* v = std::getenv("LLCDIST_FAULT");
  if (!v) return std::optional<FaultSpec>();
  LLCDIST_ASSIGN_OR_RETURN(FaultSpec f, parseFaultSpec(v));
  return std::optional<FaultSpec>(f);
}

std::unique_ptr<FaultCommunicator> makeFaultCommunicator(Communicator& inner, const FaultSpec& spec) {
  return std::make_unique<Faulty>(inner, spec);
}

}  // namespace llcdist::rt
