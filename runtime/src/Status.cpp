#include "llcdist/runtime/Status.h"

namespace llcdist::rt {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::kOk: return "OK";
  case StatusCode::kInvalidArgument: return "InvalidArgument";
  case StatusCode::kNotFound: return "NotFound";
  case StatusCode::kIoError: return "IoError";
  case StatusCode::kDataLoss: return "DataLoss";
  case StatusCode::kOutOfRange: return "OutOfRange";
  case StatusCode::kInternal: return "Internal";
  case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
  case StatusCode::kAborted: return "Aborted";
  }
  return "Unknown";
}

std::string Status::toString() const {
  if (isOk()) return "OK";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace llcdist::rt
