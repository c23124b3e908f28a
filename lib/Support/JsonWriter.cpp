//===- JsonWriter.cpp - Compact JSON written as a stream ------------------===//
#include "muon/Support/JsonWriter.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace muon::json {

void Writer::separate() {
  if (afterKey) {
    afterKey = false;
    return;
  }
  if (!first.empty()) {
    if (!first.back())
      out += ',';
    first.back() = false;
  }
}

void Writer::beginObject() {
  separate();
  out += '{';
  first.push_back(true);
}

void Writer::endObject() {
  first.pop_back();
  out += '}';
}

void Writer::beginArray() {
  separate();
  out += '[';
  first.push_back(true);
}

void Writer::endArray() {
  first.pop_back();
  out += ']';
}

void Writer::key(std::string_view k) {
  separate();
  out += quote(k);
  out += ':';
  afterKey = true;
}

void Writer::value(int64_t v) {
  separate();
  char buffer[24];
  auto end = std::to_chars(buffer, buffer + sizeof(buffer), v).ptr;
  out.append(buffer, end);
}

void Writer::value(double v) {
  separate();
  if (!std::isfinite(v)) { // JSON has no spelling for these
    out += "null";
    return;
  }
  char buffer[32];
  auto end = std::to_chars(buffer, buffer + sizeof(buffer), v).ptr;
  std::string_view text(buffer, end - buffer);
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos)
    out += ".0";
}

void Writer::value(bool v) {
  separate();
  out += v ? "true" : "false";
}

void Writer::value(std::string_view v) {
  separate();
  out += quote(v);
}

void Writer::null() {
  separate();
  out += "null";
}

void Writer::integers(const std::vector<int64_t> &values) {
  beginArray();
  for (int64_t v : values)
    value(v);
  endArray();
}

std::string quote(std::string_view s) {
  std::string q = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      q += "\\\"";
      break;
    case '\\':
      q += "\\\\";
      break;
    case '\n':
      q += "\\n";
      break;
    case '\t':
      q += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char code[8];
        std::snprintf(code, sizeof(code), "\\u%04x", c);
        q += code;
      } else {
        q += c;
      }
    }
  }
  return q + "\"";
}

} // namespace muon::json
