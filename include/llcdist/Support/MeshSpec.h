//===- MeshSpec.h - the --mesh dp=..,tp=..,pp=.. spec ----------*- C++ -*-===//
#ifndef LLCDIST_SUPPORT_MESHSPEC_H
#define LLCDIST_SUPPORT_MESHSPEC_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist {

/// A device mesh over the axes dp, tp and pp (unnamed axes are 1).
struct MeshSpec {
  int64_t dp = 1, tp = 1, pp = 1;
  /// Axes from fastest- to slowest-varying in the rank number; Megatron's
  /// default keeps tensor-parallel groups on consecutive ranks (one node).
  std::vector<std::string> rankOrder = {"tp", "dp", "pp"};
  int64_t worldSize() const { return dp * tp * pp; }
  int64_t size(const std::string &axis) const;
  /// The rank with coordinates {dp, tp, pp}.
  int64_t rank(int64_t dpc, int64_t tpc, int64_t ppc) const;
  std::string str() const;          ///< "dp=2,tp=4,pp=1"
  std::string rankOrderStr() const; ///< "tp,dp,pp"
};

/// Parses "dp=2,tp=4" (any order, each axis at most once, degrees >= 1).
/// On failure returns a message that quotes the spec and says the fix.
std::optional<std::string> parseMeshSpec(std::string_view spec, MeshSpec &out);

/// Parses "tp,dp,pp" (a permutation of the three axes) into out.rankOrder.
std::optional<std::string> parseRankOrder(std::string_view spec, MeshSpec &out);

} // namespace llcdist

#endif
