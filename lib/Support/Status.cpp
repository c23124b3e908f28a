//===- Status.cpp - What a call that can fail reports ---------------------===//
#include "muon/Support/Status.h"

#include <cstdio>

namespace muon {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "ok";
  case StatusCode::Cancelled:
    return "cancelled";
  case StatusCode::InvalidArgument:
    return "invalid argument";
  case StatusCode::DeadlineExceeded:
    return "deadline exceeded";
  case StatusCode::NotFound:
    return "not found";
  case StatusCode::ResourceExhausted:
    return "resource exhausted";
  case StatusCode::FailedPrecondition:
    return "failed precondition";
  case StatusCode::Unimplemented:
    return "unimplemented";
  case StatusCode::Internal:
    return "internal";
  case StatusCode::Unavailable:
    return "unavailable";
  case StatusCode::DataLoss:
    return "data loss";
  }
  return "unknown";
}

Status deadlineExceeded(double seconds) {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", seconds);
  return Status(StatusCode::DeadlineExceeded, "no answer within " +
                                                  std::string(limit) +
                                                  " s: a peer died or stalled");
}

} // namespace muon
