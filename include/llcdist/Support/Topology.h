//===- Topology.h - the cluster a mesh runs on -----------------*- C++ -*-===//
//
// MLIR-free: a small JSON file describing one node and the network: how many
// GPUs share a node, the per-GPU bandwidth of the links inside it, and the
// node's NICs and their bandwidth. It fixes no node count: the nodes follow
// from the mesh (world size / GPUs per node, ranks filling nodes in rank
// order). The compile report uses it to tell which collectives cross nodes
// and what they cost; the cost model of later issues reads it too.
//
//   {"name": "dgx-h100", "gpus_per_node": 8, "intra_node_gb_s": 450,
//    "nics_per_node": 8, "nic_gb_s": 50, "source": "..."}
//
// The cost model (issue #15) also reads an optional "cost" object:
//   "cost": {"intra_node_latency_us": 3, "inter_node_latency_us": 6,
//            "intra_node_busbw_fraction": 0.77, "inter_node_busbw_fraction": 0.9,
//            "source": "..."}
//
// Files of the old format ("nodes", "inter_node_gb_s") are refused with the
// fix (issue #10).
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

/// What the cost model reads of the links: the file's optional "cost" object
/// (every field required when it is there): one hop's latency and the
/// fraction of the link's bandwidth NCCL's bus bandwidth reaches, inside a
/// node and between nodes (nccl-tests' busbw; docs/cost-model.md).
struct TopologyCost {
  double intraLatencyUs = 0, interLatencyUs = 0;
  double intraBusbwFraction = 0, interBusbwFraction = 0;
  std::string source;
};

struct Topology {
  std::string name;
  int64_t gpusPerNode = 8;
  double intraNodeGBs = 0; ///< per-GPU bandwidth inside a node (NVLink), GB/s
  int64_t nicsPerNode = 0; ///< network interfaces per node
  double nicGBs = 0;       ///< one NIC's bandwidth, GB/s each way
  double interNodeGBs = 0; ///< per GPU: nicsPerNode × nicGBs / gpusPerNode
  std::optional<TopologyCost> cost;
  /// The nodes a mesh of `worldSize` ranks occupies: ranks fill nodes in rank
  /// order, gpusPerNode at a time (the last may be partly used).
  int64_t nodesFor(int64_t worldSize) const {
    return (worldSize + gpusPerNode - 1) / gpusPerNode;
  }
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
