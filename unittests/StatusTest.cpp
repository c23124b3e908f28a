//===- StatusTest.cpp - The one error convention
//---------------------------===//
#include "muon/Support/Status.h"

#include <gtest/gtest.h>

#include <memory>

using namespace muon;

namespace {

TEST(Status, CodesKeepTheirCanonicalNumbers) {
  // The C API hands the numbers out unchanged (muon/runtime.h), and Python
  // picks its exception class by them.
  EXPECT_EQ(static_cast<int>(StatusCode::Ok), 0);
  EXPECT_EQ(static_cast<int>(StatusCode::Cancelled), 1);
  EXPECT_EQ(static_cast<int>(StatusCode::InvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(StatusCode::DeadlineExceeded), 4);
  EXPECT_EQ(static_cast<int>(StatusCode::NotFound), 5);
  EXPECT_EQ(static_cast<int>(StatusCode::ResourceExhausted), 8);
  EXPECT_EQ(static_cast<int>(StatusCode::FailedPrecondition), 9);
  EXPECT_EQ(static_cast<int>(StatusCode::Unimplemented), 12);
  EXPECT_EQ(static_cast<int>(StatusCode::Internal), 13);
  EXPECT_EQ(static_cast<int>(StatusCode::Unavailable), 14);
  EXPECT_EQ(static_cast<int>(StatusCode::DataLoss), 15);
  EXPECT_LT(static_cast<int>(StatusCode::DataLoss), kStatusCodeCount);
  EXPECT_STREQ(statusCodeName(StatusCode::DeadlineExceeded),
               "deadline exceeded");
  EXPECT_STREQ(statusCodeName(static_cast<StatusCode>(2)), "unknown");
}

TEST(Status, ContextKeepsTheCodeAndTheLocation) {
  Status plain = invalidArgument("expected a number", "groups[1].lr");
  EXPECT_FALSE(plain.ok());
  EXPECT_EQ(plain.text(), "groups[1].lr: expected a number");
  Status framed = plain.withContext("reading the spec: ");
  EXPECT_EQ(framed.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(framed.location(), "groups[1].lr");
  EXPECT_EQ(framed.message(), "reading the spec: expected a number");
  EXPECT_TRUE(okStatus().withContext("anything: ").ok());
  EXPECT_EQ(okStatus().text(), "");
}

TEST(Status, ATimeoutIsToldByItsCode) {
  Status late = deadlineExceeded(0.25).withContext("waiting for round 3: ");
  EXPECT_EQ(late.code(), StatusCode::DeadlineExceeded);
  EXPECT_EQ(late.message(),
            "waiting for round 3: no answer within 0.25 s: a peer died or "
            "stalled");
}

StatusOr<int> half(int n) {
  if (n % 2)
    return invalidArgument(std::to_string(n) + " is odd");
  return n / 2;
}

StatusOr<int> quarter(int n) {
  MUON_ASSIGN_OR_RETURN(int h, half(n));
  MUON_ASSIGN_OR_RETURN(h, half(h)); // assigns to an existing name too
  return h;
}

Status checkEven(int n) {
  MUON_RETURN_IF_ERROR(half(n).status());
  return okStatus();
}

TEST(StatusOr, HoldsAValueOrWhyNot) {
  StatusOr<int> q = quarter(12);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 3);
  StatusOr<int> odd = quarter(6); // 6 -> 3, which is odd
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(odd.status().message(), "3 is odd");
  EXPECT_TRUE(checkEven(4).ok());
  EXPECT_EQ(checkEven(5).message(), "5 is odd");
}

TEST(StatusOr, MovesItsValueOut) {
  StatusOr<std::unique_ptr<int>> made = std::make_unique<int>(7);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<int> taken = std::move(made).value();
  ASSERT_TRUE(taken);
  EXPECT_EQ(*taken, 7);
}

} // namespace
