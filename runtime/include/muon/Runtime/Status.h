//===- Status.h - What a runtime call reports -------------------*- C++ -*-===//
//
// Every runtime call that can fail returns a Status: a code that says what
// kind of failure it is (so that callers, and the C API, branch on it
// without reading the text) and a message that says what and where. A call
// never fails because of what its caller left in an argument: statuses are
// returned, not accumulated into output strings. The codes follow the
// canonical set that absl::Status, gRPC and IREE's runtime share; only the
// ones the runtime produces are listed.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_STATUS_H
#define MUON_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace muon::runtime {

enum class StatusCode {
  Ok = 0,
  /// Bad input: a plan, an argument, a binding, a checkpoint that does not
  /// fit. Nothing changed.
  InvalidArgument,
  /// The call is not possible in the present state (e.g. a step before
  /// every parameter is bound). Nothing changed.
  FailedPrecondition,
  /// A file or directory that is not there.
  NotFound,
  /// Data that fails its checks (a damaged checkpoint or plan file).
  DataLoss,
  /// The device has no room.
  ResourceExhausted,
  /// Something outside the process failed: a peer that did not answer in
  /// time, a transport error, a file that could not be written.
  Unavailable,
  /// The device reported an error (e.g. a CUDA error).
  Internal,
};

/// "invalid argument", "deadline exceeded", ...
const char *statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : theCode(code), theMessage(std::move(message)) {}

  bool ok() const { return theCode == StatusCode::Ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return theCode; }
  const std::string &message() const { return theMessage; }

  /// The same status with `context` in front of its message ("saving a
  /// checkpoint: " + message); an ok status stays ok.
  Status withContext(const std::string &context) const {
    if (ok())
      return *this;
    return Status(theCode, context + theMessage);
  }

private:
  StatusCode theCode = StatusCode::Ok;
  std::string theMessage;
};

inline Status okStatus() { return Status(); }
inline Status invalidArgument(std::string message) {
  return Status(StatusCode::InvalidArgument, std::move(message));
}
inline Status failedPrecondition(std::string message) {
  return Status(StatusCode::FailedPrecondition, std::move(message));
}

/// Evaluates `expr` (a Status) and returns it from the enclosing function
/// when it is not ok.
#define MUON_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    ::muon::runtime::Status muonStatus_ = (expr);                              \
    if (!muonStatus_.ok())                                                     \
      return muonStatus_;                                                      \
  } while (false)

} // namespace muon::runtime

#endif // MUON_RUNTIME_STATUS_H
