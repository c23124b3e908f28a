//===- Json.h - Strict JSON reading with JSON-path errors -------*- C++ -*-===//
//
// Every JSON input (model specs, plan files) is read through here. Parsing
// is nlohmann::json's SAX parser (Debian's nlohmann-json3-dev; no LLVM), with
// our rules on top, so that a file means exactly one thing:
//  - RFC 8259 only (no `+1`, `.5`, `1.`, comments or trailing commas);
//  - integers are written as integers and fit int64; a number that
//    underflows to 0 (`1e-999`) or overflows is an error;
//  - a key given twice in one object is an error naming both places;
//  - nesting is at most limits::kMaxJsonDepth deep (the parser does not
//    recurse, and the limit keeps the document's own teardown shallow);
//  - strings are valid UTF-8 without control characters (NUL included).
// Errors are the project's one Status, InvalidArgument, with the JSON path
// of the problem ("params[2].shape[1]", "" for the document) as its
// location: the raw path, because callers nest it under their own (a plan's
// group, a spec's layer). Tools print `file: ` + describe(status), which
// shows the document as "<root>".
//
// Reader gives typed access to a parsed document by path; its first error
// sticks, so a reader can check a whole section and report once.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_JSON_H
#define MUON_SUPPORT_JSON_H

#include "muon/Support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muon::json {

using Value = nlohmann::json;

/// Parses `text` under the rules above into `out`; on an error `out` is
/// unchanged.
Status parse(std::string_view text, Value &out);

/// "a.b" and "a[3]": how paths grow.
std::string key(const std::string &path, std::string_view k);
std::string index(const std::string &path, size_t i);
/// How messages show a path: "<root>" for the document.
std::string showPath(const std::string &path);
/// A failed status whose location is a JSON path, as tools print it:
/// "path: message" ("<root>: message" for the document).
std::string describe(const Status &status);

class Reader {
public:
  static constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

  bool ok() const { return err.ok(); }
  /// The first error: InvalidArgument at its path; ok when there is none.
  const Status &error() const { return err; }
  /// Records `message` at `path` unless an error is already recorded.
  /// Always returns false.
  bool fail(const std::string &path, const std::string &message);
  void clear() { err = okStatus(); }

  /// Typed access. `v` is the value at `path`, or nullptr when the key is
  /// absent ("missing"). On a wrong type or range the error is recorded and
  /// nullptr / nothing is returned.
  const Value *object(const Value *v, const std::string &path);
  const Value *array(const Value *v, const std::string &path);
  std::optional<int64_t> integer(const Value *v, const std::string &path,
                                 int64_t min = kMin, int64_t max = kMax);
  /// An integer from `min` up to a documented limit: the message names the
  /// limit and what it counts ("ranks").
  std::optional<int64_t> limited(const Value *v, const std::string &path,
                                 int64_t min, int64_t limit,
                                 const std::string &what);
  /// A finite number (integers are numbers too).
  std::optional<double> number(const Value *v, const std::string &path);
  std::optional<bool> boolean(const Value *v, const std::string &path);
  std::optional<std::string> string(const Value *v, const std::string &path);
  /// One of `choices`.
  std::optional<std::string> oneOf(const Value *v, const std::string &path,
                                   std::initializer_list<std::string_view>
                                       choices) {
    return oneOf(v, path, std::vector<std::string_view>(choices));
  }
  std::optional<std::string> oneOf(const Value *v, const std::string &path,
                                   const std::vector<std::string_view> &choices);
  /// An array of integers in [min, max].
  std::optional<std::vector<int64_t>> integers(const Value *v,
                                               const std::string &path,
                                               int64_t min = kMin,
                                               int64_t max = kMax);

  /// The member `k` of object `object`, nullptr when absent.
  static const Value *get(const Value &object, std::string_view k);
  /// Fails at the first key of `object` (in sorted order) not in
  /// `allowed`: "unknown key 'x'; expected one of a, b".
  bool knownKeys(const Value &object, const std::string &path,
                 std::initializer_list<std::string_view> allowed) {
    return knownKeys(object, path, std::vector<std::string_view>(allowed));
  }
  bool knownKeys(const Value &object, const std::string &path,
                 const std::vector<std::string_view> &allowed);

private:
  Status err;
};

} // namespace muon::json

#endif // MUON_SUPPORT_JSON_H
