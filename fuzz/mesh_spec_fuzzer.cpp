// The --mesh and --rank-order parsers (lib/Support/MeshSpec.cpp). An accepted mesh is used the way
// the driver uses it straight away: its world size, its last rank and its printed form.
#include "llcdist/Support/MeshSpec.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view spec(reinterpret_cast<const char*>(data), size);
  llcdist::MeshSpec mesh;
  if (!llcdist::parseMeshSpec(spec, mesh)) {
    (void)mesh.worldSize();
    (void)mesh.rank(mesh.dp - 1, mesh.tp - 1, mesh.pp - 1, mesh.cp - 1);
    (void)mesh.str();
  }
  llcdist::MeshSpec ordered;
  if (!llcdist::parseRankOrder(spec, ordered)) {
    (void)ordered.rank(0, 0, 0);
    (void)ordered.rankOrderStr();
  }
  return 0;
}
