//===- CommReport.cpp - communication volume of a plan --------------------===//
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/ReportFormat.h"

#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <set>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::plan;
using json = nlohmann::ordered_json;

/// The mesh's axis sizes from the manifest (1 for an axis it does not give).
static llvm::StringMap<int64_t> meshAxisSizes(ModuleOp module) {
  llvm::StringMap<int64_t> axisSize{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"cp", 1}, {"ep", 1}};
  if (auto m = module->getAttrOfType<DictionaryAttr>(kManifestAttr))
    if (auto mesh = m.getAs<DictionaryAttr>("mesh"))
      for (auto &[axis, size] : axisSize)
        if (auto v = mesh.getAs<IntegerAttr>(axis))
          size = v.getInt();
  // Expert parallelism's groups, drawn from dp: ep and its replicas (edp).
  axisSize["edp"] = axisSize["dp"] / std::max<int64_t>(1, axisSize["ep"]);
  return axisSize;
}

double CollectiveEntry::ringBytesPerStep() const {
  double n = double(groupSize);
  double factor = kind == "all_reduce" ? 2 * (n - 1) / n : kind == "send" ? 1.0 : (n - 1) / n;
  return factor * double(payloadBytes) * double(callsPerStep);
}

double CommReport::ringBytesPerStep() const {
  double total = 0;
  for (const CollectiveEntry &e : entries)
    total += e.ringBytesPerStep();
  return total;
}

FailureOr<CommReport> llcdist::plan::computeCommReport(ModuleOp module) {
  auto programs = llvm::to_vector(module.getOps<ProgramOp>());
  if (programs.empty())
    return emitError(module.getLoc(), "no plan.program to report on");
  llvm::StringMap<int64_t> axisSize = meshAxisSizes(module);

  CommReport report;
  for (auto [index, program] : llvm::enumerate(programs)) {
    int64_t stage = programs.size() > 1 ? int64_t(index) : -1;
    // How often each subroutine runs in one step.
    llvm::StringMap<int64_t> runs;
    for (auto sched : program.getBody().front().getOps<ScheduleOp>())
      for (auto a : sched.getBody().front().getOps<ActionOp>())
        ++runs[a.getSubroutine()];
    SymbolTable symbols(program); // lookups in O(1), not a walk of the buffers
    int64_t params = 0, experts = 0;
    for (auto p : program.getBody().front().getOps<ParamOp>())
      if (p->hasAttr("pipeline.replica_of"))
        continue; // a tied parameter's copy: its home stage reduces and updates it
      else if (auto buf = symbols.lookup<BufferOp>(p.getValueAttr().getValue())) {
        params += buf.getTensorType().getNumElements();
        auto sh = p->getAttrOfType<DictionaryAttr>("sharding");
        if (sh && sh.getAs<StringAttr>("axis") && sh.getAs<StringAttr>("axis").getValue() == "ep")
          experts += buf.getTensorType().getNumElements();
      }
    report.localParametersPerStage.push_back(params);
    report.localExpertParametersPerStage.push_back(experts);
    report.localParameters = std::max(report.localParameters, params);
    report.localExpertParameters = std::max(report.localExpertParameters, experts);
    for (auto sub : program.getBody().front().getOps<SubroutineOp>())
      for (auto k : sub.getBody().front().getOps<KernelOp>()) {
        StringRef kind = k.getKernel();
        if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter" && kind != "all_to_all" &&
            kind != "all_to_all_v" && kind != "send")
          continue;
        CollectiveEntry e;
        e.kind = kind.str();
        e.stage = stage;
        e.axis = k.getParams().getAs<StringAttr>("axis").str();
        // A send's pair, or one axis or several joined by '+' ("dp+cp"): the product.
        e.groupSize =
            kind == "send" ? 2 : axisSetSize(e.axis, [&](std::string_view a) { return axisSize.lookup(StringRef(a)); });
        if (auto g = k.getParams().getAs<IntegerAttr>("group_size")) // a sub-group of the axis
          e.groupSize = g.getInt();
        e.callsPerStep = runs.lookup(sub.getSymName());
        if (auto p = k->getAttrOfType<StringAttr>("plan.payload"))
          e.payload = p.str();
        if (auto nl = dyn_cast<NameLoc>(k.getLoc()))
          e.reason = nl.getName().str();
        e.origin = collectiveOrigin(k);
        if (auto q = k->getAttrOfType<StringAttr>(kQueueAttr))
          e.queue = q.str();
        // The payload: the reduced buffers, or the full (gathered) tensor;
        // all_to_all_v's x is the most it sends (its rows, data-dependent).
        StringRef role = kind == "all_gather" ? "y" : "x";
        Attribute arg = k.getArgs().get(role);
        SmallVector<Attribute> bufs;
        if (auto list = dyn_cast<ArrayAttr>(arg))
          bufs.append(list.begin(), list.end());
        else
          bufs.push_back(arg);
        if (auto d = k.getParams().getAs<StringAttr>("dtype"))
          e.dtype = d.str();
        // What moves: elements of the collective's dtype (a send, or an f64
        // partial reduction, which is always reduced in f64: the buffer).
        const int64_t elementBytes = e.dtype == "bf16" ? 2 : 4;
        for (Attribute a : bufs)
          if (auto buf = symbols.lookup<BufferOp>(cast<FlatSymbolRefAttr>(a).getValue()))
            e.payloadBytes += kind == "send" || buf.getTensorType().getElementType().isF64()
                                  ? buf.getNumBytes()
                                  : buf.getTensorType().getNumElements() * elementBytes;
        // One entry per (stage, kind, axis, payload, reason, queue): a collective
        // repeated per layer is one line with its calls summed.
        auto same = llvm::find_if(report.entries, [&](const CollectiveEntry &o) {
          return o.stage == e.stage && o.kind == e.kind && o.axis == e.axis && o.payload == e.payload &&
                 o.reason == e.reason && o.origin == e.origin && o.payloadBytes == e.payloadBytes &&
                 o.dtype == e.dtype && o.queue == e.queue;
        });
        if (same != report.entries.end())
          same->callsPerStep += e.callsPerStep;
        else
          report.entries.push_back(e);
      }
  }
  report.facts = computeCommFacts(module);
  for (CollectiveEntry &e : report.entries)
    e.analytic = analyticVolume(e, report, report.facts);
  return report;
}

CommFacts llcdist::plan::computeCommFacts(ModuleOp m) {
  CommFacts f;
  if (auto man = m->getAttrOfType<DictionaryAttr>(kManifestAttr)) {
    if (auto md = man.getAs<DictionaryAttr>("model"))
      f.bf16 = md.getAs<StringAttr>("dtype") && md.getAs<StringAttr>("dtype").getValue() == "bf16";
    if (auto mesh = man.getAs<DictionaryAttr>("mesh"))
      if (auto tp = mesh.getAs<IntegerAttr>("tp"))
        f.tp = tp.getInt();
    if (auto mesh = man.getAs<DictionaryAttr>("mesh"))
      if (auto cp = mesh.getAs<IntegerAttr>("cp"))
        f.cp = cp.getInt();
  }
  m.walk([&](KernelOp k) {
    f.vocabParallel |= k.getKernel() == "cross_entropy_fwd" && k.getParams().get("shard_axis");
    // Sequence parallelism reduce-scatters activations (ZeRO's are gradients).
    f.sequenceParallel |= k.getKernel() == "reduce_scatter" && movesTpActivations(k, k.getKernel());
    f.scatterGatherP2P |= k.getKernel() == "all_gather" && collectiveOrigin(k) == xf::CollectiveOrigin::Pipeline;
  });
  bool parallelBlock = false; // attention and MLP side by side (Phi)
  auto rc = m->getAttrOfType<StringAttr>("xf.recompute");
  f.fullRecompute = rc && rc.getValue() == "full";
  if (auto model = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr)) {
    // A hand-written module's xf.model may lack any of them (the verifier
    // requires none): then the analytic volumes that need them stay unknown.
    std::array<int64_t, 5> bsh{};
    const StringRef keys[] = {"micro_batch", "seq_len", "hidden_size", "num_layers", "microbatches"};
    bool all = true;
    for (auto [k, v] : llvm::zip_equal(keys, bsh)) {
      auto a = model.getAs<IntegerAttr>(k);
      all = all && a;
      v = a ? a.getInt() : 0;
    }
    if (all)
      f.bshLM = bsh;
    if (auto hd = model.getAs<IntegerAttr>("head_dim"))
      f.headDim = hd.getInt();
    if (auto nh = model.getAs<IntegerAttr>("num_heads"))
      f.numHeads = nh.getInt();
    if (auto nkv = model.getAs<IntegerAttr>("num_kv_heads"))
      f.numKvHeads = nkv.getInt();
    if (auto e = model.getAs<IntegerAttr>("num_experts"))
      f.experts = e.getInt();
    auto arch = model.getAs<StringAttr>("architecture");
    parallelBlock = arch && arch.getValue() == "PhiForCausalLM";
  }
  bool experts = false, shared = false;
  m.walk([&](ParamOp p) {
    f.kvBias |= p.getName().ends_with("self_attn.k_proj.bias");
    experts |= p.getName().contains(".experts.{e}.");
    shared |= p.getName().contains(".shared_expert.");
  });
  f.splitMlps = experts && !shared ? 0 : 1;
  f.recomputedRowParallel = parallelBlock ? 0 : 1 + (experts && shared ? 1 : 0);
  return f;
}

bool AnalyticVolume::matches(const CollectiveEntry &e) const {
  return double(e.payloadBytes) == payloadBytes && (calls < 0 || calls == e.callsPerStep);
}

namespace {
/// Context parallelism's all-to-alls (Ulysses): each moves one attention
/// operand of this rank, b·(s/cp)·(heads·d_head / tp) elements: q, out and
/// their gradients with the query heads, k, v and theirs with the kv heads.
/// Per layer and microbatch, to the heads: q, k, v forward and dout
/// backward; back to the sequence: out forward and dq, dk, dv backward;
/// full recomputation repeats the forward's.
AnalyticVolume contextParallelVolume(const CollectiveEntry &e, const CommFacts &f) {
  if (!f.bshLM || f.numHeads == 0 || f.headDim == 0)
    return {};
  auto [b, s, h, L, M] = *f.bshLM;
  const int64_t nkv = f.numKvHeads ? f.numKvHeads : f.numHeads;
  const double el = f.bf16 ? 2.0 : 4.0;
  const std::string els = f.bf16 ? "2" : "4";
  const double tokens = double(b) * double(s) / double(f.cp);
  const double qBytes = el * tokens * double(f.numHeads * f.headDim) / double(f.tp);
  const double kvBytes = el * tokens * double(nkv * f.headDim) / double(f.tp);
  const bool toHeads = llvm::StringRef(e.reason).contains("attention needs the whole sequence");
  const bool kv = double(e.payloadBytes) == kvBytes && kvBytes != qBytes;
  const bool mha = kvBytes == qBytes;
  // Calls per layer per microbatch with these bytes and this direction. The
  // backward exchanges the saved attention output once more: o_proj's weight
  // gradient reads it by the sequence (the attention's gradient by the heads).
  int64_t calls = toHeads ? (mha ? 4 : 2) : (mha ? 5 : kv ? 2 : 3);
  const int64_t again = f.fullRecompute ? (toHeads ? (mha ? 3 : (kv ? 2 : 1)) : (kv ? 0 : 1)) : 0;
  calls += again;
  std::string what = kv ? "b·(s/cp)·n_kv·d_head·" + els + " / tp" : "b·(s/cp)·n_heads·d_head·" + els + " / tp";
  std::string which = toHeads ? (mha  ? "q, k, v forward, dout backward"
                                 : kv ? "k, v forward"
                                      : "q forward, dout backward")
                              : (mha  ? "out forward, out again, dq, dk, dv backward"
                                 : kv ? "dk, dv backward"
                                      : "out forward, out again and dq backward");
  if (again > 0)
    which += "; the forward's again (full recompute)";
  if (e.stage >= 0)
    L = -1; // per-stage layer counts: payloads only
  return {what + ", " + std::to_string(calls) + " per layer per microbatch (" + which + ")", kv ? kvBytes : qBytes,
          L < 0 ? -1 : calls * L * M};
}

/// Context parallelism's ring (p2p): each send moves one k, v, dk or dv
/// block of this rank, b·(s/cp)·n_kv·d_head / tp elements. Per layer and
/// microbatch, k and v pass cp − 1 times in the forward and again in the
/// backward (full recomputation repeats the forward's); dk and dv pass
/// cp − 1 times with them and once more home.
AnalyticVolume ringVolume(const CollectiveEntry &e, const CommFacts &f) {
  if (!f.bshLM || f.numHeads == 0 || f.headDim == 0)
    return {};
  auto [b, s, h, L, M] = *f.bshLM;
  const int64_t nkv = f.numKvHeads ? f.numKvHeads : f.numHeads, cp = f.cp;
  const std::string els = f.bf16 ? "2" : "4";
  const double kvBytes =
      (f.bf16 ? 2.0 : 4.0) * double(b) * double(s) / double(cp) * double(nkv * f.headDim) / double(f.tp);
  const bool grads = e.payload == "activation gradients";
  const int64_t calls = grads ? 2 * cp : (f.fullRecompute ? 6 : 4) * (cp - 1);
  std::string which = grads ? "dk, dv: cp − 1 steps and home" : "k, v: cp − 1 steps forward and backward";
  if (!grads && f.fullRecompute)
    which += ", and the forward's again (full recompute)";
  if (e.stage >= 0)
    L = -1; // per-stage layer counts: payloads only
  return {"b·(s/cp)·n_kv·d_head·" + els + " / tp, " + std::to_string(calls) + " per layer per microbatch (" + which +
              ")",
          kvBytes, L < 0 ? -1 : calls * L * M};
}
} // namespace

AnalyticVolume llcdist::plan::analyticVolume(const CollectiveEntry &e, const CommReport &r, const CommFacts &f) {
  int64_t localParams = e.stage >= 0 ? r.localParametersPerStage[e.stage] : r.localParameters;
  // Expert parallelism: the experts' gradients reduce over edp, the rest
  // over dp.
  const int64_t expertParams = e.stage >= 0 ? r.localExpertParametersPerStage[e.stage] : r.localExpertParameters;
  using xf::CollectiveOrigin;
  if (e.origin == CollectiveOrigin::Zero)
    return {}; // per-parameter blocks: the totals are in docs/memory.md
  // Gradients move in the collective's dtype: bf16, or f32 (an f32 plan, or
  // a bf16 plan's --grad-reduce-dtype f32).
  const bool bf16Elements = e.dtype == "bf16";
  if (e.payload == "expert gradients")
    return {std::string(bf16Elements ? "2" : "4") + "·Ψ_experts (gradients of this rank's experts)",
            (bf16Elements ? 2.0 : 4.0) * double(expertParams), 1};
  if (e.payload == "gradients" && expertParams > 0)
    return {std::string(bf16Elements ? "2" : "4") + "·(Ψ − Ψ_experts) (gradients of this rank's non-expert parameters)",
            (bf16Elements ? 2.0 : 4.0) * double(localParams - expertParams), 1};
  if (e.payload == "gradients")
    return bf16Elements ? AnalyticVolume{"2·Ψ (bf16 gradients of this rank's parameters)", 2.0 * double(localParams), 1}
           : f.bf16     ? AnalyticVolume{"4·Ψ (bf16 gradients of this rank's parameters, "
                                         "reduced in f32)",
                                     4.0 * double(localParams), 1}
                    : AnalyticVolume{"4·Ψ (fp32 gradients of this rank's parameters)", 4.0 * double(localParams), 1};
  if (e.payload == "loss")
    return {"4 (one f32)", 4.0, 1};
  if (e.payload == "router statistics" && e.kind == "all_reduce" && f.experts > 0 && f.bshLM)
    // The load-balancing loss's statistics where each rank holds a slice of
    // the tokens (SP, cp): counts (i32) and probability sums (f32), once
    // per microbatch, where the loss reads them.
    return {"E·4, 2 per microbatch (the load-balancing loss's counts and probability sums)", 4.0 * double(f.experts),
            e.stage >= 0 ? -1 : 2 * (*f.bshLM)[4]};
  if (e.payload == "grad norm")
    return {"8 (one f64 squared norm)", 8.0, 1};
  if (e.payload == "kv-replica gradients") {
    // kv-head replication: each rank's one kv head, k and v, in every layer.
    if (!f.bshLM || e.stage >= 0)
      return {}; // per-stage layer counts: no prediction
    const int64_t h = (*f.bshLM)[2], L = (*f.bshLM)[3], d = f.headDim;
    const double el = bf16Elements ? 2.0 : 4.0;
    return {std::string("2·L·d_head·") + (f.kvBias ? "(h + 1)" : "h") + "·" + (bf16Elements ? "2" : "4") +
                " (k and v gradients of this rank's kv head)",
            el * 2.0 * double(L * d * (h + (f.kvBias ? 1 : 0))), 1};
  }
  if ((e.payload == "row maxima" || e.payload == "row sums") && f.bshLM) {
    // The vocabulary-parallel loss's f64 row statistics, before the forward
    // and again before the backward of each microbatch.
    const auto [b, s, h, L, M] = *f.bshLM;
    const bool sums = e.payload == "row sums";
    return {std::string(sums ? "16·b·s (Σ exp and target logit, f64 per token)" : "8·b·s (f64 per token)") +
                ", forward and backward per microbatch",
            (sums ? 16.0 : 8.0) * double(b * s), 2 * M};
  }
  if (e.kind == "all_to_all" && e.origin == CollectiveOrigin::ContextParallel)
    return contextParallelVolume(e, f);
  if (e.kind == "send" && e.origin == CollectiveOrigin::ContextParallel)
    return ringVolume(e, f);
  const bool pipelineGather = e.kind == "all_gather" && e.origin == CollectiveOrigin::Pipeline;
  if ((e.payload != "activations" && e.kind != "send" && !pipelineGather) || !f.bshLM)
    return {};
  auto [b, s, h, L, M] = *f.bshLM;
  // Activations travel in the plan's activation dtype: bf16 (2 bytes) or f32.
  const std::string el = f.bf16 ? "2" : "4";
  double bsh = (f.bf16 ? 2.0 : 4.0) * double(b * s * h);
  if (pipelineGather) // --scatter-gather-p2p: the slices the tp ranks received
    return {"b·s·h·" + el + ", the received 1/tp slices gathered over tp", bsh, -1};
  if (e.kind == "send") {
    // Pipeline borders: the residual stream of one microbatch; under
    // sequence parallelism only this rank's slice of the sequence travels.
    if (e.payload == "activations" || e.payload == "activation gradients")
      return {f.sequenceParallel   ? "b·s·h·" + el + " / tp (the sequence-parallel slice)"
              : f.scatterGatherP2P ? "b·s·h·" + el + " / tp (this tp rank's slice: --scatter-gather-p2p)"
                                   : "b·s·h·" + el,
              f.sequenceParallel || f.scatterGatherP2P ? bsh / double(f.tp) : bsh, -1};
    if (StringRef(e.payload).starts_with("router statistics") && f.experts > 0)
      return {"E·4 (the load-balancing loss's counts or probability sums, or their gradient, per microbatch)",
              4.0 * double(f.experts), -1};
    return {};
  }
  if (e.stage >= 0) // per-stage layer counts: payloads only
    L = -1;
  // Per layer: attention's, and the MLP's where tp splits one (a mixture of
  // experts without a shared expert has none).
  const int64_t perLayer = 1 + f.splitMlps;
  const std::string layers = std::to_string(perLayer) + " per layer";
  if (e.origin == CollectiveOrigin::RowParallel) {
    // Full recomputation repeats those of the forward's its backward reads.
    const int64_t again = f.fullRecompute ? f.recomputedRowParallel : 0;
    std::string recomputed;
    if (f.fullRecompute)
      recomputed = again == 0   ? ", none again (full recompute: only the residual stream reads them)"
                   : again == 1 ? ", and the attention output's again (full recompute)"
                                : ", and both again (full recompute)";
    return {"b·s·h·" + el + ", " + layers + " per microbatch (" +
                (f.splitMlps ? "attention and MLP outputs" : "attention outputs; the experts are not split") + ")" +
                recomputed,
            bsh, L < 0 ? -1 : (perLayer + again) * L * M};
  }
  if (e.origin == CollectiveOrigin::ColumnParallel)
    return {f.vocabParallel ? "b·s·h·" + el + ", " + layers + " + the LM head, per microbatch (input gradients)"
                            : "b·s·h·" + el + ", " + layers + " per microbatch (input gradients)",
            bsh, L < 0 ? -1 : (perLayer * L + (f.vocabParallel ? 1 : 0)) * M};
  if (e.origin == CollectiveOrigin::VocabParallelEmbedding)
    return {"b·s·h·" + el + ", once per microbatch", bsh, M};
  return {};
}

LinkEstimate llcdist::plan::estimateLink(const CollectiveEntry &e, const MeshSpec &mesh, const Topology &topo) {
  LinkEstimate l;
  l.crossesNodes = axisCrossesNodes(mesh, e.axis, topo);
  l.gbs = l.crossesNodes ? topo.interNodeGBs : topo.intraNodeGBs;
  l.ms = e.ringBytesPerStep() / (l.gbs * 1e9) * 1e3;
  return l;
}

std::vector<std::pair<std::string, double>> CommReport::ringBytesPerStepByQueue() const {
  std::vector<std::pair<std::string, double>> out;
  for (const CollectiveEntry &e : entries) {
    auto it = llvm::find_if(out, [&](const auto &q) { return q.first == e.queue; });
    if (it == out.end())
      out.emplace_back(e.queue, e.ringBytesPerStep());
    else
      it->second += e.ringBytesPerStep();
  }
  return out;
}

json CommReport::toJson(const MeshSpec &mesh, const Topology *topo) const {
  json list = json::array();
  for (const CollectiveEntry &e : entries) {
    const AnalyticVolume &a = e.analytic;
    list.push_back({{"kind", e.kind},
                    {"axis", e.axis},
                    {"group_size", e.groupSize},
                    {"payload", e.payload},
                    {"calls_per_step", e.callsPerStep},
                    {"payload_bytes", e.payloadBytes},
                    {"analytic_payload_bytes", a.payloadBytes},
                    {"analytic_calls_per_step", a.calls},
                    {"analytic_formula", a.formula},
                    {"ring_bytes_per_rank_per_step", e.ringBytesPerStep()},
                    {"reason", e.reason},
                    {"queue", e.queue}});
    if (topo) {
      LinkEstimate l = estimateLink(e, mesh, *topo);
      list.back()["crosses_nodes"] = l.crossesNodes;
      list.back()["link_gb_s"] = l.gbs;
      list.back()["estimated_ms_per_step"] = l.ms;
    }
    if (e.stage >= 0)
      list.back()["stage"] = e.stage;
  }
  return list;
}

void CommReport::print(llvm::raw_ostream &os, const MeshSpec &mesh, const Topology *topo) const {
  if (entries.empty()) {
    os << "  collectives: none (one rank)\n";
    return;
  }
  if (topo) {
    int64_t world = mesh.worldSize(), nodes = topo->nodesFor(world);
    int64_t last = world - (nodes - 1) * topo->gpusPerNode;
    os << fmt::format("  topology {}: {} ranks on {} node{} of {} GPUs{} (rank order {}); "
                      "{:g} GB/s per GPU inside a node, {:g} GB/s between nodes ({} NICs x "
                      "{:g} GB/s / {} GPUs)\n",
                      topo->name, world, nodes, nodes == 1 ? "" : "s", topo->gpusPerNode,
                      last < topo->gpusPerNode ? fmt::format(", the last using {}", last) : "", mesh.rankOrderStr(),
                      topo->intraNodeGBs, topo->interNodeGBs, topo->nicsPerNode, topo->nicGBs, topo->gpusPerNode);
  }
  os << "  collectives per step, per rank (ring algorithms: all-reduce sends "
        "2(n-1)/n of the payload):\n";
  bool staged = entries.front().stage >= 0;
  size_t axisWidth = 4, kindWidth = 11; // wider for an axis set ("dp+cp"), all_to_all_v
  for (const CollectiveEntry &e : entries) {
    axisWidth = std::max(axisWidth, e.axis.size());
    kindWidth = std::max(kindWidth, e.kind.size());
  }
  os << fmt::format("    {}{:<{}} {:<{}} {:>3} {:>6} {:>14} {:>16}  {}\n", staged ? "stage " : "", "kind", kindWidth,
                    "axis", axisWidth, "n", "calls", "payload B", "ring B/step", "analytic payload");
  for (const CollectiveEntry &e : entries) {
    const AnalyticVolume &a = e.analytic;
    os << fmt::format("    {}{:<{}} {:<{}} {:>3} {:>6} {:>14} {:>16.0f}  {}{}\n",
                      staged ? fmt::format("{:>5} ", e.stage) : "", e.kind, kindWidth, e.axis, axisWidth, e.groupSize,
                      e.callsPerStep, groupDigits(e.payloadBytes), e.ringBytesPerStep(), a.formula,
                      a.formula.empty() ? "" : (a.matches(e) ? " = same" : " ≠ MISMATCH"));
    if (topo) {
      LinkEstimate l = estimateLink(e, mesh, *topo);
      os << fmt::format("      {} at {:g} GB/s per GPU: ~{:.3f} ms per step\n",
                        l.crossesNodes ? "crosses nodes" : "inside a node", l.gbs, l.ms);
    }
  }
  // Only asynchronous plans have more than one queue: say what may overlap.
  auto byQueue = ringBytesPerStepByQueue();
  if (byQueue.size() > 1 || byQueue.front().first != kComputeQueue) {
    os << "    ring B/step by queue:";
    for (auto [i, q] : llvm::enumerate(byQueue))
      os << fmt::format("{} {} {:.0f}{}", i ? "," : "", q.first, q.second,
                        q.first == kComputeQueue ? " (exposed)" : " (may overlap compute)");
    os << "\n";
  }
}

std::vector<std::vector<std::string>> llcdist::plan::communicatorAxesPerProgram(ModuleOp module) {
  llvm::StringMap<int64_t> axisSize = meshAxisSizes(module);
  std::vector<std::vector<std::string>> out;
  for (auto program : module.getOps<ProgramOp>()) {
    std::set<std::string> axes;
    program.walk([&](KernelOp k) {
      for (StringRef key : {"axis", "shard_axis"}) {
        auto v = k.getParams().getAs<StringAttr>(key);
        if (!v)
          continue;
        SmallVector<StringRef> parts;
        v.getValue().split(parts, ',', -1, false);
        for (StringRef a : parts)
          if (axisSize.lookup(a.trim()) > 1)
            axes.insert(a.trim().str());
      }
    });
    out.emplace_back(axes.begin(), axes.end());
  }
  return out;
}
