//===- Format.cpp - printf into a std::string -----------------------------===//
#include "muon/Support/Format.h"

#include <cstdarg>
#include <cstdio>

namespace muon {

std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  int size = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string text;
  if (size > 0) {
    text.resize(static_cast<size_t>(size) + 1);
    std::vsnprintf(text.data(), text.size(), fmt, again);
    text.resize(static_cast<size_t>(size));
  }
  va_end(again);
  return text;
}

std::string formatList(const std::vector<int64_t> &values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i)
    s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

} // namespace muon
