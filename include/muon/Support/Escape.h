//===- Escape.h - Input bytes made safe to print ----------------*- C++ -*-===//
//
// Error messages quote what they found (a magic, a name, the bytes a JSON
// parser stopped at). What they quote comes from files and flags, so it
// may hold control characters, terminal escape sequences or bytes that are
// not UTF-8: printed raw, they garble a terminal or a log. Every message
// that quotes input goes through escapeBytes, which keeps what is printable
// and writes everything else as \xNN.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_ESCAPE_H
#define MUON_SUPPORT_ESCAPE_H

#include <string>
#include <string_view>

namespace muon {

/// `bytes` as printable text: printable ASCII, and well-formed UTF-8 of
/// characters from U+00A0 up, stay as they are; every other byte (C0 and C1
/// control characters, DEL, bytes of malformed, overlong or surrogate
/// UTF-8) becomes `\xNN` (two lowercase hex digits), and so does every
/// byte listed in `alsoEscape` (a quoted field passes "\"\\" so that its
/// quotes and backslashes cannot be confused with the escapes). With
/// `keepNewlines`, '\n' stays (a message of several lines). Text that
/// is already printable comes back unchanged.
std::string escapeBytes(std::string_view bytes,
                        std::string_view alsoEscape = {},
                        bool keepNewlines = false);

} // namespace muon

#endif // MUON_SUPPORT_ESCAPE_H
