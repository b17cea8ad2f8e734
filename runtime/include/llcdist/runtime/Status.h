// Status and StatusOr<T>: how runtime library code reports failure.
//
// Library code never exits and never throws across the API; it returns a Status. Only tools turn an
// error into an exit code. An error carries a code and a message; callers add context as the error
// travels up (file, tensor or field, rank) with withContext(), which prefixes "context: ":
//
//   return Status::invalidArgument("unknown dtype \"F8\"")
//       .withContext("tensor 'wte.weight'").withContext("file 'model.safetensors'");
//   // message(): "file 'model.safetensors': tensor 'wte.weight': unknown dtype \"F8\""
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace llcdist::rt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad shapes, bad ids, bad configuration
  kNotFound,         // missing file / tensor / field
  kIoError,          // open/read/write/rename failed
  kDataLoss,         // a file is malformed or truncated
  kOutOfRange,       // an index past the end of something
  kInternal,         // a bug in the runtime
  kDeadlineExceeded, // a bounded wait ran out (a collective some ranks never joined)
  kAborted,          // abandoned because another rank failed (the root cause is that rank's error)
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status ioError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status dataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status outOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status deadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefix the message with "context: " (no-op on ok). Outermost context ends up first.
  Status withContext(std::string_view context) const& {
    Status s = *this;
    return std::move(s).withContext(context);
  }
  Status withContext(std::string_view context) && {
    if (!isOk()) message_ = std::string(context) + ": " + message_;
    return std::move(*this);
  }
  Status withRank(int rank) && { return std::move(*this).withContext("rank " + std::to_string(rank)); }

  // "OK" or "<CodeName>: <message>".
  std::string toString() const;

private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-ok Status. Accessing value() of an error is a bug (asserted).
template <typename T>
class [[nodiscard]] StatusOr {
public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.isOk() && "StatusOr constructed from an ok Status without a value");
    if (status_.isOk()) status_ = Status::internal("StatusOr constructed from ok Status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool isOk() const { return status_.isOk(); }
  const Status& status() const { return status_; }

  T& value() & { assert(isOk()); return *value_; }
  const T& value() const& { assert(isOk()); return *value_; }
  T&& value() && { assert(isOk()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace llcdist::rt

#define LLCDIST_RT_CONCAT_INNER(a, b) a##b
#define LLCDIST_RT_CONCAT(a, b) LLCDIST_RT_CONCAT_INNER(a, b)

// Return the Status of `expr` from the enclosing function if it is an error.
#define LLCDIST_RETURN_IF_ERROR(expr)                          \
  do {                                                         \
    ::llcdist::rt::Status llcdist_rt_status_ = (expr);         \
    if (!llcdist_rt_status_.isOk()) return llcdist_rt_status_; \
  } while (0)

// `LLCDIST_ASSIGN_OR_RETURN(auto x, makeX());` — declare/assign from a StatusOr or return its error.
#define LLCDIST_ASSIGN_OR_RETURN(lhs, expr) \
  LLCDIST_ASSIGN_OR_RETURN_IMPL(LLCDIST_RT_CONCAT(llcdist_rt_or_, __LINE__), lhs, expr)
#define LLCDIST_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.isOk()) return tmp.status();               \
  lhs = std::move(tmp).value()
