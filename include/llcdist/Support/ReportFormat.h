//===- ReportFormat.h - numbers as the compile reports print them -*- C++ -*-===//
//
// One spelling of bytes, counts and FLOPs for every report (memory,
// communication, pipeline, the OOM advice), so two reports never print the
// same quantity two ways.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_REPORTFORMAT_H
#define LLCDIST_SUPPORT_REPORTFORMAT_H

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace llcdist {

/// 1234567 -> "1,234,567".
inline std::string groupDigits(int64_t n) {
  std::string s = std::to_string(n), out;
  int c = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (c && c % 3 == 0 && *it != '-')
      out.push_back(',');
    out.push_back(*it);
    ++c;
  }
  return std::string(out.rbegin(), out.rend());
}

/// FLOPs and other large magnitudes: four significant digits.
inline std::string sci(double x) { return fmt::format("{:.4g}", x); }

/// Bytes for people: GiB, MiB or KiB, whichever reads best.
inline std::string humanBytes(int64_t bytes) {
  double b = double(bytes);
  if (b >= 1073741824.0)
    return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= 1048576.0)
    return fmt::format("{:.2f} MiB", b / 1048576.0);
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

/// Bytes in MiB with two decimals and no unit (the columns of a MiB table).
inline std::string mebibytes(int64_t bytes) {
  return fmt::format("{:.2f}", double(bytes) / 1048576.0);
}

} // namespace llcdist

#endif
