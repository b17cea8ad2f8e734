//===- CostModel.h - how long one op or collective takes -------*- C++ -*-===//
//
// MLIR-free. The time of one kernel on one GPU and of one collective on a
// group of GPUs, from a device file (devices/*.json, its "cost" object) and a
// topology file (topologies/*.json, its "cost" object). docs/cost-model.md
// states every formula; in short:
//
//   GEMM       t = max(F / (P·e(F)), bytes / (HBM·m)) + launch,
//              F = 2·M·N·K, e(F) = gemm_efficiency · F / (F + knee)
//   attention  t = F / (P·a) + launch, F the causal kernel's FLOPs
//              (forward 2·B·S²·nh·hd, backward 2.5× that), a the cited
//              forward/backward efficiency
//   other      t = bytes moved / (HBM·m) + launch (memory-bound)
//   collective t = factor · bytes / busbw + steps · latency, nccl-tests'
//              factors: all-reduce 2(n−1)/n, all-gather and reduce-scatter
//              (n−1)/n; busbw from the link the group uses: inside a node
//              the NVLink bandwidth, across nodes the NICs of the group's
//              members on a node (NCCL's rings, one per rail), never more
//              than NVLink's
//   p2p        t = bytes / link + latency
//
// gemm_efficiency, gemm_knee_gflop and memory_efficiency are the only fitted
// parameters (scripts/fit_cost_model.py, on bench/data/megatron-sc21-table1.csv).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_COST_COSTMODEL_H
#define LLCDIST_COST_COSTMODEL_H

#include "llcdist/Support/Device.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llcdist::cost {

/// A device and the cluster it sits in, both with their "cost" objects.
struct Hardware {
  DeviceSpec device;
  Topology topology;
  const DeviceCost &dc() const { return *device.cost; }
  const TopologyCost &tc() const { return *topology.cost; }
};

/// Loads `device` (a name in devices/ or a file) and `topology` (a file, or a
/// name in topologies/: dgx-a100, dgx-h100, dgx-h200); an error when either
/// lacks its "cost" object names the file and the fix.
std::optional<std::string> loadHardware(const std::string &device,
                                        const std::string &topology, Hardware &out);
/// The topology a name stands for: a path, or topologies/NAME.json.
std::string topologyPath(const std::string &nameOrPath);

enum class Precision { F32, BF16 };
int64_t bytesOf(Precision p);
/// The dense peak of `p` in FLOP/s (bf16 on tensor cores; f32 the plain
/// FP32 units: the runtime's f32 kernels do not use TF32).
double peakFlops(const Hardware &hw, Precision p);

/// One [M,K]·[K,N] GEMM (any layout), operands and result in `p`.
double gemmSeconds(const Hardware &hw, int64_t m, int64_t n, int64_t k, Precision p);
/// The fraction of peak e(F) a GEMM of `flops` reaches (before the memory
/// bound).
double gemmEfficiency(const Hardware &hw, double flops);
/// Causal attention of B sequences of S tokens, nh query heads of hd.
double attentionSeconds(const Hardware &hw, int64_t b, int64_t s, int64_t nh, int64_t hd,
                        bool backward, Precision p);
/// A memory-bound kernel moving `bytes` (reads + writes).
double memorySeconds(const Hardware &hw, double bytes);
/// The launch overhead of one kernel.
double launchSeconds(const Hardware &hw);

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll };
const char *collectiveName(Collective c);

/// A communicator: `size` ranks, `perNode` of them on each node they occupy
/// (size when they share one node).
struct Group {
  int64_t size = 1;
  int64_t perNode = 1;
  bool crossesNodes() const { return perNode < size; }
};
/// The group of `axis` (one axis, several joined by '+': "dp+cp", or expert
/// parallelism's "ep" and "edp", drawn from dp: MeshSpec.h) under
/// `mesh`'s rank order on `topo`'s nodes (ranks
/// fill nodes in rank order). Every group of an axis has the same shape
/// when the node size divides or is a multiple of the axis' stride; this
/// returns the group of rank 0's coordinates on the other axes.
Group axisGroup(const MeshSpec &mesh, const std::string &axis, const Topology &topo);

/// nccl-tests' bus-bandwidth factor: 2(n−1)/n or (n−1)/n.
double busFactor(Collective c, int64_t n);
/// The bus bandwidth (bytes/s) a group reaches (see the file comment).
double busBandwidth(const Hardware &hw, const Group &g);
/// `bytes` is the whole buffer: all-reduce's, the gathered result of an
/// all-gather, the input of a reduce-scatter (nccl-tests' "size").
double collectiveSeconds(const Hardware &hw, Collective c, double bytes, const Group &g);
/// The latency part of collectiveSeconds: (n−1) ring steps (2(n−1) for an
/// all-reduce) of the group's link latency. A collective per tensor pays it
/// once per tensor.
double collectiveLatency(const Hardware &hw, Collective c, const Group &g);
/// One message of `bytes` to a peer on the same node or another.
double p2pSeconds(const Hardware &hw, double bytes, bool crossNode);

} // namespace llcdist::cost

#endif
