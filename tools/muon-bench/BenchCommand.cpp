//===- BenchCommand.cpp - What every muon-bench command does first --------===//
#include "BenchCommand.h"

#include <cstdio>

namespace muon::bench {

int fail(const std::string &message) {
  std::fprintf(stderr, "muon-bench: %s\n", message.c_str());
  return 2;
}

std::optional<int> parseFlags(cli::Parser &parser, int argc, char **argv) {
  std::string message;
  switch (parser.parse(argc, argv, message)) {
  case cli::Parser::Outcome::Help:
    std::fputs(message.c_str(), stdout);
    return 0;
  case cli::Parser::Outcome::Error:
    return fail(message);
  case cli::Parser::Outcome::Run:
    break;
  }
  return std::nullopt;
}

} // namespace muon::bench
