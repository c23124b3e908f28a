//===- Console.cpp - Whole lines on stdout and stderr ---------------------===//
#include "Console.h"

#include "muon/Support/Escape.h"

#include <cerrno>
#include <unistd.h>

namespace muon::tool {

static void writeWhole(int fd, std::string text) {
  if (text.empty() || text.back() != '\n')
    text += '\n';
  const char *at = text.data();
  size_t left = text.size();
  while (left) {
    ssize_t n = ::write(fd, at, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    at += n;
    left -= n;
  }
}

void printLines(const std::string &text) {
  // Line by line: a write is atomic on a pipe up to PIPE_BUF bytes only.
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    writeWhole(STDOUT_FILENO, text.substr(begin, end - begin + 1));
    begin = end + 1;
  }
}

void printError(const std::string &text) {
  // Messages quote input (names, paths, bytes of a file): escaped.
  writeWhole(STDERR_FILENO,
             "muon-run: " + escapeBytes(text, {}, /*keepNewlines=*/true));
}

} // namespace muon::tool
