//===- CostModel.cpp - how long one op or collective takes ----------------===//
#include "llcdist/Cost/CostModel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace llcdist;
using namespace llcdist::cost;

#ifndef LLCDIST_TOPOLOGIES_DIR
#define LLCDIST_TOPOLOGIES_DIR "topologies"
#endif

std::string cost::topologyPath(const std::string &nameOrPath) {
  if (namesAFile(nameOrPath))
    return nameOrPath;
  const char *env = std::getenv("LLCDIST_TOPOLOGIES_DIR");
  return std::string(env ? env : LLCDIST_TOPOLOGIES_DIR) + "/" + nameOrPath + ".json";
}

std::optional<std::string> cost::loadHardware(const std::string &device,
                                              const std::string &topology, Hardware &out) {
  Hardware hw;
  if (auto e = loadDevice(device, hw.device))
    return e;
  std::string topo = topologyPath(topology);
  if (auto e = loadTopology(topo, hw.topology))
    return e;
  if (!hw.device.cost)
    return "--device '" + device + "': the device file has no 'cost' object (peaks, launch "
           "latency, attention efficiencies and the fitted GEMM/memory efficiencies the cost "
           "model needs; see devices/a100-80gb.json and docs/cost-model.md)";
  if (!hw.topology.cost)
    return topo + ": the topology file has no 'cost' object (link latencies and the fraction "
                  "of their bandwidth NCCL reaches; see topologies/dgx-a100.json and "
                  "docs/cost-model.md)";
  out = hw;
  return std::nullopt;
}

int64_t cost::bytesOf(Precision p) { return p == Precision::BF16 ? 2 : 4; }

double cost::peakFlops(const Hardware &hw, Precision p) {
  return (p == Precision::BF16 ? hw.device.bf16DenseTflops : hw.dc().fp32Tflops) * 1e12;
}

double cost::launchSeconds(const Hardware &hw) { return hw.dc().kernelLaunchUs * 1e-6; }

double cost::gemmEfficiency(const Hardware &hw, double flops) {
  double knee = hw.dc().gemmKneeGflop * 1e9;
  return hw.dc().gemmEfficiency * flops / (flops + knee);
}

double cost::memorySeconds(const Hardware &hw, double bytes) {
  return bytes / (hw.device.hbmTBs * 1e12 * hw.dc().memoryEfficiency) + launchSeconds(hw);
}

double cost::gemmSeconds(const Hardware &hw, int64_t m, int64_t n, int64_t k, Precision p) {
  double flops = 2.0 * double(m) * double(n) * double(k);
  double bytes = double(bytesOf(p)) * (double(m) * double(k) + double(k) * double(n) +
                                       double(m) * double(n));
  double compute = flops / (peakFlops(hw, p) * gemmEfficiency(hw, flops));
  double memory = bytes / (hw.device.hbmTBs * 1e12 * hw.dc().memoryEfficiency);
  return std::max(compute, memory) + launchSeconds(hw);
}

double cost::attentionSeconds(const Hardware &hw, int64_t b, int64_t s, int64_t nh,
                              int64_t hd, bool backward, Precision p) {
  // Causal: half of QKᵀ and PV's 4·B·S²·nh·hd; the backward recomputes the
  // scores and runs four more products (FlashAttention-2's 2.5×).
  double fwd = 2.0 * double(b) * double(s) * double(s) * double(nh) * double(hd);
  double flops = backward ? 2.5 * fwd : fwd;
  double eff = backward ? hw.dc().attentionBwdEfficiency : hw.dc().attentionFwdEfficiency;
  return flops / (peakFlops(hw, p) * eff) + launchSeconds(hw);
}

const char *cost::collectiveName(Collective c) {
  switch (c) {
  case Collective::AllReduce:
    return "all_reduce";
  case Collective::AllGather:
    return "all_gather";
  case Collective::ReduceScatter:
    return "reduce_scatter";
  case Collective::AllToAll:
    return "all_to_all";
  }
  return "?";
}

Group cost::axisGroup(const MeshSpec &mesh, const std::string &axis, const Topology &topo) {
  Group g;
  g.size = mesh.size(axis);
  if (g.size <= 1) {
    g.perNode = 1;
    return g;
  }
  // One axis, or several joined by '+' ("dp+cp"): member i's coordinates
  // are i's mixed-radix digits over them.
  const std::string names = "+" + axis + "+";
  auto on = [&](const char *a) { return names.find("+" + std::string(a) + "+") != std::string::npos; };
  const bool dp = on("dp"), tp = on("tp"), pp = on("pp"), cp = on("cp"), ep = on("ep"), edp = on("edp");
  int64_t firstNode = -1, onFirst = 0;
  for (int64_t i = 0; i < g.size; ++i) {
    int64_t rest = i;
    auto digit = [&](bool named, int64_t n) {
      int64_t c = named ? rest % n : 0;
      rest = named ? rest / n : rest;
      return c;
    };
    // Expert parallelism's axes (MeshSpec.h), parts of dp: "ep" the ep
    // consecutive dp coordinates of rank 0's ep group, "edp" every ep-th.
    // (The members' order does not matter here: only which node each is on.)
    const int64_t epc = digit(ep, mesh.ep), edpc = digit(edp, mesh.dp / mesh.ep);
    const int64_t dpc = digit(dp, mesh.dp) + epc + edpc * mesh.ep;
    const int64_t tpc = digit(tp, mesh.tp), ppc = digit(pp, mesh.pp), cpc = digit(cp, mesh.cp);
    int64_t r = mesh.rank(dpc, tpc, ppc, cpc);
    int64_t node = r / topo.gpusPerNode;
    if (firstNode < 0)
      firstNode = node;
    onFirst += node == firstNode;
  }
  g.perNode = onFirst;
  return g;
}

double cost::busFactor(Collective c, int64_t n) {
  if (n <= 1)
    return 0;
  double f = double(n - 1) / double(n);
  return c == Collective::AllReduce ? 2 * f : f;
}

double cost::busBandwidth(const Hardware &hw, const Group &g) {
  const Topology &t = hw.topology;
  double intra = t.intraNodeGBs * 1e9 * hw.tc().intraBusbwFraction;
  if (!g.crossesNodes())
    return intra;
  // One ring per rail: the members on a node drive as many NICs as they
  // are (at most the node's NICs), each NIC shared by gpus/nics GPUs.
  double nicsUsed = std::min<double>(double(g.perNode) * double(t.nicsPerNode) /
                                         double(t.gpusPerNode),
                                     double(t.nicsPerNode));
  double inter = nicsUsed * t.nicGBs * 1e9 * hw.tc().interBusbwFraction;
  return std::min(intra, inter);
}

double cost::collectiveLatency(const Hardware &hw, Collective c, const Group &g) {
  if (g.size <= 1)
    return 0;
  double latency = (g.crossesNodes() ? hw.tc().interLatencyUs : hw.tc().intraLatencyUs) * 1e-6;
  return double(g.size - 1) * (c == Collective::AllReduce ? 2 : 1) * latency;
}

double cost::collectiveSeconds(const Hardware &hw, Collective c, double bytes, const Group &g) {
  if (g.size <= 1)
    return 0;
  return busFactor(c, g.size) * bytes / busBandwidth(hw, g) + collectiveLatency(hw, c, g);
}

double cost::p2pSeconds(const Hardware &hw, double bytes, bool crossNode) {
  const Topology &t = hw.topology;
  double bw = crossNode ? t.nicGBs * 1e9 * hw.tc().interBusbwFraction
                        : t.intraNodeGBs * 1e9 * hw.tc().intraBusbwFraction;
  double latency = (crossNode ? hw.tc().interLatencyUs : hw.tc().intraLatencyUs) * 1e-6;
  return bytes / bw + latency;
}
