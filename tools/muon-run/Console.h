//===- Console.h - Whole lines on stdout and stderr -------------*- C++ -*-===//
//
// Ranks share the terminal through mpirun, and tests read stdout and stderr
// merged: every line goes out in one write(2), so lines of different ranks
// and streams never interleave mid-line.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_TOOLS_MUON_RUN_CONSOLE_H
#define MUON_TOOLS_MUON_RUN_CONSOLE_H

#include <string>

namespace muon::tool {

/// `text` (one or more lines; a final newline is added) on stdout.
void printLines(const std::string &text);
/// "muon-run: <text>" on stderr.
void printError(const std::string &text);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_CONSOLE_H
