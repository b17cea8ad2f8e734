//===- Topology.cpp - the cluster a mesh runs on --------------------------===//
#include "llcdist/Support/Topology.h"
#include "llcdist/Support/JsonObject.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

using namespace llcdist;
using json = nlohmann::json;

std::optional<std::string> llcdist::parseTopology(const std::string &text,
                                                  const std::string &path,
                                                  Topology &out) {
  json j;
  if (auto err = parseJsonObject(text, path,
                                 {"name", "gpus_per_node", "nodes", "intra_node_gb_s",
                                  "inter_node_gb_s"},
                                 j))
    return err;
  Topology t;
  auto positiveInt = [&](const char *k, int64_t &dst) -> std::optional<std::string> {
    if (!j.contains(k))
      return path + ": missing field '" + k + "' (a positive integer)";
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < 1)
      return path + ": field '" + k + "': must be a positive integer, got " + j[k].dump();
    dst = j[k].get<int64_t>();
    return std::nullopt;
  };
  auto positiveNum = [&](const char *k, double &dst) -> std::optional<std::string> {
    if (!j.contains(k))
      return path + ": missing field '" + k + "' (GB/s per GPU)";
    if (!j[k].is_number() || !(j[k].get<double>() > 0))
      return path + ": field '" + k + "': must be a positive number of GB/s, got " +
             j[k].dump();
    dst = j[k].get<double>();
    return std::nullopt;
  };
  if (auto e = positiveInt("gpus_per_node", t.gpusPerNode))
    return e;
  if (auto e = positiveInt("nodes", t.nodes))
    return e;
  if (auto e = positiveNum("intra_node_gb_s", t.intraNodeGBs))
    return e;
  if (auto e = positiveNum("inter_node_gb_s", t.interNodeGBs))
    return e;
  if (j.contains("name")) {
    if (!j["name"].is_string())
      return path + ": field 'name': must be a string";
    t.name = j["name"].get<std::string>();
  }
  out = t;
  return std::nullopt;
}

std::optional<std::string> llcdist::loadTopology(const std::string &path,
                                                 Topology &out) {
  std::ifstream in(path);
  if (!in)
    return path + ": cannot open the topology file";
  std::stringstream ss;
  ss << in.rdbuf();
  return parseTopology(ss.str(), path, out);
}

bool llcdist::axisCrossesNodes(const MeshSpec &mesh, const std::string &axis,
                               const Topology &topo) {
  for (int64_t d = 0; d < mesh.dp; ++d)
    for (int64_t t = 0; t < mesh.tp; ++t)
      for (int64_t p = 0; p < mesh.pp; ++p) {
        int64_t r = mesh.rank(d, t, p);
        int64_t first = mesh.rank(axis == "dp" ? 0 : d, axis == "tp" ? 0 : t,
                                  axis == "pp" ? 0 : p);
        if (r / topo.gpusPerNode != first / topo.gpusPerNode)
          return true;
      }
  return false;
}
