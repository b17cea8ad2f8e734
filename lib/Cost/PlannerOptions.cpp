//===- PlannerOptions.cpp - what `llc-dist plan` is asked to search -------===//
//
// Planner.h's options: --fix parsed into PlannerOptions, the refusal of
// options that describe no search (contradictions with one another or with
// the GPUs), and the largest cp searched.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/Planner.h"

#include "PlannerText.h"

#include <algorithm>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;
using namespace llcdist::cost::detail;

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

std::optional<std::string> cost::parseFix(const std::string &spec, PlannerOptions &opts) {
  std::stringstream ss(spec);
  std::string item;
  auto bad = [&](const std::string &what) { return std::optional<std::string>("--fix '" + spec + "': " + what); };
  if (spec.empty())
    return bad("expected KNOB=VALUE[,KNOB=VALUE...], e.g. tp=8,pp=16");
  while (std::getline(ss, item, ',')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return bad("'" + item + "' is not KNOB=VALUE (e.g. tp=8)");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    auto integer = [&](std::optional<int64_t> &dst, int64_t min) -> std::optional<std::string> {
      char *end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (*end != '\0' || x < min)
        return bad(k + " must be an integer >= " + std::to_string(min) + ", got '" + v + "'");
      if (dst && *dst != x)
        return bad(k + " is fixed twice (" + std::to_string(*dst) + " and " + v + ")");
      dst = x;
      return std::nullopt;
    };
    std::optional<std::string> err;
    if (k == "dp")
      err = integer(opts.dp, 1);
    else if (k == "tp")
      err = integer(opts.tp, 1);
    else if (k == "pp")
      err = integer(opts.pp, 1);
    else if (k == "cp")
      err = integer(opts.cp, 1);
    else if (k == "ep")
      err = integer(opts.ep, 1);
    else if (k == "cp-impl") {
      if (v != "ring" && v != "all-to-all")
        err = bad("cp-impl must be ring or all-to-all, got '" + v + "'");
      opts.cpImpl = v;
    } else if (k == "v" || k == "virtual-stages")
      err = integer(opts.virtualStages, 1);
    else if (k == "mb" || k == "micro-batch")
      err = integer(opts.microBatch, 1);
    else if (k == "zero") {
      err = integer(opts.zero, 0);
      if (!err && *opts.zero > 3)
        err = bad("zero must be 0, 1, 2 or 3, got '" + v + "'");
    } else if (k == "prefetch" || k == "fsdp-prefetch")
      err = integer(opts.fsdpPrefetch, 0);
    else if (k == "bucket" || k == "grad-bucket-size") {
      if (v == "auto" || v == "off") {
        opts.gradBucket = v == "auto" ? -1 : 0;
      } else
        err = integer(opts.gradBucket, 0);
    } else if (k == "recompute") {
      if (v != "none" && v != "selective" && v != "full")
        err = bad("recompute must be none, selective or full, got '" + v + "'");
      opts.recompute = v;
    } else if (k == "schedule") {
      if (v != "gpipe" && v != "1f1b" && v != "interleaved" && v != "zb-h1")
        err = bad("schedule must be gpipe, 1f1b, interleaved or zb-h1, got '" + v + "'");
      opts.schedule = v;
    } else if (k == "sp" || k == "sequence-parallel") {
      if (v != "on" && v != "off" && v != "true" && v != "false")
        err = bad("sp must be on or off, got '" + v + "'");
      opts.sequenceParallel = v == "on" || v == "true";
    } else {
      err = bad("unknown knob '" + k +
                "' (knobs: dp, tp, pp, cp, cp-impl, ep, v, mb, zero, recompute, schedule, "
                "sp, bucket, prefetch)");
    }
    if (err)
      return err;
  }
  return std::nullopt;
}

int64_t cost::maxContextParallel(const Workload &w, const PlannerOptions &o) {
  return o.maxCp > 0 ? o.maxCp : std::max<int64_t>(1, w.seqLen / 8192);
}

std::optional<std::string> cost::checkOptions(const Workload &w, const PlannerOptions &o) {
  auto why = [](const std::string &s) { return std::optional<std::string>(s); };
  const int64_t n = o.gpus;
  if (n < 1)
    return why("--gpus must be >= 1, got " + std::to_string(n));
  if (w.globalBatch < 1)
    return why("--global-batch must be >= 1 sequences, got " + std::to_string(w.globalBatch));
  if (w.seqLen < 1)
    return why("--seq-len must be >= 1, got " + std::to_string(w.seqLen));
  if (w.model.maxPositions > 0 && w.seqLen > w.model.maxPositions)
    return why(strf("--seq-len %lld exceeds %s's max_position_embeddings (%lld): use a shorter "
                    "sequence",
                    (long long)w.seqLen, w.model.name.c_str(), (long long)w.model.maxPositions));
  for (auto [name, v] :
       {std::pair<const char *, const std::optional<int64_t> &>{"dp", o.dp}, {"tp", o.tp}, {"pp", o.pp}, {"cp", o.cp}})
    if (v && n % *v)
      return why(strf("--fix %s=%lld does not divide --gpus %lld: dp x tp x pp x cp must be the GPUs", name,
                      (long long)*v, (long long)n));
  // cp is 1 unless fixed or the sequence is long enough to search it.
  const std::optional<int64_t> cp = o.cp                            ? o.cp
                                    : maxContextParallel(w, o) == 1 ? std::optional<int64_t>(1)
                                                                    : std::nullopt;
  int64_t fixedProduct = o.dp.value_or(1) * o.tp.value_or(1) * o.pp.value_or(1) * cp.value_or(1);
  if (n % fixedProduct || (o.dp && o.tp && o.pp && cp && fixedProduct != n))
    return why(strf("--fix dp x tp x pp%s = %lld %s --gpus %lld", o.cp ? " x cp" : "", (long long)fixedProduct,
                    n % fixedProduct ? "does not divide" : "is not", (long long)n));
  if (o.cpImpl && o.cp && *o.cp == 1)
    return why("--fix cp-impl=" + *o.cpImpl + " needs context parallelism, but cp is 1");
  if (o.pp && *o.pp > w.model.layers)
    return why(strf("--fix pp=%lld exceeds %s's %lld layers", (long long)*o.pp, w.model.name.c_str(),
                    (long long)w.model.layers));
  bool dpOne = o.dp && *o.dp == 1, ppOne = o.pp && *o.pp == 1, tpOne = o.tp && *o.tp == 1;
  if (n == 1)
    dpOne = ppOne = tpOne = true;
  // ZeRO and the buckets act on the data-parallel group dp × cp.
  const bool groupOne = dpOne && !(o.cp && *o.cp > 1);
  if (o.zero && *o.zero > 0 && groupOne)
    return why("--fix zero=" + std::to_string(*o.zero) + " shards over dp, but dp is 1");
  if (o.gradBucket && *o.gradBucket != 0 && groupOne)
    return why("--fix bucket overlaps the dp all-reduce, but dp is 1");
  if (o.fsdpPrefetch && *o.fsdpPrefetch > 0 && o.zero && *o.zero != 3)
    return why("--fix prefetch needs zero=3 (FSDP), but zero=" + std::to_string(*o.zero) + " is fixed");
  if (o.fsdpPrefetch && *o.fsdpPrefetch > 0 && groupOne)
    return why("--fix prefetch needs zero=3 over dp > 1, but dp is 1");
  if (o.schedule && *o.schedule != "1f1b" && ppOne)
    return why("--fix schedule=" + *o.schedule + " needs a pipeline, but pp is 1");
  if (o.virtualStages && *o.virtualStages > 1) {
    if (ppOne)
      return why("--fix v needs a pipeline, but pp is 1");
    if (o.schedule && *o.schedule != "interleaved")
      return why("--fix v=" + std::to_string(*o.virtualStages) +
                 " needs schedule=interleaved, but schedule=" + *o.schedule + " is fixed");
  }
  if (o.schedule && *o.schedule == "interleaved" && o.virtualStages && *o.virtualStages < 2)
    return why("--fix schedule=interleaved needs v >= 2, but v=1 is fixed");
  if (o.ep && *o.ep > 1) { // expert parallelism: the compiler's refusals (ParallelConfig.cpp)
    const std::string ep = "--fix ep=" + std::to_string(*o.ep);
    if (!w.model.moe)
      return why(ep + " splits a mixture-of-experts model's experts, but " + w.model.name + " has none");
    if (w.model.moe->experts % *o.ep)
      return why(strf("%s does not divide %s's %lld experts", ep.c_str(), w.model.name.c_str(),
                      (long long)w.model.moe->experts));
    if (n % *o.ep || (o.dp && *o.dp % *o.ep))
      return why(ep + " must divide dp" + (o.dp ? "=" + std::to_string(*o.dp) : std::string(" (and so --gpus)")) +
                 ": expert-parallel ranks are drawn from the data-parallel group");
  }
  if (o.sequenceParallel && *o.sequenceParallel && tpOne)
    return why("--fix sp=on needs tp > 1, but tp is 1");
  if (o.microBatch && w.globalBatch % *o.microBatch)
    return why(
        strf("--fix mb=%lld does not divide --global-batch %lld", (long long)*o.microBatch, (long long)w.globalBatch));
  if (o.maxMicroBatch < 1 || o.maxVirtualStages < 1 || o.top < 1 || o.maxTp < 0 || o.maxPp < 0)
    return why("the planner's bounds (max micro-batch, max virtual stages, --top) must be >= 1");
  return std::nullopt;
}
