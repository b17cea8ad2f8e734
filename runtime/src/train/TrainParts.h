// Private pieces of the training driver (Train.h): parameter init/import/export and data sources.
#pragma once

#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <string>

namespace llcdist::rt::train {

// Writes every param's initial value into its buffer: from the manifest's init under `seed`, or from
// the safetensors file `initFrom` when it is not empty (see Train.h for the rules).
Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom);
// Writes every param as F32 to `path` (atomically).
Status saveParams(const Manifest& manifest, Interpreter& interp, const std::string& path);

// The microbatch source for `data` ("synthetic" or an llm.c token file), data-parallel rank 0.
StatusOr<MicrobatchSource> makeDataSource(const Manifest& manifest, const std::string& data, bool shuffle,
                                          uint64_t seed);

}  // namespace llcdist::rt::train
