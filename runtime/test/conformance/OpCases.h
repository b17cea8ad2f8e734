// The op cases of the backend conformance suite (OpCases.cpp).
#pragma once

#include "Backends.h"

#include <set>
#include <string>

namespace llcdist::rt::conformance {

// Runs every op case through an interpreter on `backend` (bf16: every float buffer stored in bf16),
// each against its CPU kernel on the same data; failures are reported as gtest failures. Returns the
// op kinds covered.
std::set<std::string> runEveryOpCase(const BackendUnderTest& backend, bool bf16);

}  // namespace llcdist::rt::conformance
