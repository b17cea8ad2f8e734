//===- Cli.h - what llc-dist's subcommands share ---------------*- C++ -*-===//
//
// The command line (Args, ValueFlags, UsageError: exit status 2), the error
// line, the exit statuses, and the subcommands that live in their own files
// (Verify.cpp, Run.cpp); compile and info are llc-dist.cpp's.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_TOOLS_LLC_DIST_CLI_H
#define LLCDIST_TOOLS_LLC_DIST_CLI_H

#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace llcdist::cli {

constexpr int kExitError = 1; // bad input, failed compile
constexpr int kExitUsage = 2; // bad command line

struct UsageError {
  std::string message;
};

/// A tiny, strict command-line reader: every option must be known.
class Args {
public:
  Args(std::vector<std::string> a) : args(std::move(a)) {}

  bool empty() const { return pos >= args.size(); }
  const std::string &peek() const { return args[pos]; }
  std::string next() { return args[pos++]; }

  /// "--name VALUE" or "--name=VALUE".
  std::optional<std::string> value(const std::string &arg,
                                   const std::string &name) {
    if (arg == name) {
      if (empty())
        throw UsageError{name + " needs a value"};
      return next();
    }
    if (arg.rfind(name + "=", 0) == 0)
      return arg.substr(name.size() + 1);
    return std::nullopt;
  }

private:
  std::vector<std::string> args;
  size_t pos = 0;
};

inline int64_t parseInt(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    throw UsageError{flag + " expects an integer, got '" + v + "'"};
  return x;
}

inline double parseDouble(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0)
    throw UsageError{flag + " expects a number, got '" + v + "'"};
  if (!std::isfinite(x))
    throw UsageError{flag + " expects a finite number, got '" + v + "'"};
  return x;
}

/// Options that store one value: `--name V` or `--name=V` parsed into a
/// variable; one table per command instead of a chain of ifs.
class ValueFlags {
public:
  ValueFlags &add(const char *name, int64_t *dst) { return push(name, dst); }
  ValueFlags &add(const char *name, double *dst) { return push(name, dst); }
  /// A string flag: an empty value ("--device ''") is an error, never "absent".
  ValueFlags &add(const char *name, std::string *dst) { return push(name, dst); }
  /// With bounds: a value outside [lo, hi] is a usage error naming the range
  /// (so an explicit 0 or -0 never falls back to a default, and a huge value
  /// is refused before anything is sized by it).
  ValueFlags &add(const char *name, int64_t *dst, int64_t lo, int64_t hi) {
    push(name, dst);
    flags.back().ilo = lo, flags.back().ihi = hi, flags.back().bounded = true;
    return *this;
  }
  ValueFlags &add(const char *name, double *dst, double lo, double hi) {
    push(name, dst);
    flags.back().dlo = lo, flags.back().dhi = hi, flags.back().bounded = true;
    return *this;
  }

  /// Whether the command line gave `name` (for a flag whose default is a
  /// sentinel a user must not be able to type).
  bool given(const std::string &name) const { return seen.count(name) != 0; }

  /// Consumes `arg` (and its value) when it names a flag of the table.
  bool match(Args &args, const std::string &arg) const {
    for (const Flag &f : flags) {
      std::optional<std::string> v = args.value(arg, f.name);
      if (!v)
        continue;
      seen.insert(f.name);
      if (auto *i = std::get_if<int64_t *>(&f.dst)) {
        int64_t x = parseInt(f.name, *v);
        if (f.bounded && (x < f.ilo || x > f.ihi))
          throw UsageError{f.name + " must be in [" + std::to_string(f.ilo) + ", " +
                           std::to_string(f.ihi) + "], got " + *v};
        **i = x;
      } else if (auto *d = std::get_if<double *>(&f.dst)) {
        double x = parseDouble(f.name, *v);
        if (f.bounded && !(x >= f.dlo && x <= f.dhi))
          throw UsageError{f.name + " must be in [" + formatNumber(f.dlo) + ", " +
                           formatNumber(f.dhi) + "], got " + *v};
        **d = x;
      } else {
        if (v->empty())
          throw UsageError{f.name + " expects a value, got ''"};
        **std::get_if<std::string *>(&f.dst) = *v;
      }
      return true;
    }
    return false;
  }

private:
  struct Flag {
    std::string name;
    std::variant<int64_t *, double *, std::string *> dst;
    bool bounded = false;
    int64_t ilo = 0, ihi = 0;
    double dlo = 0, dhi = 0;
  };
  static std::string formatNumber(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
  template <typename T> ValueFlags &push(const char *name, T *dst) {
    flags.push_back(Flag{name, dst});
    return *this;
  }
  std::vector<Flag> flags;
  mutable std::set<std::string> seen;
};

inline void error(const std::string &msg) {
  llvm::errs() << "llc-dist: error: " << msg << "\n";
}

/// `llc-dist verify PLAN` (Verify.cpp) and `llc-dist run PLAN` (Run.cpp),
/// and their --help texts.
int runCompile(Args &args); // Compile.cpp
int runInfo(Args &args);    // Info.cpp
int runVerify(Args &args);
int runRun(Args &args);
int runDiagnose(Args &args);
int runSimulate(Args &args); // Simulate.cpp
int runPlan(Args &args);     // PlanCmd.cpp
int runExport(Args &args);   // Export.cpp
const char *compileHelp(); // CompileHelp.cpp: the pass list from the pipeline builder
extern const char *const kInfoHelp;
extern const char *const kVerifyHelp;
const char *runHelp(); // the runtime's run command (RunCommand.h)
extern const char *const kDiagnoseHelp;
extern const char *const kSimulateHelp;
extern const char *const kPlanHelp;
extern const char *const kExportHelp;

} // namespace llcdist::cli

#endif // LLCDIST_TOOLS_LLC_DIST_CLI_H
