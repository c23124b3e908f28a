//===- ApiBoundary.cpp - No exception leaves the runtime's API ------------===//
#include "ApiBoundary.h"

#include "muon/Support/Escape.h"

#include <exception>
#include <new>

namespace muon::runtime {

Status statusOfCurrentException(const std::string &what) noexcept {
  try {
    const std::string context = what.empty() ? "" : what + ": ";
    try {
      throw;
    } catch (const std::bad_alloc &) {
      return Status(StatusCode::ResourceExhausted,
                    context + "out of host memory");
    } catch (const std::exception &e) {
      return Status(StatusCode::Internal,
                    context + "unexpected error: " + escapeBytes(e.what()));
    } catch (...) {
      return Status(StatusCode::Internal, context + "unexpected error");
    }
  } catch (...) {
    // Building the message itself failed (no memory left for it).
    return Status(StatusCode::ResourceExhausted, "out of host memory");
  }
}

} // namespace muon::runtime
