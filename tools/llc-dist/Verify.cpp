//===- Verify.cpp - llc-dist verify PLAN ----------------------------------===//
//
// The static cross-rank check of a plan directory's communication
// (docs/plan-verifier.md), with the runtime's loader and semantics.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Verify/PlanComm.h"
#include "llcdist/runtime/Plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

using namespace llcdist;
using json = nlohmann::ordered_json;

const char *const llcdist::cli::kVerifyHelp = R"(llc-dist verify PLAN [options]

Checks a plan directory's communication across all ranks before anything
runs: executes every rank's send/recv and collectives symbolically (with
the runtime's semantics: eager sends, blocking receives, collectives as
barriers) and reports a send without its recv (or the reverse), sizes,
tags or microbatches that differ, a collective that some member of its
group skips or issues with another size, and any cyclic wait (deadlock),
naming the ranks, the action and op indices and the ops' provenance.
`llc-dist compile` runs the same check (llcdist-verify-plan) before it
writes a plan. Exit status 0: ok; 1: a problem (or an unreadable plan).

OPTIONS
  --max-errors N         report up to N problems (default 1: the first is
                         the one to fix; later ones are often its echoes)
  --all-ranks            simulate every rank. By default, where every rank of
                         a stage runs one program and sends only along pp
                         (or around its cp ring, sends and recvs paired),
                         one dp x tp (x cp) replica of the pipeline is
                         simulated and stands for all (docs/plan-verifier.md
                         "Replicas"); otherwise, or to name the ranks of a
                         problem, the mesh with dp, tp and cp capped at 4 (it
                         asks every question the full one does; rank numbers
                         in messages are then the smaller mesh's)
  --format text|json     output format (default text)
)";

int llcdist::cli::runVerify(Args &args) {
  std::string dir, format = "text";
  int64_t maxErrors = 1, maxAxis = 4;
  ValueFlags flags;
  flags.add("--max-errors", &maxErrors).add("--format", &format);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kVerifyHelp;
      return 0;
    }
    if (flags.match(args, a))
      continue;
    if (a == "--all-ranks") {
      maxAxis = 0;
      continue;
    }
    if (a.rfind("-", 0) == 0)
      throw UsageError{"verify: unknown option '" + a + "'"};
    if (!dir.empty())
      throw UsageError{"verify: more than one PLAN given ('" + dir + "', '" + a + "')"};
    dir = a;
  }
  if (dir.empty())
    throw UsageError{"verify: missing PLAN (a directory written by llc-dist compile -o)"};
  if (maxErrors < 1)
    throw UsageError{"--max-errors must be >= 1"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  auto plan = rt::loadPlan(dir);
  if (!plan.isOk()) {
    error(plan.status().toString());
    return kExitError;
  }
  verify::PlanVerifyResult r = verify::verifyPlan(plan.value(), maxErrors, maxAxis);
  const rt::Manifest &man = plan->manifest;
  std::string how;
  switch (r.check) {
  case verify::PlanCheck::Replica:
    if (man.worldSize() > man.meshPp)
      how = fmt::format(" (checked on one dp x tp{} replica of the pp={} pipeline, which stands "
                        "for all {}: every rank of a stage runs its program and sends only "
                        "along pp{}; --all-ranks simulates every rank)",
                        man.meshCp > 1 ? " x cp" : "", man.meshPp, man.worldSize(),
                        man.meshCp > 1 ? " or around its cp ring, each recv after the send it pairs with" : "");
    break;
  case verify::PlanCheck::SubMesh:
    how = fmt::format(" (checked on the dp={},tp={},pp={}{} sub-mesh; --all-ranks checks all {})",
                      std::min(man.meshDp, maxAxis), std::min(man.meshTp, maxAxis), man.meshPp,
                      man.meshCp > 1 ? ",cp=" + std::to_string(std::min(man.meshCp, maxAxis)) : std::string(),
                      man.worldSize());
    break;
  case verify::PlanCheck::AllRanks:
    break;
  }
  const int64_t checked = r.ranksCovered;
  const std::string &sub = how; // (a replica's verdict is always ok: see verifyPlan)
  if (format == "json") {
    json errors = json::array();
    for (const verify::VerifyError &e : r.errors) {
      json events = json::array();
      for (const verify::EventRef &ev : e.events)
        events.push_back({{"rank", ev.rank}, {"event", ev.index}});
      errors.push_back({{"kind", verify::errorKindName(e.kind)},
                        {"message", e.message},
                        {"events", events},
                        {"notes", e.notes}});
    }
    llvm::outs() << json({{"plan", dir},
                          {"ok", r.ok()},
                          {"ranks", plan->manifest.worldSize()},
                          {"ranks_checked", checked},
                          {"events", r.eventsTotal},
                          {"events_completed", r.eventsCompleted},
                          {"check", verify::planCheckName(r.check)},
                          {"ranks_simulated", r.ranksSimulated},
                          {"errors", errors}})
                        .dump(2)
                 << "\n";
    return r.ok() ? 0 : kExitError;
  }
  if (r.ok()) {
    llvm::outs() << fmt::format("llc-dist verify: {}: ok: {} communication events on {} "
                                "ranks match (sends and receives, collectives per "
                                "group) and none waits forever{}\n",
                                dir, r.eventsTotal, checked, sub);
    return 0;
  }
  error(dir + sub + ": " + r.str());
  return kExitError;
}
