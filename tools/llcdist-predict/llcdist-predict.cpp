//===- llcdist-predict.cpp - the analytic step model, in batches ---------===//
//
// MLIR-free. Reads one JSON request on stdin and writes one JSON answer on
// stdout: the analytic step model (include/llcdist/Cost/StepModel.h) on a
// list of workloads, each with the configurations to try; for each workload
// the fastest configuration that fits the device memory (every configuration
// with "memory_filter": false: a published run that fit its GPUs). The calibration
// script (scripts/fit_cost_model.py) calls it once per step of its fit, with
// the fitted efficiencies under "fitted" replacing the device file's.
//
//   {"device": "a100-80gb", "topology": "dgx-a100",
//    "fitted": {"gemm_efficiency": 0.8, "gemm_knee_gflop": 20, "memory_efficiency": 0.8},
//    "rows": [{"model": "models/gpt2.json", "global_batch": 512, "seq_len": 2048,
//              "dtype": "bf16", "attention": "flash", "fusion": "plan", "p2p": "full",
//              "recomputation": "read",
//              "memory_filter": true,
//              "configs": [{"dp": 32, "tp": 1, "pp": 1, "micro_batch": 1,
//                           "virtual_stages": 1, "schedule": "1f1b", "zero": 0,
//                           "recompute": "full", "sequence_parallel": false,
//                           "grad_bucket": 0, "fsdp_prefetch": 0}]}]}
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/StepModel.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;
using json = nlohmann::json;

namespace {
int fail(const std::string &msg) {
  std::cerr << "llcdist-predict: error: " << msg << "\n";
  return 1;
}

template <typename T> T get(const json &j, const char *k, T dflt) { return j.contains(k) ? j[k].get<T>() : dflt; }
} // namespace

int main(int argc, char **argv) {
  if (argc > 1) {
    std::cout << "usage: llcdist-predict < request.json  (see the file comment of "
                 "tools/llcdist-predict/llcdist-predict.cpp)\n";
    return std::string(argv[1]) == "--help" ? 0 : 2;
  }
  std::stringstream ss;
  ss << std::cin.rdbuf();
  json req;
  try {
    req = json::parse(ss.str());
  } catch (const json::exception &e) {
    return fail(std::string("stdin: malformed JSON: ") + e.what());
  }
  try {
    Hardware hw;
    if (auto e = loadHardware(req.at("device").get<std::string>(), req.at("topology").get<std::string>(), hw))
      return fail(*e);
    if (req.contains("fitted")) {
      const json &f = req["fitted"];
      DeviceCost &dc = *hw.device.cost;
      dc.gemmEfficiency = get<double>(f, "gemm_efficiency", dc.gemmEfficiency);
      dc.gemmKneeGflop = get<double>(f, "gemm_knee_gflop", dc.gemmKneeGflop);
      dc.memoryEfficiency = get<double>(f, "memory_efficiency", dc.memoryEfficiency);
      if (!(dc.gemmEfficiency > 0 && dc.gemmEfficiency <= 1 && dc.gemmKneeGflop >= 0 && dc.memoryEfficiency > 0 &&
            dc.memoryEfficiency <= 1))
        return fail("fitted: values out of range");
    }
    json rows = json::array();
    for (const json &row : req.at("rows")) {
      Workload w;
      if (auto e = loadModelConfig(row.at("model").get<std::string>(), w.model))
        return fail(e->message);
      w.globalBatch = row.at("global_batch").get<int64_t>();
      w.seqLen = row.at("seq_len").get<int64_t>();
      w.precision = get<std::string>(row, "dtype", "bf16") == "f32" ? Precision::F32 : Precision::BF16;
      std::string attn = get<std::string>(row, "attention", "flash");
      if (attn != "flash" && attn != "unfused")
        return fail("rows[].attention: flash or unfused, got '" + attn + "'");
      w.attention = attn == "unfused" ? Workload::Attention::Unfused : Workload::Attention::Flash;
      std::string fusion = get<std::string>(row, "fusion", "plan");
      if (fusion != "plan" && fusion != "none")
        return fail("rows[].fusion: plan or none, got '" + fusion + "'");
      w.fusion = fusion == "none" ? Workload::Fusion::None : Workload::Fusion::Plan;
      // The pipeline's transport: llc-dist's plan with whole sends ("full")
      // or compiled --scatter-gather-p2p ("scatter_gather"), or Megatron-LM's
      // ("megatron": scatter/gather, each send posted with a receive).
      std::string p2p = get<std::string>(row, "p2p", "full");
      if (p2p != "full" && p2p != "scatter_gather" && p2p != "megatron")
        return fail("rows[].p2p: full, scatter_gather or megatron, got '" + p2p + "'");
      w.scatterGatherP2P = p2p == "megatron";
      // What full recomputation runs: "read" (llc-dist's plans: what the
      // backward reads) or "whole" (Megatron-LM's: the layer's forward).
      std::string rc = get<std::string>(row, "recomputation", "read");
      if (rc != "read" && rc != "whole")
        return fail("rows[].recomputation: read or whole, got '" + rc + "'");
      w.recomputation = rc == "whole" ? Workload::Recomputation::Whole : Workload::Recomputation::Read;
      // A published run fit its machine whatever our memory model says of
      // llc-dist's plan for it: "memory_filter": false keeps every config.
      bool memoryFilter = get<bool>(row, "memory_filter", true);
      json best = nullptr;
      double bestTime = 0;
      int64_t tried = 0, fit = 0;
      for (const json &cj : row.at("configs")) {
        ParallelConfig c;
        c.dp = get<int64_t>(cj, "dp", 1);
        c.tp = get<int64_t>(cj, "tp", 1);
        c.pp = get<int64_t>(cj, "pp", 1);
        c.cp = get<int64_t>(cj, "cp", 1);
        c.cpImpl = get<std::string>(cj, "cp_impl", "ring");
        c.ep = get<int64_t>(cj, "ep", 1); // expert parallelism (mixtures of experts)
        c.microBatch = get<int64_t>(cj, "micro_batch", 1);
        c.virtualStages = get<int64_t>(cj, "virtual_stages", 1);
        c.schedule = get<std::string>(cj, "schedule", "1f1b");
        c.zero = get<int>(cj, "zero", 0);
        c.recompute = get<std::string>(cj, "recompute", "none");
        c.sequenceParallel = get<bool>(cj, "sequence_parallel", false);
        c.gradBucket = get<int64_t>(cj, "grad_bucket", 0);
        c.fsdpPrefetch = get<int64_t>(cj, "fsdp_prefetch", 0);
        // A scatter/gather row's configurations compile so where it applies (the flags say it).
        c.scatterGatherP2P = p2p != "full" && c.scatterGatherApplies();
        ++tried;
        if (checkConfig(w, c))
          continue;
        StepPrediction p = predictStep(hw, w, c);
        int64_t reserve = hw.device.reserve.bytes(hw.device.memoryBytes, 3 + int64_t(c.cp > 1));
        if (memoryFilter && p.memory.total() + reserve > hw.device.memoryBytes)
          continue;
        ++fit;
        if (best.is_null() || p.stepSeconds < bestTime) {
          bestTime = p.stepSeconds;
          json comm = json::object();
          for (const auto &[axis, ac] : p.comm)
            comm[axis] = {{"total_s", ac.total}, {"exposed_s", ac.exposed}};
          best = {{"config", c.str()},
                  {"flags", c.compileFlags()},
                  {"step_time_s", p.stepSeconds},
                  {"mfu", p.mfu},
                  {"hfu", p.hfu},
                  {"tokens_per_s", p.tokensPerSecond},
                  {"compute_s", p.computeSeconds},
                  {"bubble_s", p.bubbleSeconds},
                  {"optimizer_s", p.optimizerSeconds},
                  {"comm", comm},
                  {"memory_bytes", p.memory.total()},
                  {"memory",
                   {{"stage", p.memory.stage},
                    {"param", p.memory.params},
                    {"grad", p.memory.grads},
                    {"optimizer_state", p.memory.optimizer},
                    {"activations", p.memory.activations}}},
                  {"bound", p.bound}};
        }
      }
      rows.push_back({{"tried", tried}, {"fit", fit}, {"best", best}});
    }
    std::cout << json({{"rows", rows}}).dump(1) << "\n";
  } catch (const json::exception &e) {
    return fail(std::string("request: ") + e.what());
  }
  return 0;
}
