//===- NestingDepth.h - the nesting bound on .mlir text --------*- C++ -*-===//
//
// MLIR's parser recurses once per level of bracket nesting, so an attribute
// nested 100,000 deep (`[[[[...]]]]`) overflows the stack before any
// diagnostic. Every tool that parses .mlir text (llc-dist-opt, llc-dist
// compile FILE.mlir through loadModel) scans it first and refuses a file
// nested deeper than kMaxMlirNestingDepth. MLIR-free: standard library only.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_NESTINGDEPTH_H
#define LLCDIST_SUPPORT_NESTINGDEPTH_H

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace llcdist {

/// Far above any IR llc-dist writes or reads (a few dozen levels), far below
/// the depth at which MLIR's recursive parser overflows an 8 MiB stack.
inline constexpr size_t kMaxMlirNestingDepth = 512;

/// Where the text first nests deeper than `limit`.
struct NestingError {
  size_t line = 0, column = 0; ///< 1-based, of the bracket opening level limit + 1
  size_t limit = 0;
  /// "FILE:LINE:COL: nested deeper than LIMIT levels ... (the fix)".
  std::string describe(const std::string &file) const;
};

/// Scans MLIR text for the nesting depth of ( ) [ ] { } < > (the `>` of an
/// arrow `->` and of `>=` closes nothing), skipping string literals and
/// `//` comments; the first bracket that opens level limit + 1 is an error.
/// Linear in the text, no recursion.
std::optional<NestingError>
checkNestingDepth(std::string_view text, size_t limit = kMaxMlirNestingDepth);

} // namespace llcdist

#endif
