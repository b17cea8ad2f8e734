// The training side of checkpoints (Checkpoint.h, TrainParts.h): which buffers of a rank are state,
// the per-rank shard files, the atomic commit, and resume with resharding.
//
// Commit protocol (a crash at any point leaves the previous checkpoint loadable):
//   1. every rank writing shards: ROOT/.partial-step-K/rank-R.safetensors and rank-R.json (its files[]
//      entry), each durably (temporary name, fsync, rename, fsync of the directory);
//   2. a barrier over every rank (an all-gather of each rank's success);
//   3. rank 0: checkpoint.json into the partial directory (durably), the directory renamed to
//      ROOT/step-K (fsync of ROOT), then ROOT/latest replaced durably, then --keep-last pruning (each
//      old checkpoint renamed to .deleting-* first, then removed).
// LLCDIST_CHECKPOINT_CRASH=POINT[@N] (the tests' crash): rank 0 raises SIGKILL at POINT of its N-th
// save (default 1): shard (after its shard file), manifest (after checkpoint.json), rename (after the
// rename), latest (after latest), prune (after the first old checkpoint is renamed away).
#include "TrainParts.h"

#include "llcdist/runtime/FileUtil.h"
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace llcdist::rt::train {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string stepName(int64_t step) {
  char b[40];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}

std::string rankFileName(int rank, const char* ext) {
  char b[48];
  std::snprintf(b, sizeof b, "rank-%05d.%s", rank, ext);
  return b;
}

// The optimizer states a param has under the plan's optimizer, in order.
std::vector<std::string> statesOf(const OptimizerDesc& o) {
  if (o.kind == OptimizerDesc::Kind::kAdamW) return {"exp_avg", "exp_avg_sq"};
  if (o.momentum != 0.0) return {"momentum_buffer"};
  return {};
}

// Whether `rank` writes state tensor s's slice: one of the ranks holding that slice writes it (of every
// rank with a copy of the param for its value; of the ranks of its own program for its optimizer state,
// as a tied param's copies on other pipeline stages take their updates from one stage's state, or each
// from its own: then each program writes its copy, the same values). The writer is picked by the
// tensor's name among the holders, so dp replicas share the writing instead of rank 0 writing all.
bool writesSlice(const Manifest& m, const ParamDesc& p, const StateTensor& s, int rank) {
  const ShardLayout mine = layoutOf(m, p, s.block, rank);
  const int64_t program = m.programOfRank(rank);
  std::vector<int> holders;
  for (int r = 0; r < int(m.worldSize()); ++r) {
    if (!p.placementIn(m.programOfRank(r))) continue;
    if (s.state != "param" && m.programOfRank(r) != program) continue;
    const ShardLayout l = layoutOf(m, p, s.block, r);
    if (l.member == mine.member && l.block == mine.block) holders.push_back(r);
  }
  const std::string name = stateTensorName(p, s.state);
  return !holders.empty() && holders[size_t(fnv1a64(name.data(), name.size()) % holders.size())] == rank;
}

// LLCDIST_CHECKPOINT_CRASH (above).
struct CrashPoint {
  std::string point;
  int64_t save = 1;
};
std::optional<CrashPoint> crashPointFromEnvironment() {
  const char* v = std::getenv("LLCDIST_CHECKPOINT_CRASH");
  if (!v || !*v) return std::nullopt;
  CrashPoint c;
  std::string s = v;
  if (size_t at = s.find('@'); at != std::string::npos) {
    c.save = std::atoll(s.c_str() + at + 1);
    s.resize(at);
  }
  c.point = s;
  return c;
}

struct Snapshot {
  struct Tensor {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    std::vector<char> bytes;
    ShardLayout layout;
  };
  int64_t step = 0;
  std::vector<Tensor> tensors;
};

}  // namespace

std::string stateTensorName(const ParamDesc& p, const std::string& state) {
  return state == "param" ? p.name : p.name + "." + state;
}

void forEachCheckpointTensor(const Manifest& m, const std::function<void(const ParamDesc&, const std::string&)>& fn) {
  const std::vector<std::string> states = statesOf(m.optimizer);
  for (const ParamDesc& p : m.params) {
    fn(p, "param");
    for (const std::string& s : states) fn(p, s);
  }
}

StatusOr<std::vector<StateTensor>> stateTensorsOf(const Manifest& m, const Program& prog, size_t programIndex,
                                                  int rank) {
  std::vector<StateTensor> out;
  std::map<int64_t, int64_t> paramOfBuffer;  // value buffer -> param
  for (size_t i = 0; i < m.params.size(); ++i)
    if (const ParamDesc::Placement* pl = m.params[i].placementIn(int64_t(programIndex))) {
      paramOfBuffer[pl->buffer] = int64_t(i);
      out.push_back({int64_t(i), "param", pl->buffer, m.params[i].bufferHoldsBlock()});
    }
  // ZeRO 1/2 with a whole value buffer: the optimizer updates the rank's block, sliced out of the
  // value (shard_slice) and gathered back after: that block is the param's.
  std::map<int64_t, int64_t> sliceSource;  // shard_slice y -> x
  for (const Subroutine& sub : prog.subroutines)
    for (const Op& op : sub.ops)
      if (op.kind == schema::OpKind::kShardSlice) sliceSource[op.arg("y")] = op.arg("x");
  std::map<int64_t, std::set<std::string>> found;  // param -> states seen
  std::set<int64_t> stateBuffers;
  // Each update of one tensor: adamw / sgd, or the k-th tensor of adamw_multi / sgd_multi.
  struct Update {
    int64_t param;  // the updated buffer
    std::vector<std::pair<std::string, int64_t>> roles;  // state name -> buffer (-1: none)
  };
  const auto updatesOf = [](const Op& op) {
    std::vector<Update> u;
    using K = schema::OpKind;
    const auto at = [&](const char* role, size_t k) {
      const std::vector<int64_t>& ids = op.argList(role);
      return k < ids.size() ? ids[k] : int64_t(-1);
    };
    if (op.kind == K::kAdamW) u.push_back({op.arg("param"), {{"exp_avg", op.arg("m")}, {"exp_avg_sq", op.arg("v")}}});
    if (op.kind == K::kSgd) u.push_back({op.arg("param"), {{"momentum_buffer", op.arg("momentum_buf")}}});
    if (op.kind == K::kAdamWMulti)
      for (size_t k = 0; k < op.argList("params").size(); ++k)
        u.push_back({at("params", k), {{"exp_avg", at("m", k)}, {"exp_avg_sq", at("v", k)}}});
    if (op.kind == K::kSgdMulti)
      for (size_t k = 0; k < op.argList("params").size(); ++k)
        u.push_back({at("params", k), {{"momentum_buffer", at("momentum_bufs", k)}}});
    return u;
  };
  for (const Subroutine& sub : prog.subroutines)
    for (const Op& op : sub.ops)
      for (const Update& update : updatesOf(op)) {
        const std::vector<std::pair<std::string, int64_t>>& roles = update.roles;
        auto it = paramOfBuffer.find(update.param);
        if (it == paramOfBuffer.end())
          if (auto slice = sliceSource.find(update.param); slice != sliceSource.end())
            it = paramOfBuffer.find(slice->second);
        if (it == paramOfBuffer.end())
          return Status::invalidArgument(prog.file + ": subroutine '" + sub.name + "': an " +
                                         std::string(schema::opName(op.kind)) + " op updates buffer '" +
                                         prog.buffers[size_t(update.param)].name +
                                         "', which is no param's value buffer: a checkpoint would miss its state");
        const ParamDesc& p = m.params[size_t(it->second)];
        for (const auto& [state, buffer] : roles) {
          if (buffer < 0) continue;
          if (!found[it->second].insert(state).second) continue;  // one op per param and state
          const bool block = p.zero.has_value();
          const int64_t want = block ? p.blockNumel() : p.localNumel();
          if (prog.buffers[size_t(buffer)].numel() != want)
            return Status::invalidArgument(prog.file + ": the " + state + " buffer '" + prog.buffers[size_t(buffer)].name +
                                           "' of param '" + p.name + "' has " +
                                           std::to_string(prog.buffers[size_t(buffer)].numel()) + " elements, not the " +
                                           std::to_string(want) + (block ? " of its ZeRO block" : " of its shard"));
          stateBuffers.insert(buffer);
          out.push_back({it->second, state, buffer, block});
        }
      }
  // A param placed here alone must have its state here; a tied param's copy may take its updates from
  // another stage (the commit checks that some rank wrote every state).
  const std::vector<std::string> want = statesOf(m.optimizer);
  for (const auto& [buffer, param] : paramOfBuffer)
    for (const std::string& state : want)
      if (!found[param].count(state) && m.params[size_t(param)].placements.size() == 1)
        return Status::invalidArgument(prog.file + ": param '" + m.params[size_t(param)].name + "' has no " + state +
                                       " buffer updated by an optimizer op: a checkpoint would miss it");
  for (const BufferDesc& b : prog.buffers)
    if (b.kind == schema::BufferKind::kOptimizerState && !stateBuffers.count(b.id))
      return Status::invalidArgument(prog.file + ": optimizer_state buffer '" + b.name +
                                     "' belongs to no param's optimizer op: a checkpoint would miss it");
  for (StateTensor& t : out) t.writes = writesSlice(m, m.params[size_t(t.param)], t, rank);
  return out;
}

std::string modelFingerprint(const Manifest& m) {
  std::vector<std::string> items;
  for (const ParamDesc& p : m.params) items.push_back(p.name + shapeStr(p.fileShape));
  std::sort(items.begin(), items.end());
  std::string all = m.architecture + "|" + std::to_string(m.vocabSize);
  for (const std::string& s : items) all += "|" + s;
  return hex16(fnv1a64(all.data(), all.size()));
}

// ---------------------------------------------------------------------------------------------------

struct CheckpointSaver::Impl {
  CheckpointRun run;
  std::optional<CrashPoint> crash;
  int64_t saves = 0;  // rank 0's commits so far
  struct Pending {
    int64_t step = -1;
    std::thread writer;
    Status status;
    double writeSeconds = 0, snapshotSeconds = 0;
  };
  std::map<int, Pending> pending;  // by rank: each entry touched only by its rank's thread
  std::mutex pendingMutex;         // guards the map's structure

  Pending& pendingOf(int rank) {
    std::lock_guard<std::mutex> lock(pendingMutex);
    return pending[rank];
  }
  std::string partialDir(int64_t step) const { return (fs::path(run.root) / (".partial-" + stepName(step))).string(); }

  void maybeCrash(const char* point) const {
    if (crash && crash->point == point && crash->save == saves + 1) {
      std::fflush(nullptr);
      std::raise(SIGKILL);
    }
  }

  StatusOr<Snapshot> snapshot(int rank, int64_t step, Interpreter& interp, const std::vector<StateTensor>& states) {
    const Manifest& m = *run.manifest;
    const Program& prog = interp.program();
    Snapshot snap;
    snap.step = step;
    for (const StateTensor& s : states) {
      const ParamDesc& p = m.params[size_t(s.param)];
      if (!s.writes) continue;
      const BufferDesc& b = prog.buffers[size_t(s.buffer)];
      Snapshot::Tensor t;
      t.name = stateTensorName(p, s.state);
      t.dtype = b.dtype == schema::ElemType::kBF16 ? DType::kBF16 : DType::kF32;
      t.shape = b.shape;
      t.bytes.resize(size_t(b.bytes));
      LLCDIST_RETURN_IF_ERROR(interp.readBuffer(s.buffer, t.bytes.data()).withContext("checkpoint: tensor '" + t.name + "'"));
      t.layout = layoutOf(m, p, s.block, rank);
      snap.tensors.push_back(std::move(t));
    }
    return snap;
  }

  // Step 1 of the protocol: the rank's shard and its files[] entry, in the partial directory.
  Status write(int rank, const Snapshot& snap) {
    const std::string dir = partialDir(snap.step);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir)) return Status::ioError("--checkpoint-dir: cannot create '" + dir + "': " + ec.message());
    if (snap.tensors.empty()) return Status::ok();  // this rank owns no slice (a replica of another's)
    json layout = json::object();
    std::vector<TensorToWrite> tensors;
    json sums = json::object(), dtypes = json::object();
    for (const Snapshot::Tensor& t : snap.tensors) {
      tensors.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
      layout[t.name] = {{"dim", t.layout.dim},       {"split_blocks", t.layout.splitBlocks},
                        {"member", t.layout.member}, {"members", t.layout.members},
                        {"block", t.layout.block},   {"blocks", t.layout.blocks}};
      sums[t.name] = hex16(xxh3(t.bytes.data(), t.bytes.size()));
      dtypes[t.name] = t.dtype == DType::kBF16 ? "bf16" : "f32";
    }
    const std::string file = rankFileName(rank, "safetensors");
    const std::string path = (fs::path(dir) / file).string();
    LLCDIST_RETURN_IF_ERROR(writeSafetensors(path, std::move(tensors),
                                             {{"format", "pt"},
                                              {"llcdist.step", std::to_string(snap.step)},
                                              {"llcdist.rank", std::to_string(rank)},
                                              {"llcdist.plan", run.base.planFingerprint},
                                              {"llcdist.layout", layout.dump()}})
                                .withContext("--checkpoint-dir"));
    if (rank == 0) maybeCrash("shard");
    LLCDIST_ASSIGN_OR_RETURN(uint64_t sum, xxh3File(path));
    json entry = {{"file", file},     {"rank", rank},        {"bytes", int64_t(fs::file_size(path, ec))},
                  {"checksum", hex16(sum)}, {"tensors", sums}, {"dtypes", dtypes}};
    return writeFileDurably((fs::path(dir) / rankFileName(rank, "json")).string(), entry.dump(1) + "\n")
        .withContext("--checkpoint-dir");
  }

  // Step 2: every rank's success, over all ranks.
  Status barrier(int rank, int64_t step, const Status& mine) {
    if (!run.comm) return mine;
    std::vector<int> all(size_t(run.world));
    for (int r = 0; r < run.world; ++r) all[size_t(r)] = r;
    const int64_t ok = mine.isOk() ? 1 : 0;
    std::vector<int64_t> oks(size_t(run.world), 0);
    const ScopedCallSite site(CommCallSite::driver("checkpoint: every rank's shard written"));
    LLCDIST_RETURN_IF_ERROR(run.comm->allGather(rank, all, &ok, oks.data(), 1, 1, CommDType::kF64)
                                .withContext("checkpoint step " + std::to_string(step) + ": the ranks' barrier"));
    if (!mine.isOk()) return mine;
    for (int r = 0; r < run.world; ++r)
      if (oks[size_t(r)] != 1)
        return Status::ioError("checkpoint step " + std::to_string(step) + ": rank " + std::to_string(r) +
                               " could not write its shard (its error is reported); nothing was committed");
    return Status::ok();
  }

  // Step 3 (rank 0).
  Status commit(int64_t step, std::string* committed) {
    const Manifest& m = *run.manifest;
    const std::string dir = partialDir(step);
    CheckpointManifest man = run.base;
    man.step = step;
    man.samplesConsumed = step * m.globalBatch;
    // The files[] entries the ranks wrote, and the dtypes of their tensors.
    std::map<std::string, std::string> dtypes;
    for (int r = 0; r < run.world; ++r) {
      const std::string side = (fs::path(dir) / rankFileName(r, "json")).string();
      std::error_code ec;
      if (!fs::exists(side, ec)) continue;  // a rank that owns no slice
      std::ifstream in(side);
      json e;
      try {
        e = json::parse(in);
        CheckpointFileDesc f;
        f.file = e.at("file").get<std::string>();
        f.rank = e.at("rank").get<int64_t>();
        f.bytes = e.at("bytes").get<int64_t>();
        f.checksum = e.at("checksum").get<std::string>();
        for (auto it = e.at("tensors").begin(); it != e.at("tensors").end(); ++it) f.tensors[it.key()] = it.value();
        for (auto it = e.at("dtypes").begin(); it != e.at("dtypes").end(); ++it) dtypes[it.key()] = it.value();
        man.files.push_back(std::move(f));
      } catch (const json::exception& ex) {
        return Status::dataLoss("checkpoint: '" + side + "': unreadable: " + ex.what());
      }
    }
    Status missing;
    forEachCheckpointTensor(m, [&](const ParamDesc& p, const std::string& state) {
      CheckpointTensorDesc t;
      t.name = stateTensorName(p, state);
      t.param = p.name;
      t.state = state;
      t.shape = p.shape;
      t.realShape = p.fileShape;
      auto it = dtypes.find(t.name);
      if (it == dtypes.end()) {
        if (missing.isOk())
          missing = Status::internal("checkpoint step " + std::to_string(step) + ": no rank wrote tensor '" + t.name + "'");
        return;
      }
      t.dtype = it->second;
      man.tensors.push_back(std::move(t));
    });
    LLCDIST_RETURN_IF_ERROR(missing);
    std::error_code ec;
    const fs::path config = fs::path(run.plan->dir) / kModelConfigFile;
    if (fs::exists(config, ec)) {
      LLCDIST_ASSIGN_OR_RETURN(std::string text, readFileText(config.string(), int64_t(1) << 24));
      LLCDIST_RETURN_IF_ERROR(writeFileDurably((fs::path(dir) / kModelConfigFile).string(), text));
      man.modelConfig = true;
    }
    LLCDIST_RETURN_IF_ERROR(
        writeFileDurably((fs::path(dir) / kCheckpointManifestFile).string(), checkpointManifestText(man)));
    LLCDIST_RETURN_IF_ERROR(fsyncPath(dir));
    maybeCrash("manifest");
    std::string name = stepName(step);
    for (int k = 1; fs::exists(fs::path(run.root) / name, ec); ++k) name = stepName(step) + "-" + std::to_string(k);
    const fs::path final = fs::path(run.root) / name;
    fs::rename(dir, final, ec);
    if (ec) return Status::ioError("checkpoint: cannot rename '" + dir + "' to '" + final.string() + "': " + ec.message());
    LLCDIST_RETURN_IF_ERROR(fsyncPath(run.root));
    maybeCrash("rename");
    LLCDIST_RETURN_IF_ERROR(
        writeFileDurably((fs::path(run.root) / kCheckpointLatestFile).string(), name + "\n"));
    maybeCrash("latest");
    *committed = final.string();
    // --keep-last: the oldest committed checkpoints beyond K, never the one just committed.
    if (run.keepLast > 0) {
      std::vector<std::string> all = listCheckpoints(run.root);
      all.erase(std::remove(all.begin(), all.end(), final.string()), all.end());
      const int64_t extra = int64_t(all.size()) + 1 - run.keepLast;
      for (int64_t i = 0; i < extra && i < int64_t(all.size()); ++i) {
        const fs::path old = all[size_t(i)];
        const fs::path gone = old.parent_path() / (".deleting-" + old.filename().string());
        fs::rename(old, gone, ec);
        if (ec) continue;  // a vanished directory is fine
        maybeCrash("prune");
        fs::remove_all(gone, ec);
      }
    }
    ++saves;
    return Status::ok();
  }

  void say(const std::string& line) {
    if (!run.progress || !run.progressMutex) return;
    std::lock_guard<std::mutex> lock(*run.progressMutex);
    *run.progress << line << '\n' << std::flush;
  }

  // Steps 2 and 3 for a written (or failed) save of `step`.
  // stall: the training time lost at the step boundary (sync: snapshot + write + commit; async: the
  // snapshot, plus `waited` for this write to end at the next save or after the last step).
  Status complete(int rank, int64_t step, const Status& written, double snapshotSeconds, double writeSeconds,
                  double waited) {
    LLCDIST_RETURN_IF_ERROR(barrier(rank, step, written));
    if (rank != 0) return Status::ok();
    const auto t0 = std::chrono::steady_clock::now();
    std::string committed;
    LLCDIST_RETURN_IF_ERROR(commit(step, &committed));
    const double commitSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double stall = run.async ? snapshotSeconds + waited + commitSeconds
                                   : snapshotSeconds + writeSeconds + commitSeconds;
    char buf[640];
    if (run.async)
      std::snprintf(buf, sizeof buf,
                    "checkpoint: step %lld saved to %s (async: training stalled %.1f ms: snapshot %.1f ms, "
                    "waiting for the write %.1f ms, commit %.1f ms; written in the background in %.1f ms)",
                    static_cast<long long>(step), committed.c_str(), stall * 1e3, snapshotSeconds * 1e3,
                    waited * 1e3, commitSeconds * 1e3, writeSeconds * 1e3);
    else
      std::snprintf(buf, sizeof buf,
                    "checkpoint: step %lld saved to %s (training stalled %.1f ms: snapshot %.1f ms, write %.1f ms, "
                    "commit %.1f ms)",
                    static_cast<long long>(step), committed.c_str(), stall * 1e3, snapshotSeconds * 1e3,
                    writeSeconds * 1e3, commitSeconds * 1e3);
    say(buf);
    if (run.log) {
      json rec = {{"checkpoint",
                   {{"step", step}, {"dir", committed}, {"async", run.async}, {"stall_s", stall},
                    {"snapshot_s", snapshotSeconds}, {"wait_s", waited}, {"write_s", writeSeconds},
                    {"commit_s", commitSeconds}}}};
      std::lock_guard<std::mutex> lock(*run.progressMutex);
      *run.log << rec.dump() << '\n' << std::flush;
    }
    return Status::ok();
  }

  // The rank's background write, if any: joined and completed.
  Status drain(int rank) {
    Pending& p = pendingOf(rank);
    if (p.step < 0) return Status::ok();
    const auto t0 = std::chrono::steady_clock::now();
    if (p.writer.joinable()) p.writer.join();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t step = p.step;
    p.step = -1;
    return complete(rank, step, p.status, p.snapshotSeconds, p.writeSeconds, waited);
  }
};

CheckpointSaver::CheckpointSaver(CheckpointRun run) : impl_(std::make_unique<Impl>()) {
  impl_->run = std::move(run);
  impl_->crash = crashPointFromEnvironment();
}

CheckpointSaver::~CheckpointSaver() {
  for (auto& [rank, p] : impl_->pending)
    if (p.writer.joinable()) p.writer.join();
}

Status CheckpointSaver::prepare() {
  const std::string& root = impl_->run.root;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (!fs::is_directory(root))
    return Status::ioError("--checkpoint-dir '" + root + "': cannot create it" + (ec ? ": " + ec.message() : ""));
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(".partial-", 0) == 0 || n.rfind(".deleting-", 0) == 0 || n.rfind("latest.tmp", 0) == 0) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
  const std::string probe = (fs::path(root) / ".probe").string();
  {
    std::ofstream f(probe, std::ios::trunc);
    if (!f) return Status::ioError("--checkpoint-dir '" + root + "': cannot write there");
  }
  fs::remove(probe, ec);
  return Status::ok();
}

Status CheckpointSaver::save(int rank, int64_t step, Interpreter& interp, const std::vector<StateTensor>& states) {
  Impl& s = *impl_;
  if (!s.run.async) {
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<Snapshot> snap = s.snapshot(rank, step, interp, states);
    const auto t1 = std::chrono::steady_clock::now();
    Status written = snap.isOk() ? s.write(rank, snap.value()) : snap.status();
    const auto t2 = std::chrono::steady_clock::now();
    return s.complete(rank, step, written, std::chrono::duration<double>(t1 - t0).count(),
                      std::chrono::duration<double>(t2 - t1).count(), 0.0);
  }
  LLCDIST_RETURN_IF_ERROR(s.drain(rank));  // the previous save: its write finished, then committed
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<Snapshot> snap = s.snapshot(rank, step, interp, states);
  Impl::Pending& p = s.pendingOf(rank);
  p.step = step;
  p.snapshotSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!snap.isOk()) {
    p.status = snap.status();
    return Status::ok();  // reported at the barrier, where every rank learns of it
  }
  p.writer = std::thread([&s, &p, rank, snapshot = std::move(snap).value()] {
    const auto w0 = std::chrono::steady_clock::now();
    p.status = s.write(rank, snapshot);
    p.writeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  });
  return Status::ok();
}

Status CheckpointSaver::finish(int rank) { return impl_->drain(rank); }
void CheckpointSaver::setLog(std::ostream* log) { impl_->run.log = log; }

// ---------------------------------------------------------------------------------------------------

Status checkResumable(const CheckpointReader& c, const Manifest& m, const CheckpointManifest& run, int64_t totalSteps) {
  const CheckpointManifest& k = c.manifest();
  auto fail = [&](const std::string& msg) {
    return Status::invalidArgument("--resume " + c.dir() + ": " + msg);
  };
  if (k.modelFingerprint != run.modelFingerprint)
    return fail("the checkpoint is of model '" + k.modelName + "' (" + k.architecture + ", fingerprint " +
                k.modelFingerprint + "), the plan trains '" + run.modelName + "' (" + run.architecture +
                ", fingerprint " + run.modelFingerprint + "): resume with a plan compiled from the same model");
  if (k.optimizer != run.optimizer)
    return fail("the checkpoint holds " + k.optimizer + " state, the plan's optimizer is " + run.optimizer +
                ": compile the plan with --optimizer " + k.optimizer);
  if (k.globalBatch != run.globalBatch || k.seqLen != run.seqLen)
    return fail("the checkpoint's run read " + std::to_string(k.globalBatch) + " samples of " +
                std::to_string(k.seqLen) + " tokens per step, the plan reads " + std::to_string(run.globalBatch) +
                " of " + std::to_string(run.seqLen) + ": compile it with --global-batch " +
                std::to_string(k.globalBatch) + " --seq-len " + std::to_string(k.seqLen) +
                " (the data position is a global sample count)");
  if (k.data != run.data) return fail("the checkpoint's run read --data " + k.data + ", this one " + run.data + ": pass --data " + k.data);
  if (k.shuffle != run.shuffle)
    return fail(std::string("the checkpoint's run had --shuffle ") + (k.shuffle ? "on" : "off") + ": pass it again");
  if (k.seed != run.seed)
    return fail("the checkpoint's run had --seed " + std::to_string(k.seed) + " (the data order and the synthetic "
                "tokens follow it), this one " + std::to_string(run.seed) + ": pass --seed " + std::to_string(k.seed));
  if (totalSteps < k.step)
    return fail("the checkpoint is at step " + std::to_string(k.step) + ", past --steps " + std::to_string(totalSteps) +
                " (--steps is the run's total, the resumed run continues to it)");
  if (k.lrSchedule != run.lrSchedule || (run.lrSchedule == "cosine" && k.lrTotalSteps != run.lrTotalSteps))
    return fail("the checkpoint's LR schedule was " + k.lrSchedule + " over " + std::to_string(k.lrTotalSteps) +
                " steps, this run's is " + run.lrSchedule + " over " + std::to_string(run.lrTotalSteps) +
                (m.lrSchedule.totalSteps == 0 ? ": pass --steps " + std::to_string(k.lrTotalSteps)
                                              : ": compile the plan with the same schedule"));
  std::set<std::string> want, have;
  forEachCheckpointTensor(m, [&](const ParamDesc& p, const std::string& s) { want.insert(stateTensorName(p, s)); });
  for (const CheckpointTensorDesc& t : k.tensors) have.insert(t.name);
  for (const std::string& n : want)
    if (!have.count(n)) return fail("the checkpoint has no tensor '" + n + "' (the plan's optimizer settings differ?)");
  for (const std::string& n : have)
    if (!want.count(n)) return fail("the checkpoint's tensor '" + n + "' has no place in the plan (its optimizer "
                                    "settings differ?)");
  return Status::ok();
}

Status loadRankState(const CheckpointReader& c, const Manifest& m, const std::vector<StateTensor>& states,
                     Interpreter& interp) {
  const Program& prog = interp.program();
  for (const StateTensor& s : states) {
    const ParamDesc& p = m.params[size_t(s.param)];
    const std::string name = stateTensorName(p, s.state);
    const CheckpointTensorDesc* d = c.find(name);
    if (!d) return Status::notFound("--resume " + c.dir() + ": no tensor '" + name + "'");
    // The same global tensor, or a vocabulary padded differently (the same real rows): the rows both
    // have are copied, the rest of the target stays zero.
    int64_t limit = p.numel();
    if (d->shape != p.shape) {
      if (!p.vocabPadded || d->realShape != p.fileShape)
        return Status::invalidArgument("--resume " + c.dir() + ": tensor '" + name + "' is " + shapeStr(d->shape) +
                                       " in the checkpoint, " + shapeStr(p.shape) + " in the plan");
      int64_t n = 1;
      for (int64_t x : d->shape) n *= x;
      limit = std::min(limit, n);
    }
    LLCDIST_ASSIGN_OR_RETURN(std::vector<float> global, c.readGlobal(name));
    std::vector<float> held(size_t(prog.buffers[size_t(s.buffer)].numel()), 0.0f);
    forEachLayoutRun(p.shape, layoutOf(m, p, s.block, interp.rank()), [&](int64_t l, int64_t g, int64_t count) {
      const int64_t n = std::clamp<int64_t>(limit - g, 0, count);
      std::copy(global.begin() + g, global.begin() + g + n, held.begin() + l);
    });
    LLCDIST_RETURN_IF_ERROR(interp.writeF32(s.buffer, held.data()).withContext("--resume: tensor '" + name + "'"));
  }
  return Status::ok();
}

}  // namespace llcdist::rt::train
