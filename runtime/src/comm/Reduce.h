// What the communicators share (Communicator.h): a collective call's request, compared across the
// members of a group, the reductions in member order that make every member's result, and every
// communicator's, the same bits, and the phrases of their messages.
#pragma once

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Communicator.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace llcdist::rt::comm {

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllV };
inline const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllToAll:
      return "all_to_all";
    case Kind::kAllToAllV:
      return "all_to_all_v";
  }
  return "?";
}
// A point-to-point message's match: "(count C, tag T, microbatch M)", the dtype after the count when
// it is not f32 ("(count C bf16, ...").
inline std::string triple(int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) {
  return "(count " + std::to_string(count) + (dtype == CommDType::kF32 ? "" : " " + std::string(commDTypeName(dtype))) +
         ", tag " + std::to_string(tag) + ", microbatch " + std::to_string(microbatch) + ")";
}

// Calls f with a value of the element type `dtype` is reduced in: float, double, or uint16_t holding
// bf16 bits (the type argument of reduceMembers and of the in-process communicator's reductions).
template <typename F>
void withElementType(CommDType dtype, F&& f) {
  switch (dtype) {
    case CommDType::kF32:
      f(float{});
      return;
    case CommDType::kF64:
      f(double{});
      return;
    case CommDType::kBF16:
      f(uint16_t{});
      return;
    case CommDType::kI32:  // summed exactly (the plan only sums i32 buffers)
      f(int32_t{});
      return;
  }
}

// "[0, 1, 2]".
inline std::string rankList(const std::vector<int>& g) {
  std::string s = "[";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? ", " : "") + std::to_string(g[i]);
  return s + "]";
}

// A timeout in seconds, "%.3g".
inline std::string secondsStr(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::chrono::duration<double>(t).count());
  return buf;
}

inline const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

// What one member asked for; every member of a call must ask for the same thing.
struct Request {
  Kind kind = Kind::kAllReduce;
  CommDType dtype = CommDType::kF32;
  ReduceOp op = ReduceOp::kSum;
  // all_reduce: count; all_to_all: count (a block); all_to_all_v: count (chunks per member), inner (row
  // elements); the others: outer, inner
  int64_t count = 0, outer = 0, inner = 0;
  // all_to_all_v's own side of the call (not compared: each member's rows and splits).
  int64_t xRows = 0, yRows = 0;
  const int32_t* sendSplits = nullptr;
  int32_t* recvSplits = nullptr;
  bool operator==(const Request& o) const {
    return kind == o.kind && dtype == o.dtype && op == o.op && count == o.count && outer == o.outer && inner == o.inner;
  }
  std::string describe() const {
    std::string s = kindName(kind);
    if (kind == Kind::kAllReduce)
      s += "(" + std::string(opName(op)) + ", " + std::to_string(count) + " " + commDTypeName(dtype) + ")";
    else if (kind == Kind::kAllToAll)
      s += "(" + std::to_string(count) + " " + commDTypeName(dtype) + " per member)";
    else if (kind == Kind::kAllToAllV)
      s += "(" + std::to_string(count) + " chunk" + (count == 1 ? "" : "s") + " per member, rows of " +
           std::to_string(inner) + " " + commDTypeName(dtype) + ")";
    else  // f32, the common case, unnamed (as before dtypes)
      s += "(outer " + std::to_string(outer) + ", inner " + std::to_string(inner) +
           (kind == Kind::kReduceScatter ? ", " + std::string(opName(op)) : std::string()) +
           (dtype != CommDType::kF32 ? ", " + std::string(commDTypeName(dtype)) : std::string()) + ")";
    return s;
  }
};

template <typename T>
T reduceOne(T acc, T v, ReduceOp op) {
  if (op == ReduceOp::kMax) return (std::isnan(acc) || v <= acc) ? acc : v;  // NaN propagates
  return acc + v;
}

// acc = reduce over members in member order; avg scales by 1/n afterwards.
template <typename T>
void reduceInto(T* acc, const std::vector<const T*>& src, int64_t count, int64_t srcOffset, ReduceOp op) {
  std::memcpy(acc, src[0] + srcOffset, size_t(count) * sizeof(T));
  for (size_t m = 1; m < src.size(); ++m) {
    const T* s = src[m] + srcOffset;
    for (int64_t i = 0; i < count; ++i) acc[i] = reduceOne(acc[i], s[i], op);
  }
  if (op == ReduceOp::kAvg) {
    const T scale = T(1) / T(src.size());
    for (int64_t i = 0; i < count; ++i) acc[i] *= scale;
  }
}

// bf16 elements (NCCL's bf16 reduction): every partial sum rounded to bf16, in member order; avg
// scales the bf16 sum by 1/n (in f32, rounded once more); max is exact.
inline void reduceInto(uint16_t* acc, const std::vector<const uint16_t*>& src, int64_t count, int64_t srcOffset,
                       ReduceOp op) {
  std::memcpy(acc, src[0] + srcOffset, size_t(count) * 2);
  for (size_t m = 1; m < src.size(); ++m) {
    const uint16_t* s = src[m] + srcOffset;
    for (int64_t i = 0; i < count; ++i) acc[i] = floatToBf16(reduceOne(bf16ToFloat(acc[i]), bf16ToFloat(s[i]), op));
  }
  if (op == ReduceOp::kAvg) {
    const float scale = 1.0f / float(src.size());
    for (int64_t i = 0; i < count; ++i) acc[i] = floatToBf16(bf16ToFloat(acc[i]) * scale);
  }
}

}  // namespace llcdist::rt::comm
