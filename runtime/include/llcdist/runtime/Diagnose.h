// `llc-dist diagnose DIR`: reads the flight recorder's dumps (FlightRecorder.h) of a run and says
// which rank(s) never reached which communication operation, where the others wait, and why the
// compiler put that operation there (docs/cluster.md "Hangs: the flight recorder").
//
// Matching. Records of different ranks match by (channel, seq). A rank waits at a record that is
// started (still in the communicator) or failed (it gave up: a timeout, or the job's abort); its
// latest such record is where it is blocked. For each blocked operation (channel, seq) and each other
// member of its channel (a collective's group; a send/recv's two ranks): it arrived when it has a
// record (channel, seq) or a later one on the channel; it never reached it when its records stop
// before (it made fewer calls on the channel); unknown when it left no dump (killed, or stopped
// before it could write one). A rank that never reached an operation and waits nowhere itself (its
// last call completed) is a root cause: it is computing, loading data, or stopped; so is a rank
// without a dump. A rank that never reached one operation because it waits at another points to the
// ranks that one waits for, and so on.
//
// A directory may hold dumps of several runs: the newest run's (the largest start time in run_id)
// are read and the others listed as ignored. Malformed dumps are errors naming the file and field.
#pragma once

#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Status.h"

#include <string>
#include <vector>

namespace llcdist::rt {

struct FlightDump {
  std::string file;
  int rank = 0;
  std::string runId, plan, host, reason;
  int worldSize = 1;
  Mesh mesh;
  double commTimeoutSeconds = 0;
  int64_t dumpedUs = 0, dropped = 0;
  std::vector<CommRecord> records;
};

// Parses one dump; errors name `file` and the field.
StatusOr<FlightDump> parseFlightDump(const std::string& text, const std::string& file);

struct FlightSet {
  std::string dir, runId;
  int worldSize = 1;
  Mesh mesh;
  std::vector<FlightDump> dumps;     // the newest run's, by rank
  std::vector<std::string> ignored;  // files of other runs
};
// Every DIR/flight-rank-*.json; an error when there is none, or one is malformed.
StatusOr<FlightSet> loadFlightDir(const std::string& dir);

// The diagnosis as text (what llc-dist diagnose prints) or as JSON (--format json).
std::string diagnoseText(const FlightSet& set);
std::string diagnoseJson(const FlightSet& set);

}  // namespace llcdist::rt
