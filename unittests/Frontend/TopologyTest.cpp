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
  expect(R"({"gpus_per_node": 8, "nodes": 1, "intra_node_gb_s": 300})",
         "missing field 'inter_node_gb_s'");
  expect(R"({"gpus_per_node": 0, "nodes": 1, "intra_node_gb_s": 1, "inter_node_gb_s": 1})",
         "field 'gpus_per_node': must be a positive integer, got 0");
  expect(R"({"gpus_per_node": 8, "nodes": 1, "intra_node_gb_s": -3, "inter_node_gb_s": 1})",
         "field 'intra_node_gb_s': must be a positive number of GB/s");
  expect(R"({"gpus_per_node": 8, "nodes": 1, "intra_node_gb_s": 1, "inter_node_gb_s": 1, "nics": 8})",
         "field 'nics': unknown field");
}

// Megatron's rank order keeps tp inside a node: with 8 GPUs per node,
// dp=4,tp=8 puts every tp group on one node and every dp group across nodes.
TEST(Topology, WhichGroupsCrossNodes) {
  Topology t;
  t.gpusPerNode = 8;
  t.nodes = 4;
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
