//===- ApiBoundary.h - No exception leaves the runtime's API ----*- C++ -*-===//
//
// Every call of the runtime's API returns a Status. An exception from below
// it (std::bad_alloc of an allocation sized by a file, a library's error)
// must not end the trainer's process, nor leave a collective call on one
// rank while the others wait for it: the calls that read files or
// allocate state run their bodies through guardedCall, which turns an
// exception into a status (for a collective call, the rank's outcome for
// the agreement that follows).
// Internal to the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_APIBOUNDARY_H
#define MUON_RUNTIME_LIB_APIBOUNDARY_H

#include "muon/Support/Status.h"

#include <string>

namespace muon::runtime {

/// The status of the exception being handled (call it in a catch block):
/// ResourceExhausted for std::bad_alloc, Internal for any other, with
/// `what` (the call) in front of its message.
Status statusOfCurrentException(const std::string &what) noexcept;

/// Runs `body` (returning a Status) and returns its status, or the status
/// of an exception it lets out.
template <typename Fn>
Status guardedCall(const std::string &what, Fn &&body) noexcept {
  try {
    return body();
  } catch (...) {
    return statusOfCurrentException(what);
  }
}

} // namespace muon::runtime

#endif // MUON_RUNTIME_LIB_APIBOUNDARY_H
