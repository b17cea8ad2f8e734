//===- Device.cpp - an accelerator's memory and speed ---------------------===//
#include "llcdist/Support/Device.h"
#include "llcdist/Support/JsonObject.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace llcdist;
using json = nlohmann::json;

#ifndef LLCDIST_DEVICES_DIR
#define LLCDIST_DEVICES_DIR "devices"
#endif

namespace {
/// Sanity bounds far above any device: 1 PiB of memory, 65536 NCCL channels
/// or peers. They keep every reserve sum (DeviceReserve::bytes) in int64.
constexpr double kMaxDeviceGib = 1048576;
constexpr int64_t kMaxNcclCount = 65536;

std::string devicesDir() {
  if (const char *env = std::getenv("LLCDIST_DEVICES_DIR"))
    return env;
  return LLCDIST_DEVICES_DIR;
}

/// The "reserve" object: every field required, so that a device file says
/// what it assumes instead of inheriting a silent default.
std::optional<std::string> parseReserve(const json &r, const std::string &path,
                                        int64_t capacity, DeviceReserve &out) {
  const std::string where = path + ": field 'reserve'";
  auto field = [&](const std::string &k) { return path + ": field 'reserve." + k + "'"; };
  if (!r.is_object())
    return where + ": must be an object, got " + r.dump();
  static const std::vector<std::string> known = {
      "cuda_context_mib", "cublas_workspace_mib", "cudnn_workspace_mib", "nccl_buffsize_mib",
      "nccl_channels",    "nccl_peers",           "fragmentation_fraction", "source"};
  if (auto e = refuseUnknownFields(r, path, known, "reserve."))
    return e;
  std::string list;
  for (const std::string &k : known)
    list += (list.empty() ? "" : ", ") + k;
  for (const std::string &k : known)
    if (!r.contains(k))
      return where + ": missing field '" + k + "' (known: " + list + ")";
  DeviceReserve d;
  // Each part at most the capacity (itself at most kMaxDeviceGib), so their
  // sums and products below stay far from int64 overflow.
  auto mib = [&](const char *k, int64_t &dst) -> std::optional<std::string> {
    if (!r[k].is_number() || !(r[k].get<double>() >= 0) || !std::isfinite(r[k].get<double>()))
      return field(k) + ": must be a number of MiB >= 0, got " + r[k].dump();
    if (r[k].get<double>() * 1048576.0 > double(capacity))
      return field(k) + ": must be at most memory_gib (" + std::to_string(capacity / 1048576) +
             " MiB), got " + r[k].dump();
    dst = int64_t(std::llround(r[k].get<double>() * 1048576.0));
    return std::nullopt;
  };
  auto count = [&](const char *k, int64_t &dst) -> std::optional<std::string> {
    if (auto e = readPositiveInt(r[k], field(k), dst))
      return e;
    if (dst > kMaxNcclCount)
      return field(k) + ": must be at most " + std::to_string(kMaxNcclCount) +
             " (a sanity bound far above NCCL's), got " + r[k].dump();
    return std::nullopt;
  };
  if (auto e = mib("cuda_context_mib", d.cudaContextBytes))
    return e;
  if (auto e = mib("cublas_workspace_mib", d.cublasWorkspaceBytes))
    return e;
  if (auto e = mib("cudnn_workspace_mib", d.cudnnWorkspaceBytes))
    return e;
  if (auto e = mib("nccl_buffsize_mib", d.ncclBuffsizeBytes))
    return e;
  if (auto e = count("nccl_channels", d.ncclChannels))
    return e;
  if (auto e = count("nccl_peers", d.ncclPeers))
    return e;
  if (double(d.ncclBuffsizeBytes) * double(d.ncclChannels) * double(d.ncclPeers) > double(capacity))
    return where + ": one communicator's NCCL buffers (nccl_buffsize_mib × nccl_channels × "
                   "nccl_peers) exceed memory_gib";
  const json &f = r["fragmentation_fraction"];
  if (!f.is_number() || !(f.get<double>() >= 0 && f.get<double>() < 0.5))
    return field("fragmentation_fraction") + ": must be a fraction of the capacity in [0, 0.5), "
                   "got " + f.dump();
  d.fragmentationFraction = f.get<double>();
  if (!r["source"].is_string() || r["source"].get<std::string>().empty())
    return field("source") + ": must be a non-empty string saying where the numbers come from";
  d.source = r["source"].get<std::string>();
  // A reserve of the whole device (even with no communicator) leaves no arena.
  if (d.bytes(capacity, 0) >= capacity)
    return where + ": the reserve (" + std::to_string(d.bytes(capacity, 0)) +
           " bytes before NCCL's) is not smaller than memory_gib (" + std::to_string(capacity) +
           " bytes): nothing would be left for the plan";
  out = d;
  return std::nullopt;
}

std::optional<std::string> parseCost(const json &c, const std::string &path, DeviceCost &out) {
  if (!c.is_object())
    return path + ": field 'cost': must be an object, got " + c.dump();
  if (auto e = refuseUnknownFields(c, path,
                                   {"fp32_tflops", "kernel_launch_us", "attention_fwd_efficiency",
                                    "attention_bwd_efficiency", "source", "fitted"},
                                   "cost."))
    return e;
  DeviceCost d;
  if (auto e = readBoundedNumber(c, path, "cost.", "fp32_tflops", 1e-3, 1e6, "TFLOP/s",
                                 d.fp32Tflops))
    return e;
  if (auto e = readBoundedNumber(c, path, "cost.", "kernel_launch_us", 0, 1e4,
                                 "microseconds", d.kernelLaunchUs))
    return e;
  if (auto e = readBoundedNumber(c, path, "cost.", "attention_fwd_efficiency", 1e-3, 1,
                                 "a fraction of the bf16 peak", d.attentionFwdEfficiency))
    return e;
  if (auto e = readBoundedNumber(c, path, "cost.", "attention_bwd_efficiency", 1e-3, 1,
                                 "a fraction of the bf16 peak", d.attentionBwdEfficiency))
    return e;
  if (auto e = readNonEmptyString(c, path, "cost.", "source", "citing the figures", d.source))
    return e;
  if (!c.contains("fitted"))
    return path + ": missing field 'cost.fitted' (the fitted efficiencies; "
                  "python3 scripts/fit_cost_model.py writes them)";
  const json &f = c["fitted"];
  if (!f.is_object())
    return path + ": field 'cost.fitted': must be an object, got " + f.dump();
  if (auto e = refuseUnknownFields(
          f, path, {"gemm_efficiency", "gemm_knee_gflop", "memory_efficiency", "source"},
          "cost.fitted."))
    return e;
  if (auto e = readBoundedNumber(f, path, "cost.fitted.", "gemm_efficiency", 1e-3, 1,
                                 "a fraction of the peak", d.gemmEfficiency))
    return e;
  if (auto e = readBoundedNumber(f, path, "cost.fitted.", "gemm_knee_gflop", 0, 1e6, "GFLOP",
                                 d.gemmKneeGflop))
    return e;
  if (auto e = readBoundedNumber(f, path, "cost.fitted.", "memory_efficiency", 1e-3, 1,
                                 "a fraction of the HBM bandwidth", d.memoryEfficiency))
    return e;
  if (auto e = readNonEmptyString(f, path, "cost.fitted.", "source",
                                  "saying what the values were fitted on", d.fitSource))
    return e;
  out = d;
  return std::nullopt;
}
} // namespace

int64_t DeviceReserve::fragmentationBytes(int64_t capacity) const {
  return int64_t(std::llround(fragmentationFraction * double(capacity)));
}

int64_t DeviceReserve::bytes(int64_t capacity, int64_t communicators) const {
  return cudaContextBytes + cublasWorkspaceBytes + cudnnWorkspaceBytes +
         communicators * ncclPerCommunicatorBytes() + fragmentationBytes(capacity);
}

std::optional<std::string> llcdist::parseDevice(const std::string &text,
                                                const std::string &path, DeviceSpec &out) {
  json j;
  if (auto err = parseJsonObject(text, path,
                                 {"name", "memory_gib", "bf16_dense_tflops", "hbm_tb_s", "source",
                                  "reserve", "cost"},
                                 j))
    return err;
  DeviceSpec d;
  if (!j.contains("name") || !j["name"].is_string())
    return path + ": missing field 'name' (a string)";
  d.name = j["name"].get<std::string>();
  auto positive = [&](const char *k, double &dst, bool required) -> std::optional<std::string> {
    if (!j.contains(k))
      return required ? std::optional<std::string>(path + ": missing field '" + k +
                                                   "' (a positive number)")
                      : std::nullopt;
    return readPositiveNumber(j[k], path + ": field '" + k + "'", "positive number", dst);
  };
  double gib = 0;
  if (auto e = positive("memory_gib", gib, true))
    return e;
  if (gib > kMaxDeviceGib)
    return path + ": field 'memory_gib': must be at most 1048576 (1 PiB, a sanity bound far above "
                  "any device), got " + j["memory_gib"].dump();
  if (auto e = positive("bf16_dense_tflops", d.bf16DenseTflops, false))
    return e;
  if (auto e = positive("hbm_tb_s", d.hbmTBs, false))
    return e;
  d.memoryBytes = int64_t(std::llround(gib * 1024.0 * 1024.0 * 1024.0));
  if (!j.contains("reserve"))
    return path + ": missing field 'reserve' (what the CUDA context, library workspaces, "
                  "NCCL and fragmentation take outside the plan; see devices/h100-80gb.json)";
  if (auto e = parseReserve(j["reserve"], path, d.memoryBytes, d.reserve))
    return e;
  if (j.contains("cost")) {
    if (d.bf16DenseTflops <= 0 || d.hbmTBs <= 0)
      return path + ": field 'cost' needs 'bf16_dense_tflops' and 'hbm_tb_s' (the peaks the "
                    "cost model scales)";
    DeviceCost c;
    if (auto e = parseCost(j["cost"], path, c))
      return e;
    d.cost = c;
  }
  d.id = std::filesystem::path(path).stem().string();
  out = d;
  return std::nullopt;
}

std::vector<std::string> llcdist::knownDevices() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(devicesDir(), ec))
    if (e.path().extension() == ".json")
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool llcdist::namesAFile(const std::string &nameOrPath) {
  return nameOrPath.find('/') != std::string::npos ||
         (nameOrPath.size() > 5 && nameOrPath.substr(nameOrPath.size() - 5) == ".json");
}

std::optional<std::string> llcdist::loadDevice(const std::string &nameOrPath, DeviceSpec &out) {
  std::string path = nameOrPath;
  bool isPath = namesAFile(nameOrPath);
  if (!isPath)
    path = devicesDir() + "/" + nameOrPath + ".json";
  std::ifstream in(path);
  if (!in) {
    if (isPath)
      return path + ": cannot read the device file";
    std::string list;
    for (const std::string &n : knownDevices())
      list += (list.empty() ? "" : ", ") + n;
    return "--device '" + nameOrPath + "': unknown device (known: " + list +
           "; or a JSON file like devices/h100-80gb.json)";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parseDevice(ss.str(), path, out);
}

std::optional<int64_t> llcdist::parseByteSize(const std::string &text, bool allowZero) {
  static const std::pair<const char *, double> units[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
      {"TB", 1e12},             {"GB", 1e9},           {"MB", 1e6},        {"KB", 1e3},
      {"B", 1.0}};
  std::string num = text;
  double scale = 1;
  for (auto [suffix, s] : units) {
    std::string u = suffix;
    if (text.size() > u.size() && text.compare(text.size() - u.size(), u.size(), u) == 0) {
      num = text.substr(0, text.size() - u.size());
      scale = s;
      break;
    }
  }
  char *end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (num.empty() || !end || *end != '\0' || !(allowZero ? v >= 0 : v > 0) ||
      !std::isfinite(v))
    return std::nullopt;
  // At most 2^60 bytes (1 EiB): beyond it the count would not fit the int64
  // every size is kept in (9223372036854775808 would wrap negative).
  if (v * scale > 1152921504606846976.0)
    return std::nullopt;
  // A fraction of a byte ("0.4", "1e-9KiB") rounds to 0: non-positive too.
  int64_t bytes = int64_t(std::llround(v * scale));
  if (bytes < (allowZero ? 0 : 1))
    return std::nullopt;
  return bytes;
}
