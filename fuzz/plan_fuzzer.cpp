// The runtime's plan loader (runtime/src/Plan.cpp): what loadPlan does with a plan directory, on text.
//
// Input: manifest.json's text, optionally followed by a NUL byte and program-0.json's text (the seeds
// are compiled plans joined so). The manifest goes through parseManifest; when it is accepted and a
// program follows, the program goes through parseProgram against it and, when that is accepted too,
// validateParams (the cross-check loadPlan makes of every param placement). Each returns a Status
// and must never crash, throw, hang or allocate hugely.
#include "llcdist/runtime/Plan.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(text, '\0', size));
  const std::string manifestText(text, nul ? size_t(nul - text) : size);
  auto manifest = llcdist::rt::parseManifest(manifestText, "manifest.json");
  if (!manifest.isOk() || !nul)
    return 0;
  const std::string programText(nul + 1, size_t(text + size - (nul + 1)));
  auto program = llcdist::rt::parseProgram(programText, "program-0.json", manifest.value());
  if (!program.isOk())
    return 0;
  (void)llcdist::rt::validateParams(manifest.value(), program.value(), 0);
  return 0;
}
