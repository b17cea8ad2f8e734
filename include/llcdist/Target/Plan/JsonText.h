//===- JsonText.h - plan JSON as text, streamed --------------*- C++ -*-===//
//
// The text of a plan file: exactly what nlohmann's dump(1) gives (one
// space of indent per level), written straight to a stream. A program's
// arrays grow with the microbatch count (slot_offsets, actions); dump
// formats each element through a virtual output adapter and a growing
// string, this writes integers and plain strings itself and hands only
// other leaves (floats, strings that need escapes) to nlohmann.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_TARGET_PLAN_JSONTEXT_H
#define LLCDIST_TARGET_PLAN_JSONTEXT_H

#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

namespace llcdist {

/// Writes j.dump(1) to `os` (no trailing newline). Throws as dump does
/// (a string that is not UTF-8).
void writeJsonText(llvm::raw_ostream &os, const nlohmann::ordered_json &j);

} // namespace llcdist

#endif // LLCDIST_TARGET_PLAN_JSONTEXT_H
