//===- StatusTesting.h - gtest checks of muon::Status -----------*- C++ -*-===//
//
// EXPECT_OK / ASSERT_OK(expr): expr (a Status or a StatusOr) is ok, else the
// test fails with the status's text. ASSERT_OK_AND_ASSIGN(lhs, expr): expr
// (a StatusOr) is ok, and its value goes into lhs. failureText(expr): the
// text of a status that must be a failure, for the checks of its message.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_STATUSTESTING_H
#define MUON_UNITTESTS_STATUSTESTING_H

#include "muon/Support/Status.h"

#include <gtest/gtest.h>

#include <string>

namespace muon::testing {

inline const Status &statusOf(const Status &status) { return status; }
template <typename T> const Status &statusOf(const StatusOr<T> &result) {
  return result.status();
}

template <typename S>
::testing::AssertionResult isOk(const char *expression, const S &result) {
  const Status &status = statusOf(result);
  if (status.ok())
    return ::testing::AssertionSuccess();
  // The code's number: statusCodeName is MuonSupport's, which not every
  // test links.
  return ::testing::AssertionFailure()
         << expression << " failed (code " << static_cast<int>(status.code())
         << "): " << status.text();
}

/// The text of `result`'s status, which must be a failure ("" and a test
/// failure when it is ok).
template <typename S> std::string failureText(const S &result) {
  const Status &status = statusOf(result);
  if (status.ok())
    ADD_FAILURE() << "expected a failure, the call succeeded";
  return status.text();
}

} // namespace muon::testing

using muon::testing::failureText;

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::muon::testing::isOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::muon::testing::isOk, expr)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                        \
  ASSERT_OK_AND_ASSIGN_IMPL(MUON_STATUS_CONCAT(muonTestResult_, __LINE__),     \
                            lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)                              \
  auto tmp = (expr);                                                           \
  ASSERT_OK(tmp);                                                              \
  lhs = std::move(tmp).value()

#endif // MUON_UNITTESTS_STATUSTESTING_H
