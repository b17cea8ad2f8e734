// Checkpoint manifests, the verifying reader that assembles global tensors from shards, `export --info`
// and the Hugging Face export. See Checkpoint.h; the training side (save, commit, resume) is
// TrainCheckpoint.cpp.
#include "llcdist/runtime/Checkpoint.h"

#include "../PlanJson.h"
#include "TrainParts.h"

#include "llcdist/runtime/FileUtil.h"
#include "llcdist/runtime/Safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace llcdist::rt {
namespace fs = std::filesystem;
using planjson::json;
using train::shapeStr;

namespace {

int64_t numelOf(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

std::vector<std::string> listCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0 || !it->is_directory(ec)) continue;
    StatusOr<std::string> text = readFileText((it->path() / kCheckpointManifestFile).string(), int64_t(1) << 30);
    if (!text.isOk()) continue;
    StatusOr<CheckpointManifest> m = parseCheckpointManifest(text.value(), name);
    if (m.isOk()) found.emplace_back(m.value().step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, dir] : found) out.push_back(std::move(dir));
  return out;
}

StatusOr<std::string> resolveCheckpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return Status::notFound("checkpoint '" + path + "': no such directory (a --checkpoint-dir root or one of its "
                            "step-N directories)");
  if (fs::exists(fs::path(path) / kCheckpointManifestFile, ec)) return path;
  const fs::path latest = fs::path(path) / kCheckpointLatestFile;
  if (!fs::exists(latest, ec)) {
    const std::vector<std::string> all = listCheckpoints(path);
    return Status::notFound("checkpoint '" + path + "': neither a checkpoint (no " + kCheckpointManifestFile +
                            ") nor a checkpoint root (no " + kCheckpointLatestFile + ")" +
                            (all.empty() ? std::string() : "; it holds " + all.back() + ": --resume " + all.back()));
  }
  // `latest` is the commit point; should it be unreadable or name no complete checkpoint (a damaged
  // root), the newest complete one is taken instead.
  StatusOr<std::string> name = readFileText(latest.string(), 4096);
  if (name.isOk()) {
    std::string n = name.value();
    while (!n.empty() && (n.back() == '\n' || n.back() == '\r')) n.pop_back();
    const fs::path dir = fs::path(path) / n;
    if (isPlainFileName(n) && n.rfind("step-", 0) == 0 && fs::exists(dir / kCheckpointManifestFile, ec))
      return dir.string();
  }
  const std::vector<std::string> all = listCheckpoints(path);
  if (all.empty())
    return Status::dataLoss("checkpoint root '" + path + "': '" + latest.string() +
                            "' names no complete checkpoint, and there is none in the root");
  return all.back();
}

// ---------------------------------------------------------------------------------------------------
// The reader.

struct CheckpointReader::Impl {
  std::string dir, root;
  CheckpointManifest manifest;
  std::map<std::string, size_t> tensorIndex;
  // Per file: its reader and the layout of each tensor it holds.
  struct Shard {
    SafetensorsReader reader;
    std::map<std::string, train::ShardLayout> layouts;
  };
  std::vector<Shard> shards;
  // tensor name -> the shards holding a slice of it
  std::map<std::string, std::vector<size_t>> holders;

  std::string fallback() const {
    const std::vector<std::string> all = listCheckpoints(root);
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (fs::path(*it).lexically_normal() != fs::path(dir).lexically_normal())
        return "; the newest other checkpoint is " + *it + " (--resume " + *it + ")";
    return "";
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;
const std::string& CheckpointReader::dir() const { return impl_->dir; }
const CheckpointManifest& CheckpointReader::manifest() const { return impl_->manifest; }
std::string CheckpointReader::fallbackHint() const { return impl_->fallback(); }
const CheckpointTensorDesc* CheckpointReader::find(const std::string& name) const {
  auto it = impl_->tensorIndex.find(name);
  return it == impl_->tensorIndex.end() ? nullptr : &impl_->manifest.tensors[it->second];
}

StatusOr<CheckpointReader> CheckpointReader::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  LLCDIST_ASSIGN_OR_RETURN(impl->dir, resolveCheckpoint(path));
  impl->root = fs::path(impl->dir).parent_path().string();
  if (impl->root.empty()) impl->root = ".";
  auto fail = [&](Status s) -> Status {
    return Status(s.code(), "checkpoint " + impl->dir + ": " + s.message() + impl->fallback());
  };
  const std::string manifestPath = (fs::path(impl->dir) / kCheckpointManifestFile).string();
  StatusOr<std::string> text = readFileText(manifestPath, int64_t(1) << 30);
  if (!text.isOk()) return fail(text.status());
  StatusOr<CheckpointManifest> parsed = parseCheckpointManifest(text.value(), kCheckpointManifestFile);
  if (!parsed.isOk()) return fail(parsed.status());
  impl->manifest = std::move(parsed).value();
  const CheckpointManifest& m = impl->manifest;
  for (size_t i = 0; i < m.tensors.size(); ++i) impl->tensorIndex[m.tensors[i].name] = i;
  for (const CheckpointFileDesc& f : m.files) {
    const std::string fp = (fs::path(impl->dir) / f.file).string();
    auto fileFail = [&](const std::string& msg) { return fail(Status::dataLoss(f.file + ": " + msg)); };
    std::error_code ec;
    const auto size = fs::file_size(fp, ec);
    if (ec) return fileFail("missing (rank " + std::to_string(f.rank) + "'s shard, listed in checkpoint.json)");
    if (int64_t(size) != f.bytes)
      return fileFail("truncated or overwritten: " + std::to_string(size) + " bytes, checkpoint.json says " +
                      std::to_string(f.bytes));
    StatusOr<SafetensorsReader> reader = SafetensorsReader::open(fp);
    if (!reader.isOk()) return fileFail(reader.status().message());
    const SafetensorsReader& r = reader.value();
    const auto& meta = r.metadata();
    auto metaOf = [&](const char* k) { auto it = meta.find(k); return it == meta.end() ? std::string() : it->second; };
    if (metaOf("llcdist.step") != std::to_string(m.step))
      return fileFail("holds step " + (metaOf("llcdist.step").empty() ? std::string("(none)") : metaOf("llcdist.step")) +
                      " but checkpoint.json is step " + std::to_string(m.step) + " (files of two saves mixed)");
    if (metaOf("llcdist.plan") != m.planFingerprint)
      return fileFail("was written by plan " + metaOf("llcdist.plan") + ", checkpoint.json by plan " + m.planFingerprint);
    LLCDIST_ASSIGN_OR_RETURN(uint64_t sum, xxh3File(fp));
    if (hex16(sum) != f.checksum) {
      // Name the damaged tensor(s) by their own checksums.
      std::string damaged;
      int64_t numDamaged = 0;
      for (const TensorInfo& t : r.tensors()) {
        std::vector<char> bytes(size_t(t.byteSize()));
        if (!r.readBytes(t, 0, t.byteSize(), bytes.data()).isOk()) continue;
        auto want = f.tensors.find(t.name);
        if (want != f.tensors.end() && hex16(xxh3(bytes.data(), bytes.size())) != want->second &&
            numDamaged++ < 3)
          damaged += (damaged.empty() ? "" : ", ") + ("'" + t.name + "'");
      }
      if (numDamaged > 3) damaged += " and " + std::to_string(numDamaged - 3) + " more";
      return fileFail("corrupted: its checksum is " + hex16(sum) + ", checkpoint.json says " + f.checksum +
                      (damaged.empty() ? std::string(" (the header or padding differs)") : " (tensor " + damaged + ")"));
    }
    // The layouts: every tensor of the file is listed in checkpoint.json with a layout here.
    json layouts;
    try {
      layouts = json::parse(metaOf("llcdist.layout"));
    } catch (const json::exception&) {
      return fileFail("__metadata__ \"llcdist.layout\" is not JSON");
    }
    if (!layouts.is_object()) return fileFail("__metadata__ \"llcdist.layout\" is not an object");
    Impl::Shard shard{std::move(reader).value(), {}};
    for (const TensorInfo& t : shard.reader.tensors()) {
      const CheckpointTensorDesc* desc = nullptr;
      if (auto it = impl->tensorIndex.find(t.name); it != impl->tensorIndex.end()) desc = &m.tensors[it->second];
      if (!desc) return fileFail("tensor '" + t.name + "' is not listed in checkpoint.json");
      if (!f.tensors.count(t.name)) return fileFail("tensor '" + t.name + "' is not listed in its files[] entry");
      if (t.dtype != (desc->dtype == "bf16" ? DType::kBF16 : DType::kF32))
        return fileFail("tensor '" + t.name + "' is " + std::string(dtypeName(t.dtype)) + ", checkpoint.json says " +
                        desc->dtype);
      if (!layouts.contains(t.name)) return fileFail("tensor '" + t.name + "' has no layout in __metadata__");
      const json& l = layouts.at(t.name);
      train::ShardLayout sl;
      const char* fields[] = {"dim", "split_blocks", "member", "members", "block", "blocks"};
      int64_t* dst[] = {&sl.dim, &sl.splitBlocks, &sl.member, &sl.members, &sl.block, &sl.blocks};
      for (size_t k = 0; k < 6; ++k) {
        if (!l.is_object() || !l.contains(fields[k]) || !planjson::integerIn(l.at(fields[k]), 0, kMaxCheckpointTensorElements, dst[k]))
          return fileFail("tensor '" + t.name + "': layout field '" + fields[k] + "' is missing or out of range");
      }
      Status valid = train::checkLayout(desc->shape, sl, t.numel());
      if (!valid.isOk()) return fileFail("tensor '" + t.name + "': " + valid.message());
      shard.layouts[t.name] = sl;
      impl->holders[t.name].push_back(impl->shards.size());
    }
    for (const auto& [name, sum] : f.tensors)
      if (!shard.reader.find(name)) return fileFail("tensor '" + name + "' is listed but not in the file");
    impl->shards.push_back(std::move(shard));
  }
  for (const CheckpointTensorDesc& t : m.tensors)
    if (!impl->holders.count(t.name))
      return fail(Status::dataLoss("tensor '" + t.name + "' is in no shard file (a missing rank file?)"));
  return CheckpointReader(std::move(impl));
}

StatusOr<std::vector<float>> CheckpointReader::readGlobal(const std::string& name) const {
  const CheckpointTensorDesc* desc = find(name);
  if (!desc) return Status::notFound("checkpoint " + impl_->dir + ": no tensor '" + name + "'");
  const int64_t n = numelOf(desc->shape), real = numelOf(desc->realShape);
  // Every element of the global tensor (padding rows included) is in some shard of a whole
  // checkpoint: fewer held elements than that is a damaged one, refused before allocating for it.
  int64_t held = 0;
  for (size_t s : impl_->holders.at(name)) held += impl_->shards[s].reader.find(name)->numel();
  if (held < n)
    return Status::dataLoss("checkpoint " + impl_->dir + ": tensor '" + name + "' of shape " + shapeStr(desc->shape) +
                            " (" + std::to_string(n) + " elements): its shard files hold only " +
                            std::to_string(held) + " (a missing rank file?)" + impl_->fallback());
  std::vector<float> global(size_t(n), 0.0f);
  std::vector<bool> covered(size_t(real), false);
  int64_t coveredCount = 0;
  for (size_t s : impl_->holders.at(name)) {
    const Impl::Shard& shard = impl_->shards[s];
    LLCDIST_ASSIGN_OR_RETURN(std::vector<float> held, shard.reader.readF32(name));
    train::forEachLayoutRun(desc->shape, shard.layouts.at(name), [&](int64_t l, int64_t g, int64_t count) {
      std::memcpy(global.data() + g, held.data() + l, size_t(count) * 4);
      for (int64_t i = g; i < std::min(g + count, real); ++i)
        if (!covered[size_t(i)]) {
          covered[size_t(i)] = true;
          ++coveredCount;
        }
    });
  }
  if (coveredCount != real) {
    const int64_t first = int64_t(std::find(covered.begin(), covered.end(), false) - covered.begin());
    return Status::dataLoss("checkpoint " + impl_->dir + ": tensor '" + name + "': element " + std::to_string(first) +
                            " (and " + std::to_string(real - coveredCount - 1) +
                            " more) is in no shard file (a missing rank file?)" + impl_->fallback());
  }
  return global;
}

std::string describeCheckpoint(const CheckpointReader& c, bool asJson) {
  const CheckpointManifest& m = c.manifest();
  int64_t bytes = 0, values = 0, params = 0;
  for (const CheckpointFileDesc& f : m.files) bytes += f.bytes;
  for (const CheckpointTensorDesc& t : m.tensors) {
    if (t.state != "param") continue;
    ++params;
    values += numelOf(t.realShape);
  }
  if (asJson) {
    json j = json::parse(checkpointManifestText(m));
    j["dir"] = c.dir();
    j["total_bytes"] = bytes;
    j["parameters"] = values;
    return j.dump(2) + "\n";
  }
  std::ostringstream o;
  o << "checkpoint " << c.dir() << "\n"
    << "  step " << m.step << " (" << m.samplesConsumed << " samples of " << m.globalBatch << " per step, seq_len "
    << m.seqLen << ")\n"
    << "  model " << m.modelName << " (" << m.architecture << ", vocabulary " << m.vocabSize << ", fingerprint "
    << m.modelFingerprint << "): " << params << " parameter tensors, " << values << " parameters\n"
    << "  saved by mesh dp=" << m.meshDp << " tp=" << m.meshTp << " pp=" << m.meshPp
    << (m.meshCp > 1 ? " cp=" + std::to_string(m.meshCp) : std::string()) << " (plan " << m.planFingerprint
    << "), optimizer " << m.optimizer << ", lr schedule " << m.lrSchedule << " over " << m.lrTotalSteps << " steps\n"
    << "  data " << m.data << " (seed " << m.seed << ", shuffle " << (m.shuffle ? "on" : "off") << ")\n"
    << "  " << m.tensors.size() << " tensors in " << m.files.size() << " files, " << bytes << " bytes"
    << (m.modelConfig ? "; model-config.json present" : "; no model-config.json (export needs --config)") << "\n";
  for (const CheckpointFileDesc& f : m.files)
    o << "    " << f.file << ": rank " << f.rank << ", " << f.tensors.size() << " tensors, " << f.bytes << " bytes\n";
  return o.str();
}

Status exportHuggingFace(const CheckpointReader& c, const HfExportOptions& opts, std::ostream& log) {
  const CheckpointManifest& m = c.manifest();
  std::string config;
  if (!opts.configPath.empty()) {
    LLCDIST_ASSIGN_OR_RETURN(config, readFileText(opts.configPath, int64_t(1) << 24));
  } else if (m.modelConfig) {
    LLCDIST_ASSIGN_OR_RETURN(config, readFileText((fs::path(c.dir()) / kModelConfigFile).string(), int64_t(1) << 24));
  } else {
    return Status::invalidArgument("checkpoint " + c.dir() + " has no " + kModelConfigFile +
                                   " (its plan was compiled from IR, or by an older llc-dist): give the model's "
                                   "Hugging Face config with --config config.json");
  }
  if (opts.maxShardBytes < 1) return Status::invalidArgument("--max-shard-size must be > 0");
  // Every parameter assembled first (any error before a file is written), then written in shards.
  struct Out {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::vector<Out> params;
  for (const CheckpointTensorDesc& t : m.tensors) {
    if (t.state != "param") continue;
    LLCDIST_ASSIGN_OR_RETURN(std::vector<float> v, c.readGlobal(t.name));
    v.resize(size_t(numelOf(t.realShape)));  // the Hugging Face tensor: real rows only
    for (const train::FileTensor& f : train::fileTensorsOf(t.param, t.realShape))  // stacked experts: one each
      params.push_back({f.name, f.shape, std::vector<float>(v.begin() + f.offset, v.begin() + f.offset + f.numel)});
  }
  std::sort(params.begin(), params.end(), [](const Out& a, const Out& b) { return a.name < b.name; });
  std::vector<std::vector<size_t>> shards(1);
  int64_t inShard = 0, total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t b = int64_t(params[i].values.size()) * 4;
    if (inShard > 0 && inShard + b > opts.maxShardBytes) {
      shards.emplace_back();
      inShard = 0;
    }
    shards.back().push_back(i);
    inShard += b;
    total += b;
  }
  std::error_code ec;
  fs::create_directories(opts.outDir, ec);
  if (ec) return Status::ioError("--hf '" + opts.outDir + "': cannot create it: " + ec.message());
  // Stale outputs of an earlier export would confuse from_pretrained (a single file beside an index).
  for (fs::directory_iterator it(opts.outDir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n == "model.safetensors" || n == "model.safetensors.index.json" ||
        (n.rfind("model-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))
      fs::remove(it->path(), ec);
  }
  LLCDIST_RETURN_IF_ERROR(writeFileDurably((fs::path(opts.outDir) / "config.json").string(), config));
  json weightMap = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<TensorToWrite> tensors;
    for (size_t i : shards[s]) {
      tensors.push_back({params[i].name, DType::kF32, params[i].shape, params[i].values.data()});
      weightMap[params[i].name] = name;
    }
    LLCDIST_RETURN_IF_ERROR(
        writeSafetensors((fs::path(opts.outDir) / name).string(), std::move(tensors), {{"format", "pt"}}));
  }
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}};
    LLCDIST_RETURN_IF_ERROR(
        writeFileDurably((fs::path(opts.outDir) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));
  }
  log << "exported " << params.size() << " tensors (" << total << " bytes, step " << m.step << ") to " << opts.outDir
      << (shards.size() > 1 ? " in " + std::to_string(shards.size()) + " shards with model.safetensors.index.json"
                            : std::string(" as model.safetensors"))
      << " + config.json\n";
  return Status::ok();
}

}  // namespace llcdist::rt
