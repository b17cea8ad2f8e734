//===- MeshSpec.cpp - the --mesh spec -------------------------------------===//
#include "llcdist/Support/MeshSpec.h"

#include <algorithm>
#include <charconv>

using namespace llcdist;

namespace {
/// The largest world size a mesh may have: the runtime's plan loader refuses
/// a larger one (runtime/src/Plan.cpp), and every rank computation on a mesh
/// stays far from int64 overflow (issue #16: the fuzzer's dp × tp × pp
/// overflowed in MeshSpec::worldSize).
constexpr int64_t kMaxMeshWorldSize = int64_t(1) << 24;
} // namespace

std::string MeshSpec::str() const {
  return "dp=" + std::to_string(dp) + ",tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) +
         (cp > 1 ? ",cp=" + std::to_string(cp) : std::string()) +
         (ep > 1 ? ",ep=" + std::to_string(ep) : std::string());
}

int64_t MeshSpec::size(const std::string &axis) const {
  return axisSetSize(axis, [&](std::string_view a) -> int64_t { return axisDegree(a, dp, tp, pp, cp, ep); });
}

int64_t MeshSpec::rank(int64_t dpc, int64_t tpc, int64_t ppc, int64_t cpc) const {
  int64_t r = 0, stride = 1;
  for (const std::string &a : rankOrder) {
    r += (a == "dp" ? dpc : a == "tp" ? tpc : a == "cp" ? cpc : ppc) * stride;
    stride *= size(a);
  }
  return r;
}

std::string MeshSpec::rankOrderStr() const {
  std::string s;
  for (const std::string &a : rankOrder)
    s += (s.empty() ? "" : ",") + a;
  return s;
}

std::optional<std::string> llcdist::parseRankOrder(std::string_view spec,
                                                   MeshSpec &out) {
  std::vector<std::string> axes;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos)
      end = spec.size();
    axes.emplace_back(spec.substr(pos, end - pos));
    pos = end + 1;
  }
  auto has = [&](const char *a) {
    return std::count(axes.begin(), axes.end(), a) == 1;
  };
  bool three = axes.size() == 3 && has("dp") && has("tp") && has("pp");
  bool four = axes.size() == 4 && has("dp") && has("tp") && has("pp") && has("cp");
  if (out.cp > 1 && !four)
    return "invalid --rank-order '" + std::string(spec) + "': the mesh has cp=" + std::to_string(out.cp) +
           ", so the order must be a permutation of dp, tp, pp, cp, "
           "fastest-varying first (Megatron's default is tp,cp,dp,pp)";
  if (!three && !four)
    return "invalid --rank-order '" + std::string(spec) +
           "': expected a permutation of dp, tp, pp (and cp), fastest-varying "
           "first (Megatron's default is tp,dp,pp)";
  out.rankOrder = axes;
  return std::nullopt;
}

std::optional<std::string> llcdist::parseMeshSpec(std::string_view spec,
                                                  MeshSpec &out) {
  auto fail = [&](const std::string &why) {
    return "invalid --mesh '" + std::string(spec) + "': " + why +
           " (expected e.g. dp=2,tp=4,pp=1 with axes dp, tp, pp, cp, and ep dividing dp)";
  };
  MeshSpec m;
  bool seen[5] = {false, false, false, false, false};
  if (spec.empty())
    return fail("empty");
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos)
      end = spec.size();
    std::string_view item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return fail("'" + std::string(item) + "' is not AXIS=DEGREE");
    std::string_view axis = item.substr(0, eq), value = item.substr(eq + 1);
    int idx = axis == "dp" ? 0 : axis == "tp" ? 1 : axis == "pp" ? 2 : axis == "cp" ? 3 : axis == "ep" ? 4 : -1;
    if (idx < 0)
      return fail("unknown axis '" + std::string(axis) + "'");
    if (seen[idx])
      return fail("axis '" + std::string(axis) + "' given twice");
    seen[idx] = true;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size() || value.empty())
      return fail("degree '" + std::string(value) + "' of " +
                  std::string(axis) + " is not an integer");
    if (v < 1)
      return fail("degree of " + std::string(axis) + " must be >= 1");
    if (v > kMaxMeshWorldSize)
      return fail("degree of " + std::string(axis) + " must be at most " +
                  std::to_string(kMaxMeshWorldSize));
    (idx == 0 ? m.dp : idx == 1 ? m.tp : idx == 2 ? m.pp : idx == 3 ? m.cp : m.ep) = v;
    pos = end + 1;
  }
  // Each degree is at most 2^24, so no partial product below overflows once
  // the one before it is at most 2^24.
  if (m.dp * m.tp > kMaxMeshWorldSize || m.dp * m.tp * m.pp > kMaxMeshWorldSize ||
      m.dp * m.tp * m.pp * m.cp > kMaxMeshWorldSize)
    return fail("world size dp × tp × pp × cp must be at most " + std::to_string(kMaxMeshWorldSize));
  if (m.dp % m.ep != 0)
    return fail("ep=" + std::to_string(m.ep) + " must divide dp=" + std::to_string(m.dp) +
                ": expert-parallel ranks are drawn from the data-parallel group (Megatron's), so set dp to a "
                "multiple of ep");
  if (m.cp > 1) // Megatron's order: tp innermost, then cp, dp, pp
    m.rankOrder = {"tp", "cp", "dp", "pp"};
  out = m;
  return std::nullopt;
}
