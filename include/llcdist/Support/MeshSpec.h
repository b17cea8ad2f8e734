//===- MeshSpec.h - the --mesh dp=..,tp=..,pp=.. spec ----------*- C++ -*-===//
#ifndef LLCDIST_SUPPORT_MESHSPEC_H
#define LLCDIST_SUPPORT_MESHSPEC_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llcdist {

/// A device mesh over the axes dp, tp and pp (unnamed axes are 1).
struct MeshSpec {
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t worldSize() const { return dp * tp * pp; }
  std::string str() const; ///< "dp=2,tp=4,pp=1"
};

/// Parses "dp=2,tp=4" (any order, each axis at most once, degrees >= 1).
/// On failure returns a message that quotes the spec and says the fix.
std::optional<std::string> parseMeshSpec(std::string_view spec, MeshSpec &out);

} // namespace llcdist

#endif
