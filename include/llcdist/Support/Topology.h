//===- Topology.h - the cluster a mesh runs on -----------------*- C++ -*-===//
//
// MLIR-free: a small JSON file describing how many GPUs share a node and the
// per-GPU bandwidth of the links inside and between nodes. The compile
// report uses it to tell which collectives cross nodes and what they cost;
// the cost model of later issues reads it too.
//
//   {"name": "dgx-a100", "gpus_per_node": 8, "nodes": 4,
//    "intra_node_gb_s": 300, "inter_node_gb_s": 25}
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_TOPOLOGY_H
#define LLCDIST_SUPPORT_TOPOLOGY_H

#include "llcdist/Support/MeshSpec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llcdist {

struct Topology {
  std::string name;
  int64_t gpusPerNode = 8;
  int64_t nodes = 1;
  double intraNodeGBs = 0; ///< per-GPU bandwidth inside a node (NVLink), GB/s
  double interNodeGBs = 0; ///< per-GPU bandwidth between nodes (network), GB/s
  int64_t gpus() const { return gpusPerNode * nodes; }
};

/// Parses `text` (the content of `path`); the message names the file, the
/// field and the fix.
std::optional<std::string> parseTopology(const std::string &text,
                                         const std::string &path, Topology &out);
std::optional<std::string> loadTopology(const std::string &path, Topology &out);

/// True when a group of ranks along `axis` (all other coordinates fixed)
/// spans more than one node under `mesh`'s rank order, for any group.
bool axisCrossesNodes(const MeshSpec &mesh, const std::string &axis,
                      const Topology &topo);

} // namespace llcdist

#endif
