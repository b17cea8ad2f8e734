// Private: parsing and validating one op of a program (roles, dtypes, attrs, element counts, aliasing).
#pragma once

#include "PlanJson.h"
#include "llcdist/runtime/Plan.h"

#include <set>
#include <utility>

namespace llcdist::rt::planops {

// Parses ops[j] at `path` against PlanSchema's table; `prog` must already hold all buffers.
Status parseOp(const planjson::Doc& doc, const planjson::json& j, const std::string& path, const Program& prog,
               const Manifest& manifest, Op* out);

// An action's `slot` (at `path`) for subroutines[subroutine]: every slotted buffer its ops use has an instance
// `slot` (a subroutine without slotted buffers runs the same in every slot), and the aliasing rule holds for
// each op on those instances. Each (subroutine, slot) pair is checked
// once (`checked`); slot 0 is what parseOp checked.
Status checkSlot(const planjson::Doc& doc, const std::string& path, const Program& prog, size_t subroutine,
                 int64_t slot, std::set<std::pair<size_t, int64_t>>* checked);

}  // namespace llcdist::rt::planops
