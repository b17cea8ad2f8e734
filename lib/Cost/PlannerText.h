//===- PlannerText.h - the planner's number formatting -----------*- C++ -*-===//
//
// What the search (Planner.cpp) and its reports (PlannerReport.cpp) share to
// print numbers: printf into a std::string, GiB, tokens per second.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_COST_PLANNERTEXT_H
#define LLCDIST_LIB_COST_PLANNERTEXT_H

#include <cstdarg>
#include <cstdio>
#include <string>

namespace llcdist::cost::detail {

inline std::string strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strf(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    return "";
  if (size_t(n) < sizeof buf)
    return std::string(buf, size_t(n));
  std::string s(size_t(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(s.data(), s.size(), fmt, ap);
  va_end(ap);
  s.resize(size_t(n));
  return s;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline double gib(double bytes) { return bytes / kGiB; }

inline std::string fmtTokens(double t) {
  if (t >= 1e6)
    return strf("%.2f M", t / 1e6);
  if (t >= 1e3)
    return strf("%.1f k", t / 1e3);
  return strf("%.0f", t);
}

} // namespace llcdist::cost::detail

#endif // LLCDIST_LIB_COST_PLANNERTEXT_H
