//===- Escape.cpp - Input bytes made safe to print ------------------------===//
#include "muon/Support/Escape.h"

#include <cstdint>

namespace muon {
namespace {

/// The length of the well-formed UTF-8 sequence of a printable character
/// (U+00A0 and up) at the start of `rest`, or 0.
size_t printableUtf8(std::string_view rest) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(rest[i]); };
  unsigned char lead = byte(0);
  size_t length;
  uint32_t min, code;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, min = 0xa0, code = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, min = 0x800, code = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, min = 0x10000, code = lead & 0x07;
  } else {
    return 0;
  }
  if (rest.size() < length)
    return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80)
      return 0;
    code = code << 6 | (byte(i) & 0x3f);
  }
  // Overlong forms, C1 controls, surrogates, beyond U+10FFFF.
  if (code < min || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff)
    return 0;
  return length;
}

} // namespace

std::string escapeBytes(std::string_view bytes, std::string_view alsoEscape,
                        bool keepNewlines) {
  static const char *hex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    unsigned char c = static_cast<unsigned char>(bytes[at]);
    bool listed =
        alsoEscape.find(static_cast<char>(c)) != std::string_view::npos;
    if (!listed && ((c >= 0x20 && c < 0x7f) || (c == '\n' && keepNewlines))) {
      out += static_cast<char>(c);
      ++at;
      continue;
    }
    if (!listed && c >= 0x80)
      if (size_t n = printableUtf8(bytes.substr(at))) {
        out.append(bytes.substr(at, n));
        at += n;
        continue;
      }
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
    ++at;
  }
  return out;
}

} // namespace muon
