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
  // "nodes" and "inter_node_gb_s" are the old format's: known here only to
  // be refused with the fix below, not as unknown fields.
  if (auto err = parseJsonObject(text, path,
                                 {"name", "source", "gpus_per_node", "intra_node_gb_s",
                                  "nics_per_node", "nic_gb_s", "nodes", "inter_node_gb_s", "cost"},
                                 j))
    return err;
  if (j.contains("nodes"))
    return path + ": field 'nodes': a topology describes one node and the network, not a node "
                  "count; the nodes follow from the mesh (world size / gpus_per_node, in rank "
                  "order): remove the field (docs/architecture.md, issue #10)";
  if (j.contains("inter_node_gb_s"))
    return path + ": field 'inter_node_gb_s': give the node's network as 'nics_per_node' and "
                  "'nic_gb_s' (GB/s per NIC, each way) instead; the per-GPU bandwidth between "
                  "nodes is nics_per_node x nic_gb_s / gpus_per_node";
  Topology t;
  // A sanity bound far above any node, so that Topology::nodesFor and the
  // rank arithmetic on it stay in int64 (issue #16).
  constexpr int64_t kMaxPerNode = 65536;
  auto positiveInt = [&](const char *k, int64_t &dst) -> std::optional<std::string> {
    if (!j.contains(k))
      return path + ": missing field '" + k + "' (a positive integer)";
    if (auto e = readPositiveInt(j[k], path + ": field '" + k + "'", dst))
      return e;
    if (dst > kMaxPerNode)
      return path + ": field '" + k + "': must be at most " + std::to_string(kMaxPerNode) +
             " (a sanity bound far above any node), got " + j[k].dump();
    return std::nullopt;
  };
  auto positiveNum = [&](const char *k, double &dst) -> std::optional<std::string> {
    if (!j.contains(k))
      return path + ": missing field '" + k + "' (GB/s, each way)";
    return readPositiveNumber(j[k], path + ": field '" + k + "'", "positive number of GB/s",
                              dst);
  };
  if (auto e = positiveInt("gpus_per_node", t.gpusPerNode))
    return e;
  if (auto e = positiveNum("intra_node_gb_s", t.intraNodeGBs))
    return e;
  if (auto e = positiveInt("nics_per_node", t.nicsPerNode))
    return e;
  if (auto e = positiveNum("nic_gb_s", t.nicGBs))
    return e;
  t.interNodeGBs = double(t.nicsPerNode) * t.nicGBs / double(t.gpusPerNode);
  for (const char *k : {"name", "source"})
    if (j.contains(k) && !j[k].is_string())
      return path + ": field '" + k + "': must be a string";
  if (j.contains("name"))
    t.name = j["name"].get<std::string>();
  if (j.contains("cost")) {
    const json &c = j["cost"];
    if (!c.is_object())
      return path + ": field 'cost': must be an object, got " + c.dump();
    if (auto e = refuseUnknownFields(c, path,
                                     {"intra_node_latency_us", "inter_node_latency_us",
                                      "intra_node_busbw_fraction", "inter_node_busbw_fraction",
                                      "source"},
                                     "cost."))
      return e;
    TopologyCost tc;
    if (auto e = readBoundedNumber(c, path, "cost.", "intra_node_latency_us", 0, 1e6,
                                   "microseconds", tc.intraLatencyUs))
      return e;
    if (auto e = readBoundedNumber(c, path, "cost.", "inter_node_latency_us", 0, 1e6,
                                   "microseconds", tc.interLatencyUs))
      return e;
    if (auto e = readBoundedNumber(c, path, "cost.", "intra_node_busbw_fraction", 1e-3, 1,
                                   "a fraction of intra_node_gb_s", tc.intraBusbwFraction))
      return e;
    if (auto e = readBoundedNumber(c, path, "cost.", "inter_node_busbw_fraction", 1e-3, 1,
                                   "a fraction of nic_gb_s", tc.interBusbwFraction))
      return e;
    if (auto e = readNonEmptyString(c, path, "cost.", "source", "citing the figures", tc.source))
      return e;
    t.cost = tc;
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
      for (int64_t p = 0; p < mesh.pp; ++p)
        for (int64_t c = 0; c < mesh.cp; ++c) {
          int64_t r = mesh.rank(d, t, p, c);
          int64_t first =
              mesh.rank(axis == "dp" ? 0 : d, axis == "tp" ? 0 : t, axis == "pp" ? 0 : p, axis == "cp" ? 0 : c);
          if (r / topo.gpusPerNode != first / topo.gpusPerNode)
            return true;
        }
  return false;
}
