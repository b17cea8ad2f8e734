// Mesh coordinates and collective groups. See Mesh.h.
#include "llcdist/runtime/Mesh.h"

#include "llcdist/runtime/PlanSchema.h"

#include <algorithm>

namespace llcdist::rt {

std::string_view meshAxisName(MeshAxis a) { return schema::kMeshAxes[size_t(a)]; }

std::optional<MeshAxis> parseMeshAxis(std::string_view name) {
  for (size_t i = 0; i < schema::kMeshAxes.size(); ++i)
    if (schema::kMeshAxes[i] == name) return MeshAxis(i);
  return std::nullopt;
}

Mesh Mesh::make(int64_t dp, int64_t tp, int64_t pp) {
  Mesh m;
  m.size = {dp, tp, pp};
  return m;
}

int64_t Mesh::stride(MeshAxis a) const {
  int64_t s = 1;
  for (MeshAxis o : order) {
    if (o == a) return s;
    s *= axisSize(o);
  }
  return s;
}

std::vector<int> Mesh::group(int64_t rank, MeshAxis axis) const {
  const int64_t base = rank - coord(rank, axis) * stride(axis);
  std::vector<int> g;
  for (int64_t m = 0; m < axisSize(axis); ++m) g.push_back(int(base + m * stride(axis)));
  return g;
}

std::vector<int> Mesh::subGroup(int64_t rank, MeshAxis axis, int64_t size) const {
  std::vector<int> g = group(rank, axis);
  const int64_t n = int64_t(g.size());
  if (size <= 0 || size >= n || n % size != 0) return g;
  const int64_t first = coord(rank, axis) / size * size;
  return std::vector<int>(g.begin() + first, g.begin() + first + size);
}

std::optional<MeshAxis> Mesh::axisOfGroup(const std::vector<int>& g) const {
  if (g.size() < 2) return std::nullopt;
  for (MeshAxis a : {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp})
    if (axisSize(a) == int64_t(g.size()) && g[0] >= 0 && g[0] < worldSize() && group(g[0], a) == g) return a;
  return std::nullopt;
}

std::optional<MeshAxis> Mesh::axisBetween(int64_t a, int64_t b) const {
  if (a < 0 || b < 0 || a >= worldSize() || b >= worldSize()) return std::nullopt;
  std::optional<MeshAxis> found;
  for (MeshAxis ax : {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}) {
    if (coord(a, ax) == coord(b, ax)) continue;
    if (found) return std::nullopt;
    found = ax;
  }
  return found;
}

std::string Mesh::describe() const {
  std::string s = "dp=" + std::to_string(size[0]) + " tp=" + std::to_string(size[1]) + " pp=" +
                  std::to_string(size[2]) + ", rank_order [";
  for (size_t i = 0; i < 3; ++i) s += (i ? ", " : "") + std::string(meshAxisName(order[i]));
  return s + "]";
}

}  // namespace llcdist::rt
