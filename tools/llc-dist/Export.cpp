//===- Export.cpp - llc-dist export CHECKPOINT ----------------------------===//
//
// A checkpoint of `llc-dist run --checkpoint-dir` as a Hugging Face model
// directory (config.json + safetensors that transformers loads unchanged), or
// a summary of what it holds (Checkpoint.h, docs/checkpoints.md).
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Support/Device.h"
#include "llcdist/runtime/Checkpoint.h"

#include <iostream>

using namespace llcdist;

const char *const llcdist::cli::kExportHelp =
    R"(llc-dist export CHECKPOINT --hf OUT [options]
llc-dist export --info CHECKPOINT [--format text|json]

CHECKPOINT is a --checkpoint-dir of `llc-dist run` (its newest checkpoint) or
one of its step-N directories. Every shard file is verified (size, checksum,
step) before anything is written.

--hf OUT writes OUT/config.json (the model's Hugging Face config, which the
plan keeps as model-config.json) and the parameters, gathered from every
rank's shards, as F32 safetensors with Hugging Face names and shapes
(vocabulary padding stripped; tied weights stored once): OUT/model.safetensors,
or past --max-shard-size the shards model-0000i-of-0000n.safetensors with
model.safetensors.index.json, as save_pretrained writes them.
AutoModelForCausalLM.from_pretrained(OUT) loads it unchanged. The optimizer
state stays in the checkpoint.

--info prints the checkpoint's step, data position, model, the mesh and plan
that saved it, and its files.

OPTIONS
  --hf OUT               the Hugging Face directory to write (created)
  --config FILE          the config.json to write (default: the checkpoint's
                         model-config.json; needed for plans compiled from IR)
  --max-shard-size SIZE  largest safetensors file, e.g. 5GB, 500MB (default 5GB)
  --info                 describe the checkpoint instead of exporting it
  --format text|json     --info as text (default) or JSON
)";

int llcdist::cli::runExport(Args &args) {
  std::string checkpoint, out, config, maxShard = "5GB", format = "text";
  bool info = false;
  ValueFlags flags;
  flags.add("--hf", &out).add("--config", &config).add("--max-shard-size", &maxShard).add("--format", &format);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kExportHelp;
      return 0;
    }
    if (flags.match(args, a))
      continue;
    if (a == "--info")
      info = true;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"export: unknown option '" + a + "'"};
    else if (!checkpoint.empty())
      throw UsageError{"export: more than one CHECKPOINT given ('" + checkpoint + "', '" + a + "')"};
    else
      checkpoint = a;
  }
  if (checkpoint.empty())
    throw UsageError{"export: missing CHECKPOINT (a --checkpoint-dir of llc-dist run, or one of its step-N directories)"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  if (info == !out.empty())
    throw UsageError{info ? "export: --info describes a checkpoint; drop --hf"
                          : "export: give --hf OUT (the Hugging Face directory to write) or --info"};
  std::optional<int64_t> shardBytes = parseByteSize(maxShard);
  if (!shardBytes || *shardBytes < 1)
    throw UsageError{"--max-shard-size: '" + maxShard + "' is not a size such as 5GB or 500MB"};
  rt::StatusOr<rt::CheckpointReader> reader = rt::CheckpointReader::open(checkpoint);
  if (!reader.isOk()) {
    error(reader.status().toString());
    return kExitError;
  }
  if (info) {
    llvm::outs() << rt::describeCheckpoint(*reader, format == "json");
    return 0;
  }
  rt::HfExportOptions o;
  o.outDir = out;
  o.configPath = config;
  o.maxShardBytes = *shardBytes;
  rt::Status st = rt::exportHuggingFace(*reader, o, std::cout);
  if (!st.isOk()) {
    error(st.toString());
    return kExitError;
  }
  return 0;
}
