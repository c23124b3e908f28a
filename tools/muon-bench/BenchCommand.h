//===- BenchCommand.h - What every muon-bench command does first -*- C++
//-*-===//
#ifndef MUON_TOOLS_MUON_BENCH_BENCHCOMMAND_H
#define MUON_TOOLS_MUON_BENCH_BENCHCOMMAND_H

#include "muon/Support/CommandLine.h"

#include <optional>
#include <string>

namespace muon::bench {

/// Prints "muon-bench: <message>" and returns the exit code of bad input, 2.
int fail(const std::string &message);

/// Parses a command's flags; the exit code when there is nothing to run
/// (--help: 0, a bad flag: 2).
std::optional<int> parseFlags(cli::Parser &parser, int argc, char **argv);

} // namespace muon::bench

#endif // MUON_TOOLS_MUON_BENCH_BENCHCOMMAND_H
