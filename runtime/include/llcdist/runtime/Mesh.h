// The device mesh of a multi-rank plan (docs/plan-format.md "Multi-rank plans"): axis sizes, the rank
// order, rank <-> coordinates, and the group of a collective on one axis or on a set of axes ("dp+cp").
//
// Rank r has coordinate c[a] on axis a with r = Σ_a c[a]·stride[a]; the first axis of `order` varies
// fastest (stride 1), stride[next] = stride[prev]·size[prev]. The group of rank r on axis a is every
// rank that shares r's coordinates on the other axes, ordered by the coordinate on a (the member index).
// The group on a set of axes (Megatron's data-parallel group under context parallelism is dp × cp) is
// every rank that shares r's coordinates on the axes outside the set, ordered by global rank: the member
// index is the mixed-radix number of the set's coordinates, the set's fastest axis (in `order`) first.
//
// Expert parallelism (`ep`, dividing dp; docs/plan-format.md "Expert parallelism") adds two derived axes
// inside dp, never in `order`: kEp (stride(dp), size ep: coordinate d mod ep, d the dp coordinate) and
// kEdp (stride(dp)·ep, size dp/ep: coordinate d / ep). Both satisfy r = base + coord·stride like a base
// axis, so group, coord, withCoord and subGroup work on them unchanged. One of them may join base axes
// other than dp in a set ("edp+cp": the experts' data-parallel group under context parallelism, the
// ranks holding the same experts); a set's member index takes its axes by stride, fastest first.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt {

// Indices into schema::kMeshAxes (the base axes), then schema::kDerivedMeshAxes (kEp, kEdp: expert
// parallelism). kCp: context parallelism (the sequence split over ranks, Ulysses).
enum class MeshAxis { kDp = 0, kTp = 1, kPp = 2, kCp = 3, kEp = 4, kEdp = 5 };
inline constexpr size_t kNumMeshAxes = 4;     // the base axes (rank order, world size)
inline constexpr size_t kNumAllMeshAxes = 6;  // with the derived ep, edp
constexpr bool isDerivedAxis(MeshAxis a) { return a == MeshAxis::kEp || a == MeshAxis::kEdp; }
std::string_view meshAxisName(MeshAxis a);
std::optional<MeshAxis> parseMeshAxis(std::string_view name);

// A set of mesh axes, the group of one collective: "dp", or several names joined by '+' ("dp+cp").
struct AxisSet {
  unsigned bits = 0;  // bit MeshAxis (a derived axis never with dp or the other derived one)
  static AxisSet of(MeshAxis a) { return AxisSet{1u << unsigned(a)}; }
  bool has(MeshAxis a) const { return (bits >> unsigned(a)) & 1u; }
  bool empty() const { return bits == 0; }
  // The one axis of a single-axis set; nullopt for an empty set or several axes.
  std::optional<MeshAxis> single() const;
  bool operator==(const AxisSet& o) const { return bits == o.bits; }
  bool operator!=(const AxisSet& o) const { return bits != o.bits; }
};
// "dp", "dp+cp" (any order), "ep", "edp", "edp+cp"; nullopt for an empty name, an unknown one, an axis
// named twice, or a derived axis (ep, edp) in a set with dp or with the other derived axis.
std::optional<AxisSet> parseAxisSet(std::string_view name);
// The set's names in MeshAxis order (dp, tp, pp, cp) joined by '+': "dp+cp".
std::string axisSetName(AxisSet s);
// The forms parseAxisSet accepts, for error messages.
inline constexpr std::string_view kAxisSetForms =
    R"("dp", "tp", "pp", "cp", or several joined by '+', e.g. "dp+cp"; "ep" or "edp" (expert parallelism, parts of dp) alone or with axes other than dp, e.g. "edp+cp")";
// Why parseAxisSet refuses `name`, then the accepted forms: `unknown mesh axis "xx" in "dp+xx" (expected
// ...)`, `mesh axis "dp" is named twice in "dp+dp" (expected ...)`; empty when it parses.
std::string axisSetError(std::string_view name);

struct Mesh {
  std::array<int64_t, kNumMeshAxes> size = {1, 1, 1, 1};  // indexed by MeshAxis (the base axes)
  // Expert parallelism: the ep groups' size, a divisor of size[dp] (manifest.mesh.ep; 1: none).
  int64_t ep = 1;
  // Fastest first; a permutation of all four axes (an axis of size 1 may sit anywhere).
  std::array<MeshAxis, kNumMeshAxes> order = kDefaultOrder;
  // Megatron's order: tp, cp, dp, pp (with cp = 1 the same ranks as tp, dp, pp).
  static constexpr std::array<MeshAxis, kNumMeshAxes> kDefaultOrder = {MeshAxis::kTp, MeshAxis::kCp, MeshAxis::kDp,
                                                                       MeshAxis::kPp};
  // The four axes in MeshAxis order (dp, tp, pp, cp), for loops over every axis.
  static constexpr std::array<MeshAxis, kNumMeshAxes> kAllAxes = {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp,
                                                                  MeshAxis::kCp};

  static Mesh make(int64_t dp, int64_t tp, int64_t pp, int64_t cp = 1);  // default (Megatron) order
  // `order` from a rank_order of the three axes dp, tp, pp (cp then the slowest axis) or of all four;
  // false (order unchanged) when `axes` is no such permutation.
  bool setOrder(const std::vector<MeshAxis>& axes);
  int64_t axisSize(MeshAxis a) const {
    return a == MeshAxis::kEp ? ep : a == MeshAxis::kEdp ? size[size_t(MeshAxis::kDp)] / ep : size[size_t(a)];
  }
  int64_t worldSize() const { return size[0] * size[1] * size[2] * size[3]; }
  int64_t stride(MeshAxis a) const;
  int64_t coord(int64_t rank, MeshAxis a) const { return rank / stride(a) % axisSize(a); }
  // Global ranks of `rank`'s group on `axis`, in member order (rank is at index coord(rank, axis)).
  std::vector<int> group(int64_t rank, MeshAxis axis) const;
  // The sub-group of `size` consecutive members of that group that holds `rank` (all_reduce's
  // group_size: kv-head replicas); the whole group when `size` is not a proper divisor of the axis.
  std::vector<int> subGroup(int64_t rank, MeshAxis axis, int64_t size) const;
  // The same on a set of axes: the product of their sizes; `rank`'s member index (its position in its
  // group); the group (global ranks in member order); the sub-group of `size` consecutive members.
  int64_t axisSize(AxisSet s) const;
  // The set's axes by stride, fastest first (the digits of the member index, least significant first).
  std::vector<MeshAxis> fastestFirst(AxisSet s) const;
  int64_t coord(int64_t rank, AxisSet s) const;
  std::vector<int> group(int64_t rank, AxisSet s) const;
  std::vector<int> subGroup(int64_t rank, AxisSet s, int64_t size) const;
  // The axis along which `group` (>= 2 ranks) varies with every other coordinate fixed and members
  // in coordinate order; nullopt when it is no such group.
  std::optional<MeshAxis> axisOfGroup(const std::vector<int>& group) const;
  // The set of axes whose group (Mesh::group on a set) `group` (>= 2 ranks) is, members in that order:
  // a single axis when one fits (axisOfGroup), else the smallest set of two or more axes ("dp+cp");
  // nullopt when it is no such group (e.g. a group_size sub-group). Names groups in messages.
  std::optional<AxisSet> axisSetOfGroup(const std::vector<int>& group) const;
  // The rank with `rank`'s coordinates except coordinate `c` on `axis` (the peer of a send/recv).
  int64_t withCoord(int64_t rank, MeshAxis axis, int64_t c) const {
    return rank + (c - coord(rank, axis)) * stride(axis);
  }
  // The one axis on which ranks a and b (both in the world) differ; nullopt when they differ on none or
  // on several.
  std::optional<MeshAxis> axisBetween(int64_t a, int64_t b) const;
  // "dp=2 tp=2 pp=1, rank_order [tp, dp, pp]"; with cp > 1 "dp=2 tp=2 pp=1 cp=2, rank_order [tp, cp, dp,
  // pp]" (cp is named only when it is > 1, and then the order lists it); with ep > 1 "dp=4 tp=1 pp=1
  // ep=2, rank_order [...]" (ep after cp).
  std::string describe() const;
};

}  // namespace llcdist::rt
