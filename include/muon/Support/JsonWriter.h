//===- JsonWriter.h - Compact JSON written as a stream ----------*- C++ -*-===//
//
// Writes JSON text piece by piece, so that a plan with millions of
// transfers never exists as a document tree. No LLVM: the runtime links it.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_JSONWRITER_H
#define MUON_SUPPORT_JSONWRITER_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace muon::json {

class Writer {
public:
  explicit Writer(std::string &out) : out(out) {}

  void beginObject();
  void endObject();
  void beginArray();
  void endArray();
  /// The key of the next value in the current object.
  void key(std::string_view k);

  void value(int64_t v);
  void value(int v) { value(static_cast<int64_t>(v)); }
  /// Shortest text that reads back as the same double; integral values keep
  /// a ".0" so that they read back as numbers, not integers.
  void value(double v);
  void value(bool v);
  void value(std::string_view v);
  void value(const char *v) { value(std::string_view(v)); }
  void null();
  void integers(const std::vector<int64_t> &values);

  /// `"key": value` in one call.
  template <typename T> void member(std::string_view k, const T &v) {
    key(k);
    value(v);
  }

private:
  void separate();

  std::string &out;
  std::vector<bool> first; // per open container: nothing written yet
  bool afterKey = false;
};

/// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

} // namespace muon::json

#endif // MUON_SUPPORT_JSONWRITER_H
