// Private: parsing and validating one op of a program (roles, dtypes, attrs, element counts, aliasing).
#pragma once

#include "PlanJson.h"
#include "llcdist/runtime/Plan.h"

namespace llcdist::rt::planops {

// Parses ops[j] at `path` against PlanSchema's table; `prog` must already hold all buffers.
Status parseOp(const planjson::Doc& doc, const planjson::json& j, const std::string& path, const Program& prog,
               const Manifest& manifest, Op* out);

}  // namespace llcdist::rt::planops
