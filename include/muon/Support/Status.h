//===- Status.h - What a call that can fail reports -------------*- C++ -*-===//
//
// One error convention for the compiler's plain-C++ libraries, the runtime,
// its transports, the C API and the Python extension: a call that can fail
// returns a Status (a code that says what kind of failure, so callers, the C
// API and Python branch on it without reading the text; a message that says
// what; optionally where, as a JSON path or a source location), or a
// StatusOr<T> when it also has a result. The codes and their numbers are the
// canonical set that absl::Status, gRPC and IREE's runtime share, so the C
// API hands them out unchanged; only the ones the project produces are
// listed.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_STATUS_H
#define MUON_SUPPORT_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace muon {

enum class StatusCode {
  Ok = 0,
  /// The caller stopped the work (a step cancelled from another thread).
  Cancelled = 1,
  /// Bad input: a plan, an argument, a binding, a checkpoint that does not
  /// fit. Nothing changed.
  InvalidArgument = 3,
  /// A peer did not answer within the deadline the caller chose.
  DeadlineExceeded = 4,
  /// A file, directory, parameter or group that is not there.
  NotFound = 5,
  /// The device has no room.
  ResourceExhausted = 8,
  /// The call is not possible in the present state (e.g. a step before
  /// every parameter is bound). Nothing changed.
  FailedPrecondition = 9,
  /// Something this build or this backend does not do.
  Unimplemented = 12,
  /// The device reported an error (e.g. a CUDA error), or a broken
  /// invariant of the project's own.
  Internal = 13,
  /// Something outside the process failed: a transport error, a file that
  /// could not be written.
  Unavailable = 14,
  /// Data that fails its checks (a damaged checkpoint or plan file).
  DataLoss = 15,
};

/// One past the largest code: the size of a table indexed by code.
inline constexpr int kStatusCodeCount = 16;

/// "invalid argument", "deadline exceeded", ...
const char *statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string location = {})
      : theCode(code), theMessage(std::move(message)),
        theLocation(std::move(location)) {}

  bool ok() const { return theCode == StatusCode::Ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return theCode; }
  const std::string &message() const { return theMessage; }
  /// Where the failure is: a JSON path ("groups[1].lr"), a source location
  /// ("model.mlir:3:7"); "" when the message says it or nothing does.
  const std::string &location() const { return theLocation; }
  /// What a user reads: "location: message", or the message alone.
  std::string text() const {
    return theLocation.empty() ? theMessage : theLocation + ": " + theMessage;
  }

  /// The same status with `context` in front of its message ("saving a
  /// checkpoint: " + message); an ok status stays ok.
  Status withContext(const std::string &context) const {
    if (ok())
      return *this;
    return Status(theCode, context + theMessage, theLocation);
  }

private:
  StatusCode theCode = StatusCode::Ok;
  std::string theMessage;
  std::string theLocation;
};

inline Status okStatus() { return Status(); }
inline Status cancelled(std::string message) {
  return Status(StatusCode::Cancelled, std::move(message));
}
inline Status invalidArgument(std::string message, std::string location = {}) {
  return Status(StatusCode::InvalidArgument, std::move(message),
                std::move(location));
}
inline Status notFound(std::string message) {
  return Status(StatusCode::NotFound, std::move(message));
}
inline Status failedPrecondition(std::string message) {
  return Status(StatusCode::FailedPrecondition, std::move(message));
}
inline Status unimplemented(std::string message) {
  return Status(StatusCode::Unimplemented, std::move(message));
}
inline Status internalError(std::string message) {
  return Status(StatusCode::Internal, std::move(message));
}
inline Status unavailable(std::string message) {
  return Status(StatusCode::Unavailable, std::move(message));
}
inline Status dataLoss(std::string message) {
  return Status(StatusCode::DataLoss, std::move(message));
}
/// A wait with no answer within `seconds`: "no answer within 2 s: a peer
/// died or stalled". Every transport reports a timeout with it. It names no
/// tool flag: the caller chose the deadline, so a tool that prints it adds
/// its own hint, by the code.
Status deadlineExceeded(double seconds);

/// A result or the Status that says why there is none. Holds a value
/// exactly when status().ok().
template <typename T> class [[nodiscard]] StatusOr {
public:
  /// A failure; `status` must not be ok.
  StatusOr(Status status) : theStatus(failureOf(std::move(status))) {}
  StatusOr(T value) : theValue(std::move(value)) {}

  bool ok() const { return theStatus.ok(); }
  const Status &status() const & { return theStatus; }
  Status status() && { return std::move(theStatus); }

  T &value() & { return *theValue; }
  const T &value() const & { return *theValue; }
  T &&value() && { return std::move(*theValue); }
  T &operator*() & { return *theValue; }
  const T &operator*() const & { return *theValue; }
  T *operator->() { return &*theValue; }
  const T *operator->() const { return &*theValue; }

private:
  /// `status`, which must be a failure: an ok one becomes Internal (in a
  /// release build; a debug build stops here).
  static Status failureOf(Status status) {
    assert(!status.ok() && "a StatusOr made from an ok Status has no value");
    if (status.ok())
      return internalError("a result without a value");
    return status;
  }

  Status theStatus;
  std::optional<T> theValue;
};

} // namespace muon

#define MUON_STATUS_CONCAT_INNER(a, b) a##b
#define MUON_STATUS_CONCAT(a, b) MUON_STATUS_CONCAT_INNER(a, b)

/// Evaluates `expr` (a Status) and returns it from the enclosing function
/// when it is not ok.
#define MUON_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    ::muon::Status muonStatus_ = (expr);                                       \
    if (!muonStatus_.ok())                                                     \
      return muonStatus_;                                                      \
  } while (false)

/// `MUON_ASSIGN_OR_RETURN(auto x, call())`: evaluates `call()` (a
/// StatusOr), returns its status from the enclosing function on failure,
/// and otherwise declares or assigns `lhs` from its value.
#define MUON_ASSIGN_OR_RETURN(lhs, expr)                                       \
  MUON_ASSIGN_OR_RETURN_IMPL(MUON_STATUS_CONCAT(muonStatusOr_, __LINE__), lhs, \
                             expr)
#define MUON_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return std::move(tmp).status();                                            \
  lhs = std::move(tmp).value()

#endif // MUON_SUPPORT_STATUS_H
