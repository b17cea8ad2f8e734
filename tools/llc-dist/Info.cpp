//===- Info.cpp - llc-dist info -------------------------------------------===//
//
//   llc-dist info MODEL [--seq-len N] [--format json]
//
// The model's parameters, layers and FLOPs per token, as the compiler counts
// them (llcdist-model-stats), checked against the architecture's formula.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"
#include "Compile.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/CompileSummary.h"
#include "llcdist/Pipelines/ModelInfo.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::cli;

const char *const llcdist::cli::kInfoHelp = R"(llc-dist info MODEL [options]

Prints the parameter count (counted on the imported IR and checked against
the architecture's formula), layers, and training FLOPs per token:
  training FLOPs/token = 3 × (Σ_linear 2·K·N + Σ_attention 4·S·heads·head_dim)
(backward = 2 × forward; no recomputation; attention counts the full S×S).

OPTIONS
  --seq-len N            sequence length S for the attention FLOPs
                         (default min(max positions, 1024))
  --format text|json     output format (default text)
)";

int llcdist::cli::runInfo(Args &args) {
  std::string model, format = "text";
  TrainingShape shape;
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kInfoHelp;
      return 0;
    }
    if (auto v = args.value(a, "--seq-len"))
      shape.seqLen = parseInt("--seq-len", *v);
    else if (auto v = args.value(a, "--format"))
      format = *v;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"info: unknown option '" + a + "'"};
    else if (model.empty())
      model = a;
    else
      throw UsageError{"info: more than one MODEL given ('" + model + "', '" + a + "')"};
  }
  if (model.empty())
    throw UsageError{"info: missing MODEL (e.g. models/gpt2.json)"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  llvm::SourceMgr srcMgr;
  SourceMgrDiagnosticHandler diag(srcMgr, &ctx);
  auto lm = loadOrReport(ctx, srcMgr, model, shape, /*dp=*/1);
  if (!lm)
    return kExitError;
  FailureOr<xf::ModelStats> s = xf::computeModelStats(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;

  ModelInfo info{modelName(*lm->module), model, lm->config, *s};
  if (format == "json")
    llvm::outs() << info.toJson().dump(2) << "\n";
  else
    info.print(llvm::outs());
  return 0;
}
