// Mesh coordinates and collective groups. See Mesh.h.
#include "llcdist/runtime/Mesh.h"

#include "llcdist/runtime/PlanSchema.h"

#include <algorithm>

namespace llcdist::rt {

std::string_view meshAxisName(MeshAxis a) {
  const size_t i = size_t(a);
  return i < kNumMeshAxes ? schema::kMeshAxes[i] : schema::kDerivedMeshAxes[i - kNumMeshAxes];
}

std::optional<MeshAxis> parseMeshAxis(std::string_view name) {
  for (size_t i = 0; i < schema::kMeshAxes.size(); ++i)
    if (schema::kMeshAxes[i] == name) return MeshAxis(i);
  for (size_t i = 0; i < schema::kDerivedMeshAxes.size(); ++i)
    if (schema::kDerivedMeshAxes[i] == name) return MeshAxis(kNumMeshAxes + i);
  return std::nullopt;
}

std::optional<MeshAxis> AxisSet::single() const {
  for (size_t i = 0; i < kNumAllMeshAxes; ++i)
    if (bits == of(MeshAxis(i)).bits) return MeshAxis(i);
  return std::nullopt;
}

namespace {
// A derived axis (ep, edp: parts of dp) combines with base axes other than dp, and not with the other.
bool derivedAxesFit(AxisSet s) {
  const bool derived = s.has(MeshAxis::kEp) || s.has(MeshAxis::kEdp);
  return !derived || (!s.has(MeshAxis::kDp) && !(s.has(MeshAxis::kEp) && s.has(MeshAxis::kEdp)));
}
}  // namespace

std::optional<AxisSet> parseAxisSet(std::string_view name) {
  AxisSet s;
  while (true) {
    const size_t plus = name.find('+');
    auto a = parseMeshAxis(name.substr(0, plus));
    if (!a || s.has(*a)) return std::nullopt;
    s.bits |= AxisSet::of(*a).bits;
    if (plus == std::string_view::npos) return derivedAxesFit(s) ? std::optional<AxisSet>(s) : std::nullopt;
    name.remove_prefix(plus + 1);
  }
}

std::string axisSetName(AxisSet s) {
  std::string name;
  for (size_t i = 0; i < kNumAllMeshAxes; ++i)
    if (const MeshAxis a = MeshAxis(i); s.has(a)) name += (name.empty() ? "" : "+") + std::string(meshAxisName(a));
  return name;
}

std::string axisSetError(std::string_view name) {
  if (parseAxisSet(name)) return "";
  const std::string whole(name), in = name.find('+') == std::string_view::npos ? "" : " in \"" + whole + "\"";
  const std::string expected = " (expected " + std::string(kAxisSetForms) + ")";
  AxisSet seen;
  while (true) {
    const size_t plus = name.find('+');
    const std::string_view part = name.substr(0, plus);
    auto a = parseMeshAxis(part);
    if (part.empty()) return "empty mesh axis name" + (in.empty() ? " \"\"" : in) + expected;
    if (!a) return "unknown mesh axis \"" + std::string(part) + "\"" + in + expected;
    if (seen.has(*a)) return "mesh axis \"" + std::string(part) + "\" is named twice" + in + expected;
    seen.bits |= AxisSet::of(*a).bits;
    if (!derivedAxesFit(seen))  // only in a set of several (alone every axis parses)
      return "\"" + whole + "\" names dp twice: ep and edp are parts of dp (ep × edp = dp), so a set " +
             "holds at most one of them, and not dp" + expected;
    if (plus == std::string_view::npos) return "invalid mesh axes \"" + whole + "\"" + expected;  // not reached
    name.remove_prefix(plus + 1);
  }
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
  if (a == MeshAxis::kEp) return stride(MeshAxis::kDp);
  if (a == MeshAxis::kEdp) return stride(MeshAxis::kDp) * ep;
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
  return subGroup(rank, AxisSet::of(axis), size);
}

std::vector<MeshAxis> Mesh::fastestFirst(AxisSet s) const {
  // By stride, ties (axes of size 1) in `order`; a derived axis sits where dp does (ep below edp).
  auto rankOf = [&](MeshAxis a) {
    const MeshAxis base = isDerivedAxis(a) ? MeshAxis::kDp : a;
    const size_t at = size_t(std::find(order.begin(), order.end(), base) - order.begin());
    return std::make_pair(stride(a), 2 * at + (a == MeshAxis::kEdp ? 1 : 0));
  };
  std::vector<MeshAxis> axes;
  for (size_t i = 0; i < kNumAllMeshAxes; ++i)
    if (s.has(MeshAxis(i))) axes.push_back(MeshAxis(i));
  std::sort(axes.begin(), axes.end(), [&](MeshAxis a, MeshAxis b) { return rankOf(a) < rankOf(b); });
  return axes;
}

int64_t Mesh::axisSize(AxisSet s) const {
  if (auto a = s.single()) return axisSize(*a);
  int64_t n = 1;
  for (size_t i = 0; i < kNumAllMeshAxes; ++i)
    if (s.has(MeshAxis(i))) n *= axisSize(MeshAxis(i));
  return n;
}

int64_t Mesh::coord(int64_t rank, AxisSet s) const {
  if (auto a = s.single()) return coord(rank, *a);
  int64_t c = 0, radix = 1;
  for (MeshAxis a : fastestFirst(s)) {  // the member index grows with the global rank
    c += coord(rank, a) * radix;
    radix *= axisSize(a);
  }
  return c;
}

std::vector<int> Mesh::group(int64_t rank, AxisSet s) const {
  if (auto a = s.single()) return group(rank, *a);
  const std::vector<MeshAxis> axes = fastestFirst(s);
  int64_t base = rank;
  for (MeshAxis a : axes) base -= coord(rank, a) * stride(a);
  std::vector<int> g;
  const int64_t n = axisSize(s);
  for (int64_t m = 0; m < n; ++m) {  // m's mixed-radix digits over the set's axes, fastest first
    int64_t r = base, rest = m;
    for (MeshAxis a : axes) {
      r += rest % axisSize(a) * stride(a);
      rest /= axisSize(a);
    }
    g.push_back(int(r));
  }
  return g;
}

std::vector<int> Mesh::subGroup(int64_t rank, AxisSet s, int64_t size) const {
  std::vector<int> g = group(rank, s);
  const int64_t n = int64_t(g.size());
  if (size <= 0 || size >= n || n % size != 0) return g;
  const int64_t first = coord(rank, s) / size * size;
  return std::vector<int>(g.begin() + first, g.begin() + first + size);
}

std::optional<MeshAxis> Mesh::axisOfGroup(const std::vector<int>& g) const {
  if (g.size() < 2) return std::nullopt;
  for (MeshAxis a : kAllAxes)
    if (axisSize(a) == int64_t(g.size()) && g[0] >= 0 && g[0] < worldSize() && group(g[0], a) == g) return a;
  if (ep > 1)  // the derived axes, after the base ones (ep = dp names dp, edp with ep = 1 is dp)
    for (MeshAxis a : {MeshAxis::kEp, MeshAxis::kEdp})
      if (axisSize(a) == int64_t(g.size()) && g[0] >= 0 && g[0] < worldSize() && group(g[0], a) == g) return a;
  return std::nullopt;
}

std::optional<AxisSet> Mesh::axisSetOfGroup(const std::vector<int>& g) const {
  if (auto a = axisOfGroup(g)) return AxisSet::of(*a);
  if (g.size() < 2 || g[0] < 0 || g[0] >= worldSize()) return std::nullopt;
  // Sets of k = 2, 3, 4 axes: the smallest that fits has no axis of size 1, so it is the only one of its k
  // (the base axes first; with ep > 1 also those with a derived axis, e.g. edp+cp).
  const unsigned all = (1u << (ep > 1 ? kNumAllMeshAxes : kNumMeshAxes)) - 1;
  for (int k = 2; k <= int(kNumMeshAxes); ++k)
    for (unsigned bits = 1; bits <= all; ++bits) {
      const AxisSet s{bits};
      if (__builtin_popcount(bits) == k && derivedAxesFit(s) && axisSize(s) == int64_t(g.size()) && group(g[0], s) == g)
        return s;
    }
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
                  (ep > 1 ? " ep=" + std::to_string(ep) : std::string()) + ", rank_order [";
  bool first = true;
  for (MeshAxis a : order) {
    if (a == MeshAxis::kCp && !cp) continue;
    s += (first ? "" : ", ") + std::string(meshAxisName(a));
    first = false;
  }
  return s + "]";
}

}  // namespace llcdist::rt
