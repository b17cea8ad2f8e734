// checkpoint.json: the strict parser and the printer of a checkpoint's manifest (Checkpoint.h). In
// the runtime's core (no kernels, no interpreter): the fuzz target links it alone.
#include "llcdist/runtime/Checkpoint.h"

#include "PlanJson.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace llcdist::rt {
using planjson::json;

namespace {

std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Status readShape(const planjson::Doc& doc, const json& o, const std::string& path, const char* k,
                 std::vector<int64_t>* out) {
  LLCDIST_RETURN_IF_ERROR(doc.intArray(o, path, k, out, 0, kMaxCheckpointTensorElements));
  if (out->size() > 8) return doc.error(planjson::key(path, k), "more than 8 dimensions");
  int64_t n = 1;
  for (int64_t d : *out) {
    if (d != 0 && n > kMaxCheckpointTensorElements / d)
      return doc.error(planjson::key(path, k), "the shape's element count overflows (more than 2^40 elements)");
    n *= d;
  }
  return Status::ok();
}

}  // namespace

bool isPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

StatusOr<CheckpointManifest> parseCheckpointManifest(const std::string& text, const std::string& file) {
  planjson::Doc doc(file);
  json root;
  LLCDIST_RETURN_IF_ERROR(doc.parse(text, &root));
  CheckpointManifest m;
  LLCDIST_RETURN_IF_ERROR(doc.keys(root, "",
                                   {"format", "version", "step", "samples_consumed", "global_batch", "seq_len",
                                    "lr_schedule", "data", "model", "mesh", "plan_fingerprint", "optimizer",
                                    "tensors", "files"},
                                   {"model_config"}));
  std::string format;
  LLCDIST_RETURN_IF_ERROR(doc.string(root, "", "format", &format));
  if (format != "llc-dist-checkpoint")
    return doc.error("format", "expected \"llc-dist-checkpoint\", got \"" + format + "\" (not an llc-dist checkpoint)");
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "version", &m.version, 1, INT64_MAX));
  if (m.version != kCheckpointFormatVersion)
    return doc.error("version", "version " + std::to_string(m.version) + " is not supported (this llc-dist reads " +
                                    std::to_string(kCheckpointFormatVersion) + ")");
  constexpr int64_t kMaxCount = int64_t(1) << 50;
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "step", &m.step, 0, kMaxCount));
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "samples_consumed", &m.samplesConsumed, 0, INT64_MAX));
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "global_batch", &m.globalBatch, 1, kMaxCount));
  LLCDIST_RETURN_IF_ERROR(doc.integer(root, "", "seq_len", &m.seqLen, 1, kMaxCount));
  if (m.globalBatch > 0 && m.step > INT64_MAX / m.globalBatch)
    return doc.error("samples_consumed", "step × global_batch overflows");
  if (m.samplesConsumed != m.step * m.globalBatch)
    return doc.error("samples_consumed", std::to_string(m.samplesConsumed) + " is not step × global_batch = " +
                                             std::to_string(m.step * m.globalBatch));
  const json& lr = root.at("lr_schedule");
  LLCDIST_RETURN_IF_ERROR(doc.keys(lr, "lr_schedule", {"kind", "total_steps"}));
  LLCDIST_RETURN_IF_ERROR(doc.string(lr, "lr_schedule", "kind", &m.lrSchedule));
  if (m.lrSchedule != "constant" && m.lrSchedule != "cosine")
    return doc.error("lr_schedule.kind", "expected \"constant\" or \"cosine\", got \"" + m.lrSchedule + "\"");
  LLCDIST_RETURN_IF_ERROR(doc.integer(lr, "lr_schedule", "total_steps", &m.lrTotalSteps, 0, kMaxCount));
  const json& data = root.at("data");
  LLCDIST_RETURN_IF_ERROR(doc.keys(data, "data", {"source", "shuffle", "seed"}));
  LLCDIST_RETURN_IF_ERROR(doc.string(data, "data", "source", &m.data));
  if (m.data.empty() || m.data.find('\0') != std::string::npos)
    return doc.error("data.source", "expected \"synthetic\" or a token file's path");
  LLCDIST_RETURN_IF_ERROR(doc.boolean(data, "data", "shuffle", &m.shuffle));
  std::string seed;
  LLCDIST_RETURN_IF_ERROR(doc.string(data, "data", "seed", &seed));  // a string: all 64 bits survive JSON
  {
    size_t used = 0;
    bool ok = !seed.empty() && seed.size() <= 20 && std::all_of(seed.begin(), seed.end(), ::isdigit);
    if (ok) {
      try {
        m.seed = std::stoull(seed, &used);
      } catch (...) {
        ok = false;
      }
    }
    if (!ok || used != seed.size()) return doc.error("data.seed", "expected a decimal 64-bit unsigned integer string");
  }
  const json& model = root.at("model");
  LLCDIST_RETURN_IF_ERROR(doc.keys(model, "model", {"name", "architecture", "vocab_size", "fingerprint"}));
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "name", &m.modelName));
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "architecture", &m.architecture));
  LLCDIST_RETURN_IF_ERROR(doc.integer(model, "model", "vocab_size", &m.vocabSize, 1, int64_t(1) << 31));
  LLCDIST_RETURN_IF_ERROR(doc.string(model, "model", "fingerprint", &m.modelFingerprint));
  const json& mesh = root.at("mesh");
  LLCDIST_RETURN_IF_ERROR(doc.keys(mesh, "mesh", {"dp", "tp", "pp"}, {"cp"}));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "dp", &m.meshDp, 1, kMaxCheckpointRanks));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "tp", &m.meshTp, 1, kMaxCheckpointRanks));
  LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "pp", &m.meshPp, 1, kMaxCheckpointRanks));
  if (mesh.contains("cp")) LLCDIST_RETURN_IF_ERROR(doc.integer(mesh, "mesh", "cp", &m.meshCp, 1, kMaxCheckpointRanks));
  if (m.meshDp * m.meshTp > kMaxCheckpointRanks / m.meshPp ||
      m.meshDp * m.meshTp * m.meshPp > kMaxCheckpointRanks / m.meshCp)
    return doc.error("mesh", "more than 2^20 ranks");
  const int64_t world = m.meshDp * m.meshTp * m.meshPp * m.meshCp;
  LLCDIST_RETURN_IF_ERROR(doc.string(root, "", "plan_fingerprint", &m.planFingerprint));
  LLCDIST_RETURN_IF_ERROR(doc.string(root, "", "optimizer", &m.optimizer));
  if (m.optimizer != "adamw" && m.optimizer != "sgd")
    return doc.error("optimizer", "expected \"adamw\" or \"sgd\", got \"" + m.optimizer + "\"");
  if (root.contains("model_config")) LLCDIST_RETURN_IF_ERROR(doc.boolean(root, "", "model_config", &m.modelConfig));

  const json& tensors = root.at("tensors");
  LLCDIST_RETURN_IF_ERROR(doc.array(tensors, "tensors"));
  std::set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = planjson::index("tensors", i);
    const json& t = tensors[i];
    LLCDIST_RETURN_IF_ERROR(doc.keys(t, path, {"name", "param", "state", "shape", "real_shape", "dtype"}));
    CheckpointTensorDesc d;
    LLCDIST_RETURN_IF_ERROR(doc.string(t, path, "name", &d.name));
    LLCDIST_RETURN_IF_ERROR(doc.string(t, path, "param", &d.param));
    LLCDIST_RETURN_IF_ERROR(doc.string(t, path, "state", &d.state));
    if (d.state != "param" && d.state != "exp_avg" && d.state != "exp_avg_sq" && d.state != "momentum_buffer")
      return doc.error(path + ".state", "expected param, exp_avg, exp_avg_sq or momentum_buffer, got \"" + d.state + "\"");
    if (d.name != (d.state == "param" ? d.param : d.param + "." + d.state))
      return doc.error(path + ".name", "\"" + d.name + "\" is not the param's name (+ \".\" + state)");
    if (!names.insert(d.name).second) return doc.error(path + ".name", "\"" + d.name + "\" is listed twice");
    LLCDIST_RETURN_IF_ERROR(readShape(doc, t, path, "shape", &d.shape));
    LLCDIST_RETURN_IF_ERROR(readShape(doc, t, path, "real_shape", &d.realShape));
    if (d.realShape.size() != d.shape.size() || (d.shape.size() > 0 && (d.realShape[0] > d.shape[0] ||
                                                 !std::equal(d.shape.begin() + 1, d.shape.end(), d.realShape.begin() + 1))))
      return doc.error(path + ".real_shape", shapeStr(d.realShape) + " is not " + shapeStr(d.shape) +
                                                 " with fewer (or as many) rows");
    LLCDIST_RETURN_IF_ERROR(doc.string(t, path, "dtype", &d.dtype));
    if (d.dtype != "f32" && d.dtype != "bf16") return doc.error(path + ".dtype", "expected f32 or bf16");
    m.tensors.push_back(std::move(d));
  }
  const json& files = root.at("files");
  LLCDIST_RETURN_IF_ERROR(doc.array(files, "files"));
  std::set<std::string> fileNames;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = planjson::index("files", i);
    const json& f = files[i];
    LLCDIST_RETURN_IF_ERROR(doc.keys(f, path, {"file", "rank", "bytes", "checksum", "tensors"}));
    CheckpointFileDesc d;
    LLCDIST_RETURN_IF_ERROR(doc.string(f, path, "file", &d.file));
    if (!isPlainFileName(d.file))
      return doc.error(path + ".file", "\"" + d.file + "\" is not a plain file name inside the checkpoint directory");
    if (!fileNames.insert(d.file).second) return doc.error(path + ".file", "\"" + d.file + "\" is listed twice");
    LLCDIST_RETURN_IF_ERROR(doc.integer(f, path, "rank", &d.rank, 0, world - 1));
    LLCDIST_RETURN_IF_ERROR(doc.integer(f, path, "bytes", &d.bytes, 8, int64_t(1) << 50));
    LLCDIST_RETURN_IF_ERROR(doc.string(f, path, "checksum", &d.checksum));
    if (d.checksum.size() != 16) return doc.error(path + ".checksum", "expected 16 hex digits");
    const json& ts = f.at("tensors");
    LLCDIST_RETURN_IF_ERROR(doc.object(ts, path + ".tensors"));
    for (auto it = ts.begin(); it != ts.end(); ++it) {
      if (!names.count(it.key()))
        return doc.error(path + ".tensors", "\"" + it.key() + "\" is not one of the checkpoint's tensors");
      if (!it.value().is_string() || it.value().get_ref<const std::string&>().size() != 16)
        return doc.error(path + ".tensors." + it.key(), "expected a checksum of 16 hex digits");
      d.tensors[it.key()] = it.value().get<std::string>();
    }
    m.files.push_back(std::move(d));
  }
  return m;
}

std::string checkpointManifestText(const CheckpointManifest& m) {
  json root = json::object();
  root["format"] = "llc-dist-checkpoint";
  root["version"] = m.version;
  root["step"] = m.step;
  root["samples_consumed"] = m.samplesConsumed;
  root["global_batch"] = m.globalBatch;
  root["seq_len"] = m.seqLen;
  root["lr_schedule"] = {{"kind", m.lrSchedule}, {"total_steps", m.lrTotalSteps}};
  root["data"] = {{"source", m.data}, {"shuffle", m.shuffle}, {"seed", std::to_string(m.seed)}};
  root["model"] = {{"name", m.modelName},
                   {"architecture", m.architecture},
                   {"vocab_size", m.vocabSize},
                   {"fingerprint", m.modelFingerprint}};
  root["mesh"] = {{"dp", m.meshDp}, {"tp", m.meshTp}, {"pp", m.meshPp}};
  if (m.meshCp > 1) root["mesh"]["cp"] = m.meshCp;  // absent: 1 (checkpoints without cp read as before)
  root["plan_fingerprint"] = m.planFingerprint;
  root["optimizer"] = m.optimizer;
  root["model_config"] = m.modelConfig;
  json tensors = json::array();
  for (const CheckpointTensorDesc& t : m.tensors)
    tensors.push_back({{"name", t.name},
                       {"param", t.param},
                       {"state", t.state},
                       {"shape", t.shape},
                       {"real_shape", t.realShape},
                       {"dtype", t.dtype}});
  root["tensors"] = std::move(tensors);
  json files = json::array();
  for (const CheckpointFileDesc& f : m.files) {
    json ts = json::object();
    for (const auto& [name, sum] : f.tensors) ts[name] = sum;
    files.push_back(
        {{"file", f.file}, {"rank", f.rank}, {"bytes", f.bytes}, {"checksum", f.checksum}, {"tensors", std::move(ts)}});
  }
  root["files"] = std::move(files);
  return root.dump(1) + "\n";
}

}  // namespace llcdist::rt
