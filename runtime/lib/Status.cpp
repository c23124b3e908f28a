//===- Status.cpp - What a runtime call reports ---------------------------===//
#include "muon/Runtime/Status.h"

namespace muon::runtime {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "ok";
  case StatusCode::InvalidArgument:
    return "invalid argument";
  case StatusCode::FailedPrecondition:
    return "failed precondition";
  case StatusCode::NotFound:
    return "not found";
  case StatusCode::DataLoss:
    return "data loss";
  case StatusCode::ResourceExhausted:
    return "resource exhausted";
  case StatusCode::Unavailable:
    return "unavailable";
  case StatusCode::Internal:
    return "internal";
  }
  return "unknown";
}

} // namespace muon::runtime
