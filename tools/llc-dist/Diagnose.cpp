//===- Diagnose.cpp - llc-dist diagnose DIR -------------------------------===//
//
// Reads the flight recorder's dumps of a failed or hung run and prints which
// rank(s) never reached which communication operation, where the others
// wait, and why the compiler put that operation there (Diagnose.h,
// docs/cluster.md).
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/runtime/Diagnose.h"

using namespace llcdist;

const char *const llcdist::cli::kDiagnoseHelp = R"(llc-dist diagnose DIR [--format text|json]

Reads DIR/flight-rank-R.json, the flight recorder's dumps that `llc-dist run`
writes (--flight-dir, default llc-dist-flight) when a communication call
outlives --comm-timeout or the run fails with a rank waiting, and matches the
ranks' records by channel (a collective's group, or a sender-receiver pair)
and sequence number. It prints, for each operation where ranks wait, the
ranks that never reached it, the ranks waiting there and for how long, the
plan op that issued it (program, subroutine, op index, step, microbatch),
why the compiler put it there (the op's provenance) and what the missing
ranks do instead; last, the root cause: the ranks that never reached an
operation the others wait at and wait at none themselves (computing,
loading data, stopped, or dead: a rank that left no dump).

Only the newest run's dumps in DIR are read (older ones are listed).

OPTIONS
  --format text|json     the diagnosis as text (default) or as JSON
)";

int llcdist::cli::runDiagnose(Args &args) {
  std::string dir, format = "text";
  ValueFlags flags;
  flags.add("--format", &format);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kDiagnoseHelp;
      return 0;
    }
    if (flags.match(args, a))
      continue;
    if (a.rfind("-", 0) == 0)
      throw UsageError{"diagnose: unknown option '" + a + "'"};
    if (!dir.empty())
      throw UsageError{"diagnose: more than one DIR given ('" + dir + "', '" + a + "')"};
    dir = a;
  }
  if (dir.empty())
    throw UsageError{"diagnose: missing DIR (the --flight-dir of the run, default llc-dist-flight)"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  rt::StatusOr<rt::FlightSet> set = rt::loadFlightDir(dir);
  if (!set.isOk()) {
    error(set.status().toString());
    return kExitError;
  }
  llvm::outs() << (format == "json" ? rt::diagnoseJson(*set) : rt::diagnoseText(*set));
  return 0;
}
