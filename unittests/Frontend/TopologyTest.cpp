//===- TopologyTest.cpp - the cluster description -------------------------===//
#include "llcdist/Support/Topology.h"

#include <gtest/gtest.h>

using namespace llcdist;

TEST(Topology, ShippedFilesParse) {
  for (const char *name : {"dgx-a100", "dgx-h100"}) {
    Topology t;
    auto err = loadTopology(std::string(LLCDIST_SOURCE_DIR) + "/topologies/" +
                                name + ".json",
                            t);
    ASSERT_FALSE(err) << *err;
    EXPECT_EQ(t.gpusPerNode, 8);
    EXPECT_GT(t.intraNodeGBs, t.interNodeGBs);
  }
}

TEST(Topology, Errors) {
  Topology t;
  auto expect = [&](const char *text, const char *what) {
    auto err = parseTopology(text, "topo.json", t);
    ASSERT_TRUE(err) << text;
    EXPECT_NE(err->find(what), std::string::npos) << *err;
    EXPECT_EQ(err->rfind("topo.json", 0), 0u) << *err;
  };
  expect("{", "malformed JSON");
  expect("[]", "expected a JSON object");
  expect(R"({"gpus_per_node": 8, "intra_node_gb_s": 300, "nics_per_node": 8})",
         "missing field 'nic_gb_s'");
  expect(R"({"gpus_per_node": 0, "intra_node_gb_s": 1, "nics_per_node": 8, "nic_gb_s": 1})",
         "field 'gpus_per_node': must be a positive integer, got 0");
  expect(R"({"gpus_per_node": 8, "intra_node_gb_s": -3, "nics_per_node": 8, "nic_gb_s": 1})",
         "field 'intra_node_gb_s': must be a positive number of GB/s");
  expect(R"({"gpus_per_node": 8, "intra_node_gb_s": 1, "nics_per_node": 0, "nic_gb_s": 1})",
         "field 'nics_per_node': must be a positive integer, got 0");
  expect(R"({"gpus_per_node": 8, "intra_node_gb_s": 1, "nics_per_node": 8, "nic_gb_s": 1, "nics": 8})",
         "field 'nics': unknown field");
  // The old format: a fixed node count and a per-GPU network bandwidth.
  expect(R"({"gpus_per_node": 8, "nodes": 4, "intra_node_gb_s": 300, "inter_node_gb_s": 25})",
         "field 'nodes': a topology describes one node and the network, not a node count; "
         "the nodes follow from the mesh");
  expect(R"({"gpus_per_node": 8, "intra_node_gb_s": 300, "inter_node_gb_s": 25})",
         "field 'inter_node_gb_s': give the node's network as 'nics_per_node' and 'nic_gb_s'");
}

// The per-GPU network bandwidth is the node's NICs shared by its GPUs.
TEST(Topology, NetworkBandwidthPerGpu) {
  Topology t;
  ASSERT_FALSE(parseTopology(
      R"({"gpus_per_node": 8, "intra_node_gb_s": 450, "nics_per_node": 4, "nic_gb_s": 50})",
      "topo.json", t));
  EXPECT_DOUBLE_EQ(t.interNodeGBs, 25.0); // 4 × 50 / 8
  EXPECT_EQ(t.nodesFor(1), 1);
  EXPECT_EQ(t.nodesFor(8), 1);
  EXPECT_EQ(t.nodesFor(9), 2);
}

// Megatron's rank order keeps tp inside a node: with 8 GPUs per node,
// dp=4,tp=8 puts every tp group on one node and every dp group across nodes.
TEST(Topology, WhichGroupsCrossNodes) {
  Topology t;
  t.gpusPerNode = 8;
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("dp=4,tp=8", m));
  EXPECT_FALSE(axisCrossesNodes(m, "tp", t));
  EXPECT_TRUE(axisCrossesNodes(m, "dp", t));
  EXPECT_FALSE(axisCrossesNodes(m, "pp", t));
  // dp fastest: now the dp groups are the ones inside a node.
  ASSERT_FALSE(parseRankOrder("dp,tp,pp", m));
  ASSERT_FALSE(parseMeshSpec("dp=8,tp=4", m));
  m.rankOrder = {"dp", "tp", "pp"};
  EXPECT_FALSE(axisCrossesNodes(m, "dp", t));
  EXPECT_TRUE(axisCrossesNodes(m, "tp", t));
}

// 256 GPUs on the shipped DGX H100 file (which once fixed 4 nodes, 32 GPUs):
// 32 nodes follow from the mesh. dp=8,tp=8,pp=4 in Megatron's order (tp
// fastest, then dp, then pp): a tp group is one node; a dp group strides
// over 8 nodes; a pp group strides over 64 ranks = 8 nodes.
TEST(Topology, MeshOf256GpusOnDgxH100) {
  Topology t;
  auto err = loadTopology(std::string(LLCDIST_SOURCE_DIR) + "/topologies/dgx-h100.json", t);
  ASSERT_FALSE(err) << *err;
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("dp=8,tp=8,pp=4", m));
  ASSERT_EQ(m.worldSize(), 256);
  EXPECT_EQ(t.nodesFor(m.worldSize()), 32);
  EXPECT_DOUBLE_EQ(t.interNodeGBs, 50.0); // 8 NICs × 50 GB/s / 8 GPUs
  EXPECT_FALSE(axisCrossesNodes(m, "tp", t));
  EXPECT_TRUE(axisCrossesNodes(m, "dp", t));
  EXPECT_TRUE(axisCrossesNodes(m, "pp", t));
  // Every rank's node is its rank / 8: rank of (dp=7, tp=7, pp=3) is the last.
  EXPECT_EQ(m.rank(7, 7, 3) / t.gpusPerNode, 31);
  // tp=16 spans two nodes under the same order.
  ASSERT_FALSE(parseMeshSpec("dp=4,tp=16,pp=4", m));
  EXPECT_TRUE(axisCrossesNodes(m, "tp", t));
}
