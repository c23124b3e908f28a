//===- JsonTest.cpp - Strict JSON reading ---------------------------------===//
#include "muon/Support/Json.h"
#include "muon/Support/Limits.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace muon;

namespace {
/// The error of parsing `text` ("path: message"), or "" when it parses.
std::string parseError(const std::string &text) {
  json::Value v;
  Status status = json::parse(text, v);
  return status.ok() ? "" : json::describe(status);
}
} // namespace

TEST(Json, AcceptsPlainJson) {
  json::Value v;
  Status status =
      json::parse(R"({"a": [1, -2, 3.5, "x", true, null], "b": {}})", v);
  ASSERT_TRUE(status.ok()) << json::describe(status);
  EXPECT_EQ(v["a"][1].get<int64_t>(), -2);
  EXPECT_TRUE(v["a"][2].is_number_float());
  EXPECT_TRUE(v["b"].is_object());
}

TEST(Json, RefusesLooseNumbers) {
  for (const char *bad : {"[+1]", "[.5]", "[1.]", "[01]", "[0x10]", "[NaN]",
                          "[Infinity]", "[1,]", "{\"a\":1,}"})
    EXPECT_NE(parseError(bad).find("invalid JSON"), std::string::npos) << bad;
  EXPECT_EQ(parseError("[1e-999]"),
            "[0]: the number 1e-999 is too small for a double and would read "
            "as 0 (line 1, column 2)");
  EXPECT_NE(parseError("[1e999]").find("invalid JSON"), std::string::npos);
  EXPECT_NE(parseError("{\"n\": 9223372036854775808}")
                .find("n: the integer 9223372036854775808 is out of range"),
            std::string::npos);
  EXPECT_NE(parseError("[123456789012345678901234567890]")
                .find("[0]: the integer 123456789012345678901234567890 is out "
                      "of range"),
            std::string::npos);
  EXPECT_EQ(parseError("[0.0, -0, 1e-300, 9223372036854775807]"), "");
}

TEST(Json, DuplicateKeysNameBothPlaces) {
  EXPECT_EQ(parseError("{\"p\": {\"a\": 1,\n \"a\": 2}}"),
            "p: key 'a' is given twice (line 1, column 8 and line 2, column "
            "2)");
}

TEST(Json, RefusesControlCharacters) {
  EXPECT_NE(parseError(R"({"name": "a\u0000b"})")
                .find("name: a string holds the control character U+0000"),
            std::string::npos);
  EXPECT_NE(parseError("[\"\xff\"]").find("invalid JSON"), std::string::npos);
}

TEST(Json, ErrorsQuoteTheInputEscaped) {
  // The parser's "last read" is the input's bytes: never echoed raw.
  for (const char *bad : {"{\"a\": \"\xff", "[\"\xc3\x28\"]", "[1, \x1b]"}) {
    std::string error = parseError(bad);
    EXPECT_NE(error.find("last read: '"), std::string::npos) << error;
    for (unsigned char c : error)
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " in " << error;
  }
  EXPECT_NE(parseError("{\"a\": \"\xff").find("\\xff"), std::string::npos);
}

TEST(Json, LimitsNesting) {
  std::string deep(50000, '[');
  std::string error = parseError(deep);
  EXPECT_NE(error.find("nest deeper than the limit of 64 levels"),
            std::string::npos)
      << error;
  std::string ok(limits::kMaxJsonDepth, '[');
  ok += std::string(limits::kMaxJsonDepth, ']');
  EXPECT_EQ(parseError(ok), "");
}

TEST(Json, ParseErrorsNameThePath) {
  EXPECT_NE(parseError("{\"params\": [{\"shape\": [1, +2]}]}")
                .find("params[0].shape[1]: invalid JSON: parse error"),
            std::string::npos);
  EXPECT_NE(parseError("").find("<root>: invalid JSON"), std::string::npos);
  EXPECT_NE(parseError("{} x").find("<root>: invalid JSON"),
            std::string::npos);
}

TEST(Json, ReaderChecksTypesAndRanges) {
  json::Value v;
  ASSERT_TRUE(
      json::parse(R"({"i": 3, "f": 2.0, "s": "x", "l": [1, 2, 70000]})", v)
          .ok());
  json::Reader rd;
  EXPECT_EQ(rd.integer(json::Reader::get(v, "i"), "i", 0, 10), 3);
  EXPECT_FALSE(rd.integer(json::Reader::get(v, "f"), "f"));
  EXPECT_EQ(json::describe(rd.error()),
            "f: expected an integer, got a fraction");
  rd.clear();
  EXPECT_EQ(rd.number(json::Reader::get(v, "i"), "i"), 3.0);
  EXPECT_FALSE(rd.limited(&v["l"][2], "l[2]", 1, limits::kMaxWorldSize,
                          "ranks"));
  EXPECT_EQ(json::describe(rd.error()),
            "l[2]: 70000 is above the limit of 2^16 (65536) ranks");
  rd.clear();
  EXPECT_FALSE(rd.oneOf(json::Reader::get(v, "s"), "s", {"a", "b", "c"}));
  EXPECT_EQ(json::describe(rd.error()),
            "s: unknown value \"x\"; expected \"a\", \"b\" or \"c\"");
  rd.clear();
  EXPECT_FALSE(rd.object(json::Reader::get(v, "nope"), "nope"));
  EXPECT_EQ(json::describe(rd.error()), "nope: missing");
  rd.clear();
  EXPECT_FALSE(rd.knownKeys(v, "", {"i", "f", "s"}));
  EXPECT_EQ(json::describe(rd.error()),
            "l: unknown key 'l'; expected one of i, f, s");
}

TEST(Limits, CheckedArithmetic) {
  EXPECT_EQ(parseDecimal("0"), 0);
  EXPECT_EQ(parseDecimal("9223372036854775807"), INT64_MAX);
  for (const char *bad : {"", "00", "01", "+1", "-1", "1.", " 1", "1e3",
                          "9223372036854775808"})
    EXPECT_FALSE(parseDecimal(bad)) << bad;
  EXPECT_FALSE(boundedProduct({int64_t(1) << 32, int64_t(1) << 32}, INT64_MAX));
  EXPECT_EQ(boundedProduct({4, 5}, 20), 20);
  EXPECT_FALSE(boundedProduct({4, 6}, 20));
  EXPECT_EQ(limits::describe(65536), "2^16 (65536)");
  EXPECT_EQ(limits::describe(99), "99");
}
