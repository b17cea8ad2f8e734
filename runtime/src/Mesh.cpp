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

Mesh Mesh::make(int64_t dp, int64_t tp, int64_t pp, int64_t cp) {
  Mesh m;
  m.size = {dp, tp, pp, cp};
  return m;
}

bool Mesh::setOrder(const std::vector<MeshAxis>& axes) {
  if (axes.size() != kNumMeshAxes && axes.size() != kNumMeshAxes - 1) return false;
  std::array<bool, kNumMeshAxes> seen{};
  std::array<MeshAxis, kNumMeshAxes> o = {};
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = size_t(axes[i]);
    if (a >= kNumMeshAxes || seen[a]) return false;
    seen[a] = true;
    o[i] = axes[i];
  }
  if (axes.size() == kNumMeshAxes - 1) {
    if (seen[size_t(MeshAxis::kCp)]) return false;  // three names: dp, tp, pp
    o[kNumMeshAxes - 1] = MeshAxis::kCp;
  }
  order = o;
  return true;
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
  for (MeshAxis a : kAllAxes)
    if (axisSize(a) == int64_t(g.size()) && g[0] >= 0 && g[0] < worldSize() && group(g[0], a) == g) return a;
  return std::nullopt;
}

std::optional<MeshAxis> Mesh::axisBetween(int64_t a, int64_t b) const {
  if (a < 0 || b < 0 || a >= worldSize() || b >= worldSize()) return std::nullopt;
  std::optional<MeshAxis> found;
  for (MeshAxis ax : kAllAxes) {
    if (coord(a, ax) == coord(b, ax)) continue;
    if (found) return std::nullopt;
    found = ax;
  }
  return found;
}

std::string Mesh::describe() const {
  // cp is named only when it is > 1, so a mesh without context parallelism reads as before.
  const bool cp = axisSize(MeshAxis::kCp) > 1;
  std::string s = "dp=" + std::to_string(size[0]) + " tp=" + std::to_string(size[1]) +
                  " pp=" + std::to_string(size[2]) + (cp ? " cp=" + std::to_string(size[3]) : std::string()) +
                  ", rank_order [";
  bool first = true;
  for (MeshAxis a : order) {
    if (a == MeshAxis::kCp && !cp) continue;
    s += (first ? "" : ", ") + std::string(meshAxisName(a));
    first = false;
  }
  return s + "]";
}

}  // namespace llcdist::rt
