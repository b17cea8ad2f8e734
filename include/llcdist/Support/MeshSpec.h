//===- MeshSpec.h - the --mesh dp=..,tp=..,pp=.. spec ----------*- C++ -*-===//
#ifndef LLCDIST_SUPPORT_MESHSPEC_H
#define LLCDIST_SUPPORT_MESHSPEC_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist {

/// The size of an axis set: one mesh axis ("tp") or several joined by '+'
/// ("dp+cp", their product group), `degreeOf(name)` giving each axis' degree
/// (0 for a name that is no axis). The one reading of the names the mesh,
/// the xf mesh degrees and the compile report share.
template <typename DegreeOf> int64_t axisSetSize(std::string_view set, DegreeOf degreeOf) {
  int64_t n = 1;
  for (size_t start = 0;;) {
    size_t plus = set.find('+', start);
    n *= int64_t(degreeOf(set.substr(start, plus == std::string_view::npos ? plus : plus - start)));
    if (plus == std::string_view::npos)
      return n;
    start = plus + 1;
  }
}

/// The degree of the axis named `a` on a mesh of these degrees: dp, tp, pp,
/// cp, ep, and edp (dp / ep, expert parallelism's replicas); 0 for a name
/// that is no axis. MeshSpec::size and the xf mesh degrees read it.
inline int64_t axisDegree(std::string_view a, int64_t dp, int64_t tp, int64_t pp, int64_t cp, int64_t ep) {
  return a == "dp" ? dp : a == "tp" ? tp : a == "pp" ? pp : a == "cp" ? cp : a == "ep" ? ep : a == "edp" ? dp / ep : 0;
}

/// The data-parallel group's axes as the compiler names them: gradients
/// reduce over it in one collective and ZeRO shards over it. Under context
/// parallelism it is dp × cp (Megatron's): "dp+cp", "cp" when dp is 1;
/// otherwise "dp" (also when both are 1).
inline std::string dataParallelAxis(int64_t dp, int64_t cp) {
  return dp > 1 && cp > 1 ? "dp+cp" : cp > 1 ? "cp" : "dp";
}

/// The experts' data-parallel group's axes (expert parallelism, ep dividing
/// dp): the ranks holding one expert shard, its dp / ep replicas ("edp") and
/// under context parallelism every cp rank: "edp+cp", "cp" when ep = dp;
/// otherwise "edp". An expert's gradient reduces over it and ZeRO shards it
/// there.
inline std::string expertDataParallelAxis(int64_t dp, int64_t ep, int64_t cp) {
  return cp == 1 ? "edp" : dp / ep == 1 ? "cp" : "edp+cp";
}

/// A device mesh over the axes dp, tp, pp and cp (context parallelism;
/// unnamed axes are 1). A mesh without cp (cp = 1) is the three-axis mesh it
/// always was: its rank order names dp, tp and pp only.
///
/// Expert parallelism (`ep`, mixture of experts) is no axis of its own: as
/// in Megatron-LM its ranks are drawn from the data-parallel group. ep
/// divides dp; the ep group of a rank is the ep consecutive members of its dp
/// group that hold it (the experts are split over them), and the "edp"
/// group (expert data parallelism) the dp / ep members with the same index
/// in their ep group (the replicas of one expert shard, over which its
/// gradients reduce). The rank order never names them.
struct MeshSpec {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;
  /// Axes from fastest- to slowest-varying in the rank number; Megatron's
  /// default keeps tensor-parallel groups on consecutive ranks (one node).
  /// With cp > 1 it names cp too (Megatron's order: tp, cp, dp, pp).
  std::vector<std::string> rankOrder = {"tp", "dp", "pp"};
  /// Expert parallelism: a divisor of dp (see above); 1 without experts.
  int64_t ep = 1;
  int64_t worldSize() const { return dp * tp * pp * cp; }
  /// The data-parallel group's size (dp × cp) and axes (dataParallelAxis).
  int64_t dataParallelGroup() const { return dp * cp; }
  std::string gradientAxis() const { return dataParallelAxis(dp, cp); }
  /// One axis' degree, or a set's joined by '+' ("dp+cp": the product);
  /// also "ep" and "edp" (dp / ep).
  int64_t size(const std::string &axis) const;
  /// The rank with coordinates {dp, tp, pp, cp}.
  int64_t rank(int64_t dpc, int64_t tpc, int64_t ppc, int64_t cpc = 0) const;
  std::string str() const;          ///< "dp=2,tp=4,pp=1" (",cp=2" when cp > 1, ",ep=2" when ep > 1)
  std::string rankOrderStr() const; ///< "tp,dp,pp"
};

/// Parses "dp=2,tp=4" (any order, each axis at most once, degrees >= 1;
/// "ep=2" must divide dp).
/// With cp > 1 the rank order becomes Megatron's tp,cp,dp,pp.
/// On failure returns a message that quotes the spec and says the fix.
std::optional<std::string> parseMeshSpec(std::string_view spec, MeshSpec &out);

/// Parses "tp,dp,pp" (a permutation of dp, tp, pp — and cp, which it must
/// name when out.cp > 1) into out.rankOrder.
std::optional<std::string> parseRankOrder(std::string_view spec, MeshSpec &out);

} // namespace llcdist

#endif
