// An xf module given to `llc-dist compile FILE.mlir` (a hand-edited `--emit xf` output): what the
// compile command does with it, on text. The nesting bound (NestingDepth.h), MLIR's parser into
// llc-dist's dialects, the verifier, the training pipeline to a plan (with the plan verifier the
// command runs) and the reports the command computes from the module (model statistics, memory,
// pipeline, communication). Each step may refuse the input with a diagnostic; a crash, UB, an
// uncaught exception, a hang or a huge allocation is a finding.
//
// Input: the module's text. A first line `// mesh dp=D,tp=T,pp=P` (a comment to MLIR, so every
// input stays a valid .mlir file) sets `--mesh`, as on the command line; without it the mesh is
// 1×1×1. The seeds are the shipped tiny models' `--emit xf` outputs (fuzz/make_seeds.py).
//
// Not built with the other targets: it needs MLIR and the whole compiler, instrumented, so
// scripts/fuzz.sh builds it only when named (`scripts/fuzz.sh xf_module`), configuring the main
// project with clang and -DLLCDIST_FUZZ_XF=ON into build-fuzz-xf/ (docs/fuzzing.md).
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/Analysis/MemoryReport.h"
#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/CompileSummary.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/NestingDepth.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace mlir;
using namespace llcdist;

namespace {
/// The largest world the target compiles for: the pipeline's work grows with it, and the seeds'
/// meshes have at most 4 ranks.
constexpr int64_t kMaxWorld = 8;

/// `--mesh` from the input's first line (see the file comment), or nullopt when it has a bad one.
std::optional<MeshSpec> meshOf(llvm::StringRef text) {
  MeshSpec mesh;
  constexpr llvm::StringRef kPrefix = "// mesh ";
  if (!text.starts_with(kPrefix))
    return mesh;
  llvm::StringRef spec = text.drop_front(kPrefix.size()).take_until([](char c) { return c == '\n'; });
  if (parseMeshSpec(spec.str(), mesh) || mesh.worldSize() > kMaxWorld)
    return std::nullopt;
  return mesh;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  std::optional<MeshSpec> mesh = meshOf(text);
  if (!mesh || checkNestingDepth(text))
    return 0;
  // A context per input, as each `compile` has: uniqued attributes do not pile up across inputs.
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });

  // As loadModel reads a file: a NUL-terminated copy in a SourceMgr (MLIR's lexer stops at the NUL).
  llvm::SourceMgr srcMgr;
  srcMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, "fuzz.mlir"), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(srcMgr, ParserConfig(&ctx));
  if (!module || failed(verify(*module)))
    return 0;
  TrainingPipelineOptions train;
  train.mesh = {mesh->dp, mesh->tp, mesh->pp, mesh->cp, mesh->rankOrderStr(), mesh->ep};
  PlanJson verified; // the plan verifier's JSON, as compile keeps it for the plan's files
  train.verifiedPlan = &verified;
  PassManager pm(&ctx, ModuleOp::getOperationName());
  buildTrainingPipeline(pm, train);
  if (failed(pm.run(*module)) || failed(verify(*module)))
    return 0;
  // The command's reports, in its order (tools/llc-dist/Compile.cpp: CompileCommand::write).
  if (failed(recordedModelStats(*module)))
    return 0;
  (void)plan::computeStageMemory(*module);
  if (failed(plan::computePipelineReport(*module)))
    return 0;
  (void)plan::computeCommReport(*module);
  return 0;
}
