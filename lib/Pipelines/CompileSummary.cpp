//===- CompileSummary.cpp - the report of `llc-dist compile` --------------===//
#include "llcdist/Pipelines/CompileSummary.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Support/ReportFormat.h"

#include <fmt/format.h>

using namespace mlir;
using namespace llcdist;
using json = nlohmann::ordered_json;

std::optional<VocabPadding> llcdist::vocabPaddingOf(ModuleOp m) {
  auto d = m->getAttrOfType<DictionaryAttr>("xf.vocab_padding");
  auto vocab = d ? d.getAs<IntegerAttr>("vocab_size") : IntegerAttr();
  auto padded = d ? d.getAs<IntegerAttr>("padded_vocab_size") : IntegerAttr();
  auto multiple = d ? d.getAs<IntegerAttr>("multiple") : IntegerAttr();
  if (!vocab || !padded || !multiple) // absent, or a hand-written module's partial record
    return std::nullopt;
  return VocabPadding{vocab.getInt(), padded.getInt(), multiple.getInt()};
}

FailureOr<xf::ModelStats> llcdist::recordedModelStats(ModuleOp m) {
  auto d = m->getAttrOfType<DictionaryAttr>("xf.stats");
  if (!d || !m->hasAttr(plan::kManifestAttr))
    return xf::computeModelStats(m);
  xf::ModelStats s;
  s.parameters = d.getAs<IntegerAttr>("parameters").getInt();
  s.layers = d.getAs<IntegerAttr>("layers").getInt();
  s.linearFlopsPerToken = double(d.getAs<IntegerAttr>("linear_flops_per_token").getInt());
  s.attentionFlopsPerToken = double(d.getAs<IntegerAttr>("attention_flops_per_token").getInt());
  if (auto model = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr))
    if (auto sl = model.getAs<IntegerAttr>("seq_len"))
      s.seqLen = sl.getInt();
  return s;
}

std::string llcdist::modelName(ModuleOp m) {
  if (auto d = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr))
    if (auto n = d.getAs<StringAttr>("name"))
      return n.str();
  return m.getName() ? m.getName()->str() : "<model>";
}

std::vector<GradBucket> llcdist::gradBucketsOf(ModuleOp m) {
  std::vector<GradBucket> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (auto buckets = program->getAttrOfType<ArrayAttr>(plan::kGradBucketsAttr))
      for (auto d : buckets.getAsRange<DictionaryAttr>())
        out.push_back({d.getAs<StringAttr>("collective").str(), d.getAs<IntegerAttr>("grads").getInt(),
                       d.getAs<IntegerAttr>("elements").getInt(), d.getAs<IntegerAttr>("bytes").getInt(),
                       d.get("every_microbatch") != nullptr, program.getSymName().str(),
                       d.getAs<StringAttr>("subroutine").str()});
  return out;
}

std::vector<FsdpPrefetch> llcdist::fsdpPrefetchOf(ModuleOp m) {
  std::vector<FsdpPrefetch> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (auto subs = program->getAttrOfType<ArrayAttr>(plan::kFsdpPrefetchAttr))
      for (auto d : subs.getAsRange<DictionaryAttr>())
        out.push_back({program.getSymName().str(), d.getAs<StringAttr>("subroutine").str(),
                       d.getAs<IntegerAttr>("units").getInt(), d.getAs<IntegerAttr>("gathers").getInt(),
                       d.getAs<IntegerAttr>("prefetched").getInt(), d.getAs<IntegerAttr>("bytes").getInt()});
  return out;
}

std::vector<ParamGatherOverlap> llcdist::paramGatherOverlapOf(ModuleOp m) {
  std::vector<ParamGatherOverlap> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (auto d = program->getAttrOfType<DictionaryAttr>(plan::kParamGatherOverlapAttr))
      out.push_back({program.getSymName().str(), d.getAs<StringAttr>("subroutine").str(),
                     d.getAs<IntegerAttr>("gathers").getInt(), d.getAs<IntegerAttr>("bytes").getInt()});
  return out;
}

std::vector<std::string> llcdist::programsWithoutParamGatherOverlap(ModuleOp m) {
  std::vector<std::string> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (!program->hasAttr(plan::kParamGatherOverlapAttr))
      out.push_back(program.getSymName().str());
  return out;
}

std::vector<TpCommOverlap> llcdist::tpCommOverlapOf(ModuleOp m) {
  std::vector<TpCommOverlap> out;
  for (StringRef kind : {"all_gather", "reduce_scatter"}) {
    TpCommOverlap sum{kind.str()};
    for (auto program : m.getOps<plan::ProgramOp>())
      if (auto r = program->getAttrOfType<DictionaryAttr>(plan::kTpCommOverlapAttr))
        if (auto d = r.getAs<DictionaryAttr>(kind)) {
          sum.started += d.getAs<IntegerAttr>("started").getInt();
          sum.overlapped += d.getAs<IntegerAttr>("overlapped").getInt();
          sum.kernels += d.getAs<IntegerAttr>("kernels").getInt();
          sum.gemms += d.getAs<IntegerAttr>("gemms").getInt();
        }
    if (sum.started > 0)
      out.push_back(sum);
  }
  return out;
}

std::optional<P2PScatterGather> llcdist::p2pScatterGatherOf(ModuleOp m) {
  std::optional<P2PScatterGather> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (auto d = program->getAttrOfType<DictionaryAttr>(plan::kP2PScatterGatherAttr)) {
      if (!out)
        out.emplace();
      out->sends += d.getAs<IntegerAttr>("sends").getInt();
      out->recvs += d.getAs<IntegerAttr>("recvs").getInt();
    }
  return out;
}

std::vector<FusedKernels> llcdist::fusedOf(ModuleOp m) {
  std::vector<FusedKernels> out;
  for (auto program : m.getOps<plan::ProgramOp>())
    if (auto fused = program->getAttrOfType<ArrayAttr>(plan::kFusedAttr))
      for (auto d : fused.getAsRange<DictionaryAttr>()) {
        FusedKernels key{d.getAs<StringAttr>("pass").str(), d.getAs<StringAttr>("from").str(),
                         d.getAs<StringAttr>("to").str()};
        auto it = llvm::find_if(
            out, [&](const FusedKernels &f) { return f.pass == key.pass && f.from == key.from && f.to == key.to; });
        if (it == out.end()) { // after the pass's other patterns (one summary line a pass)
          auto last = llvm::find_if(llvm::reverse(out), [&](const FusedKernels &f) { return f.pass == key.pass; });
          it = out.insert(last == out.rend() ? out.end() : last.base(), key);
        }
        it->ops += d.getAs<IntegerAttr>("ops").getInt();
        it->into += d.getAs<IntegerAttr>("into").getInt();
      }
  return out;
}

json CompileSummary::toJson() const {
  json j;
  j["model"] = model;
  j["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", mesh.pp}};
  if (mesh.cp > 1)
    j["mesh"]["cp"] = mesh.cp;
  if (mesh.ep > 1)
    j["mesh"]["ep"] = mesh.ep;
  j["world_size"] = mesh.worldSize();
  if (shape) {
    j["seq_len"] = shape->seqLen;
    j["micro_batch"] = shape->microBatch;
    j["global_batch"] = shape->globalBatch;
    j["microbatches"] = shape->microbatches(mesh.dp);
    j["dtype"] = shape->dtype;
  }
  j["emit"] = emit;
  j["output"] = output;
  j["compile_ms"] = compileMs;
  j["stats"] = modelStatsJson(stats);
  if (emit == "plan") {
    // The real vocabulary beside the padded one (equal without padding).
    const std::optional<VocabPadding> &pad = vocabPadding;
    int64_t vocab = configVocab ? *configVocab : (pad ? pad->vocab : 0);
    j["vocab"] = {{"vocab_size", pad ? pad->vocab : vocab},
                  {"padded_vocab_size", pad ? pad->padded : vocab},
                  {"make_vocab_size_divisible_by", vocabDivisibleBy}};
  }
  if (comm)
    j["collectives"] = comm->toJson(mesh, topology ? &*topology : nullptr);
  if (topology)
    j["topology"] = {{"name", topology->name},
                     {"gpus_per_node", topology->gpusPerNode},
                     {"nodes", topology->nodesFor(mesh.worldSize())},
                     {"intra_node_gb_s", topology->intraNodeGBs},
                     {"nics_per_node", topology->nicsPerNode},
                     {"nic_gb_s", topology->nicGBs},
                     {"inter_node_gb_s", topology->interNodeGBs}};
  if (plan)
    j["plan"] = {{"buffers", plan->buffers},
                 {"kernels", plan->kernels},
                 {"params", plan->params},
                 {"arena_bytes", plan->arenaBytes},
                 {"arena_bytes_per_stage", plan->arenaBytesPerProgram},
                 {"ops_per_step_per_stage", plan->opsPerStepPerProgram}};
  if (!fused.empty()) {
    json f = json::array();
    for (const FusedKernels &k : fused)
      f.push_back({{"pass", k.pass}, {"from", k.from}, {"to", k.to}, {"ops", k.ops}, {"into", k.into}});
    j["fused"] = std::move(f);
  }
  if (pipeline)
    j["pipeline"] = pipeline->toJson();
  if (!gradBuckets.empty()) {
    json buckets = json::array();
    for (const GradBucket &b : gradBuckets)
      buckets.push_back({{"collective", b.collective},
                         {"grads", b.grads},
                         {"params", b.elements},
                         {"bytes", b.bytes},
                         {"program", b.program},
                         {"subroutine", b.subroutine}});
    j["grad_buckets"] = {{"bucket_size", gradBucketSize}, {"buckets", std::move(buckets)}};
  }
  if (!fsdpPrefetch.empty()) {
    json subs = json::array();
    for (const FsdpPrefetch &f : fsdpPrefetch)
      subs.push_back({{"program", f.program},
                      {"subroutine", f.subroutine},
                      {"units", f.units},
                      {"gathers", f.gathers},
                      {"prefetched", f.prefetched},
                      {"bytes", f.bytes}});
    j["fsdp_prefetch"] = {{"units_ahead", fsdpPrefetchUnits}, {"subroutines", std::move(subs)}};
  }
  if (!paramGatherOverlap.empty()) {
    json progs = json::array();
    for (const ParamGatherOverlap &o : paramGatherOverlap)
      progs.push_back({{"program", o.program}, {"waited_in", o.waitedIn}, {"gathers", o.gathers}, {"bytes", o.bytes}});
    j["param_gather_overlap"] = std::move(progs);
  }
  if (!paramGatherSynchronous.empty())
    j["param_gather_synchronous"] = paramGatherSynchronous;
  if (!tpCommOverlap.empty()) {
    json o = json::object();
    for (const TpCommOverlap &t : tpCommOverlap)
      o[t.collective] = {
          {"started", t.started}, {"overlapped", t.overlapped}, {"kernels", t.kernels}, {"gemms", t.gemms}};
    j["tp_comm_overlap"] = std::move(o);
  }
  if (p2pScatterGather)
    j["p2p_scatter_gather"] = {{"sends", p2pScatterGather->sends}, {"recvs", p2pScatterGather->recvs}};
  if (memory) {
    json mem = memory->toJson();
    for (auto &[k, v] : mem.items())
      j[k] = v;
  }
  return j;
}

void CompileSummary::print(llvm::raw_ostream &os) const {
  os << fmt::format("llc-dist: compiled {} for mesh {} ({} ranks) in {:.1f} ms\n", model, mesh.str(), mesh.worldSize(),
                    compileMs);
  os << fmt::format("  parameters {} | layers {} | training FLOPs/token {}\n", groupDigits(stats.parameters),
                    stats.layers, sci(stats.trainingFlopsPerToken()));
  if (const std::optional<VocabPadding> &pad = vocabPadding)
    os << fmt::format("  vocabulary {} padded to {} rows (a multiple of {}: "
                      "--make-vocab-size-divisible-by {}{}); the loss masks the {} "
                      "padding columns, safetensors keep {}\n",
                      groupDigits(pad->vocab), groupDigits(pad->padded), pad->multiple, vocabDivisibleBy,
                      pad->multiple != vocabDivisibleBy ? fmt::format(" × tp {}", pad->multiple / vocabDivisibleBy)
                                                        : std::string(),
                      pad->padded - pad->vocab, groupDigits(pad->vocab));
  if (shape)
    os << fmt::format("  seq len {} | micro-batch {} | global batch {} "
                      "({} microbatches) | dtype {}\n",
                      shape->seqLen, shape->microBatch, shape->globalBatch, shape->microbatches(mesh.dp), shape->dtype);
  if (plan) {
    std::string ops;
    for (int64_t n : plan->opsPerStepPerProgram)
      ops += (ops.empty() ? "" : " | ") + std::to_string(n);
    os << fmt::format("  plan: {} kernels, {} buffers, {} parameters, arena "
                      "{:.1f} MiB; ops per step {}{}\n",
                      plan->kernels, plan->buffers, plan->params, plan->arenaBytes / 1048576.0, ops,
                      plan->opsPerStepPerProgram.size() > 1 ? " (per stage)" : "");
  }
  // One line per fusion pass: "fused (pass; --no-<flag>: off): 148 adamw into 2 adamw_multi, ...".
  for (size_t i = 0; i < fused.size();) {
    const std::string &pass = fused[i].pass;
    std::string what;
    for (; i < fused.size() && fused[i].pass == pass; ++i)
      what += fmt::format("{}{} {} into {} {}", what.empty() ? "" : ", ", fused[i].ops,
                          fused[i].from.find(' ') == std::string::npos ? fused[i].from : "(" + fused[i].from + ")",
                          fused[i].into, fused[i].to);
    const std::string flag = StringRef(pass).starts_with("llcdist-plan-")
                                 ? "--no-" + pass.substr(std::string("llcdist-plan-").size())
                                 : pass;
    os << "  fused (" << pass << "; " << flag << ": off): " << what << "\n";
  }
  if (memory)
    memory->print(os);
  if (pipeline)
    pipeline->print(os, output != "-" ? output + "/schedule.trace.json" : "");
  if (comm)
    comm->print(os, mesh, topology ? &*topology : nullptr);
  if (p2pScatterGather)
    os << fmt::format("  pipeline sends of 1/tp (--scatter-gather-p2p): {} send kernel{} after a shard_slice over tp, "
                      "{} recv kernel{} followed by an all_gather over tp\n",
                      p2pScatterGather->sends, p2pScatterGather->sends == 1 ? "" : "s", p2pScatterGather->recvs,
                      p2pScatterGather->recvs == 1 ? "" : "s");
  if (!gradBuckets.empty()) {
    os << fmt::format("  overlap (--grad-bucket-size {}): {} gradient bucket{} reduced over dp "
                      "({}) on queue comm during {} backward, each as soon "
                      "as its gradients are complete:\n",
                      groupDigits(gradBucketSize), gradBuckets.size(), gradBuckets.size() == 1 ? "" : "s",
                      gradBuckets.front().collective,
                      gradBuckets.front().everyMicrobatch ? "every microbatch's" : "the last microbatch's");
    // Where each starts, once buckets come from several subroutines (a
    // pipeline's stages and chunks).
    const bool where = llvm::any_of(gradBuckets, [&](const GradBucket &b) {
      return b.program != gradBuckets.front().program || b.subroutine != gradBuckets.front().subroutine;
    });
    for (auto [i, b] : llvm::enumerate(gradBuckets))
      os << fmt::format("    bucket {}{}: {} gradients, {} params, {} B\n", i,
                        where ? " (" + b.program + " " + b.subroutine + ")" : "", b.grads, groupDigits(b.elements),
                        groupDigits(b.bytes));
  }
  if (!fsdpPrefetch.empty()) {
    os << fmt::format("  overlap (--fsdp-prefetch {}): ZeRO-3 parameter all-gathers on queue "
                      "comm, each unit's started {} unit{} ahead, waited before its use:\n",
                      fsdpPrefetchUnits, fsdpPrefetchUnits, fsdpPrefetchUnits == 1 ? "" : "s");
    for (const FsdpPrefetch &f : fsdpPrefetch)
      os << fmt::format("    {}{}: {} units, {} gathers ({} before their unit begins), {} B\n",
                        fsdpPrefetch.front().program == fsdpPrefetch.back().program ? "" : f.program + " ",
                        f.subroutine, f.units, f.gathers, f.prefetched, groupDigits(f.bytes));
  }
  for (const ParamGatherOverlap &o : paramGatherOverlap)
    os << fmt::format("  overlap (--overlap-param-gather){}: {} updated parameter all-gathers "
                      "({} B) started on queue comm in step_begin, each waited before its first "
                      "use in {}\n",
                      paramGatherOverlap.size() == 1 ? "" : " " + o.program, o.gathers, groupDigits(o.bytes),
                      o.waitedIn);
  for (const std::string &program : paramGatherSynchronous)
    os << fmt::format("  overlap (--overlap-param-gather) {}: not overlapped, its parameter "
                      "gathers stay synchronous (the stage holds a tied parameter's replica or "
                      "sends a tied value)\n",
                      program);
  if (!tpCommOverlap.empty()) {
    os << "  overlap (--tp-comm-overlap): sequence parallelism's collectives on queue comm, "
          "each overlapped with the kernels independent of it (all programs):\n";
    for (const TpCommOverlap &t : tpCommOverlap)
      os << fmt::format("    {}: {} started, {} overlapping {} kernels ({} GEMMs); the "
                        "rest have none to overlap\n",
                        t.collective, t.started, t.overlapped, t.kernels, t.gemms);
  }
  if (!dumpDir.empty())
    os << "  IR after each pass: " << dumpDir << "/\n";
  if (output != "-")
    os << "  wrote " << output << (emit == "plan" ? "/" : "") << "\n";
}
