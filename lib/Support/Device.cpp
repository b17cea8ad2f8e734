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
std::string devicesDir() {
  if (const char *env = std::getenv("LLCDIST_DEVICES_DIR"))
    return env;
  return LLCDIST_DEVICES_DIR;
}
} // namespace

std::optional<std::string> llcdist::parseDevice(const std::string &text,
                                                const std::string &path, DeviceSpec &out) {
  json j;
  if (auto err = parseJsonObject(text, path,
                                 {"name", "memory_gib", "bf16_dense_tflops", "hbm_tb_s", "source"},
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
    if (!j[k].is_number() || !(j[k].get<double>() > 0))
      return path + ": field '" + k + "': must be a positive number, got " + j[k].dump();
    dst = j[k].get<double>();
    return std::nullopt;
  };
  double gib = 0;
  if (auto e = positive("memory_gib", gib, true))
    return e;
  if (auto e = positive("bf16_dense_tflops", d.bf16DenseTflops, false))
    return e;
  if (auto e = positive("hbm_tb_s", d.hbmTBs, false))
    return e;
  d.memoryBytes = int64_t(std::llround(gib * 1024.0 * 1024.0 * 1024.0));
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

std::optional<std::string> llcdist::loadDevice(const std::string &nameOrPath, DeviceSpec &out) {
  std::string path = nameOrPath;
  bool isPath = nameOrPath.find('/') != std::string::npos ||
                (nameOrPath.size() > 5 && nameOrPath.substr(nameOrPath.size() - 5) == ".json");
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

std::optional<int64_t> llcdist::parseByteSize(const std::string &text) {
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
  if (num.empty() || !end || *end != '\0' || !(v > 0) || !std::isfinite(v))
    return std::nullopt;
  return int64_t(std::llround(v * scale));
}
