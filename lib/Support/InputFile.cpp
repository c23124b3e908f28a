//===- InputFile.cpp - Files read by the runtime and the tools -----------===//
#include "muon/Support/InputFile.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Limits.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace muon {
namespace {

std::string quoted(const std::string &path) {
  return "'" + escapeBytes(path) + "'";
}

std::string tooLarge(const std::string &what, const std::string &path,
                     int64_t limit) {
  return "cannot read " + what + " " + quoted(path) +
         ": it is larger than the limit of " + limits::describe(limit) +
         " bytes";
}

/// Appends what `fd` has left, in blocks, up to `limit` bytes in all;
/// false with `error` set when it fails or goes past the limit.
bool readToEnd(int fd, const std::string &what, const std::string &path,
               int64_t limit, std::string &text, std::string &error) {
  char block[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, block, sizeof(block));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = "cannot read " + what + " " + quoted(path) + ": " +
              std::strerror(errno);
      return false;
    }
    if (n == 0)
      return true;
    if (static_cast<int64_t>(text.size()) + n > limit) {
      error = tooLarge(what, path, limit);
      return false;
    }
    text.append(block, static_cast<size_t>(n));
  }
}

} // namespace

std::string fileKind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFDIR:
    return "a directory";
  case S_IFIFO:
    return "a FIFO (named pipe)";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFSOCK:
    return "a socket";
  default:
    return "not a regular file";
  }
}

InputFile::InputFile(InputFile &&other) noexcept
    : descriptor(std::exchange(other.descriptor, -1)), bytes(other.bytes) {}

InputFile &InputFile::operator=(InputFile &&other) noexcept {
  if (this != &other) {
    close();
    descriptor = std::exchange(other.descriptor, -1);
    bytes = other.bytes;
  }
  return *this;
}

void InputFile::close() {
  if (descriptor >= 0)
    ::close(descriptor);
  descriptor = -1;
  bytes = 0;
}

bool InputFile::open(const std::string &path, std::string &error,
                     const std::string &what) {
  close();
  auto fail = [&](const std::string &why) {
    error = "cannot read " + what + " " + quoted(path) + ": " + why;
    close();
    return false;
  };
  descriptor =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (descriptor < 0)
    return fail(std::strerror(errno));
  struct stat st;
  if (::fstat(descriptor, &st) != 0)
    return fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fail("it is " + fileKind(st.st_mode) + ", not a regular file");
  // Reads of a regular file do not block anyway; the flag only kept the
  // open from waiting for a FIFO's writer.
  int flags = ::fcntl(descriptor, F_GETFL);
  if (flags >= 0)
    ::fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK);
  bytes = static_cast<int64_t>(st.st_size);
  return true;
}

bool InputFile::readAt(void *to, int64_t count, int64_t offset,
                       std::string &error) const {
  char *at = static_cast<char *>(to);
  if (count < 0 || offset < 0) {
    error = "a read at a negative offset or of a negative size";
    return false;
  }
  while (count > 0) {
    ssize_t got = ::pread(descriptor, at, static_cast<size_t>(count), offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      error = std::strerror(errno);
      return false;
    }
    if (got == 0) {
      error = "the file ends at byte " + std::to_string(offset) + ", before " +
              std::to_string(offset + count);
      return false;
    }
    at += got;
    offset += got;
    count -= got;
  }
  return true;
}

bool readInputFile(const std::string &path, int64_t limit, std::string &text,
                   std::string &error, const std::string &what) {
  text.clear();
  // Tools built without exceptions call this too: a file within the limit
  // that does not fit in memory is an error, not an abort.
  try {
    if (path == "-")
      return readToEnd(STDIN_FILENO, what, "<stdin>", limit, text, error);
    InputFile file;
    if (!file.open(path, error, what))
      return false;
    if (file.size() > limit) {
      error = tooLarge(what, path, limit);
      return false;
    }
    text.reserve(static_cast<size_t>(file.size()));
    return readToEnd(file.fd(), what, path, limit, text, error);
  } catch (const std::bad_alloc &) {
    text = std::string();
    error = "cannot read " + what + " " + quoted(path) +
            ": not enough memory to hold it";
    return false;
  }
}

std::string readInputPrefix(const std::string &path, size_t size) {
  InputFile file;
  std::string error;
  if (!file.open(path, error))
    return {};
  std::string prefix(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(file.fd(), prefix.data() + got, size - got, got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += static_cast<size_t>(n);
  }
  prefix.resize(got);
  return prefix;
}

} // namespace muon
