// The topology files of --topology (topologies/*.json; lib/Support/Topology.cpp's parseTopology).
// An accepted topology is asked what compile and the cost model ask it first.
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  llcdist::Topology topo;
  if (llcdist::parseTopology(text, "fuzz/topology.json", topo))
    return 0;
  llcdist::MeshSpec mesh;
  mesh.dp = 4, mesh.tp = 8, mesh.pp = 2;
  (void)topo.nodesFor(mesh.worldSize());
  for (const char* axis : {"dp", "tp", "pp"})
    (void)llcdist::axisCrossesNodes(mesh, axis, topo);
  return 0;
}
