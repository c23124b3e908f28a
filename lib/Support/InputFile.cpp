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

Status tooLarge(const std::string &what, const std::string &path,
                int64_t limit) {
  return invalidArgument("cannot read " + what + " " + quoted(path) +
                         ": it is larger than the limit of " +
                         limits::describe(limit) + " bytes");
}

/// Appends what `fd` has left, in blocks, up to `limit` bytes in all.
Status readToEnd(int fd, const std::string &what, const std::string &path,
                 int64_t limit, std::string &text) {
  char block[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, block, sizeof(block));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unavailable("cannot read " + what + " " + quoted(path) + ": " +
                         std::strerror(errno));
    if (n == 0)
      return okStatus();
    if (static_cast<int64_t>(text.size()) + n > limit)
      return tooLarge(what, path, limit);
    text.append(block, static_cast<size_t>(n));
  }
}

/// The code of a failed open() or fstat(): NotFound for a path that is not
/// there, Unavailable otherwise.
StatusCode openFailure(int error) {
  return error == ENOENT || error == ENOTDIR ? StatusCode::NotFound
                                             : StatusCode::Unavailable;
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

Status InputFile::open(const std::string &path, const std::string &what) {
  close();
  auto fail = [&](StatusCode code, const std::string &reason) {
    close();
    return Status(code, "cannot read " + what + " " + quoted(path) + ": " + reason);
  };
  descriptor =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (descriptor < 0)
    return fail(openFailure(errno), std::strerror(errno));
  struct stat st;
  if (::fstat(descriptor, &st) != 0)
    return fail(openFailure(errno), std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fail(StatusCode::InvalidArgument,
                "it is " + fileKind(st.st_mode) + ", not a regular file");
  // Reads of a regular file do not block anyway; the flag only kept the
  // open from waiting for a FIFO's writer.
  int flags = ::fcntl(descriptor, F_GETFL);
  if (flags >= 0)
    ::fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK);
  bytes = static_cast<int64_t>(st.st_size);
  return okStatus();
}

Status InputFile::readAt(void *to, int64_t count, int64_t offset) const {
  char *at = static_cast<char *>(to);
  if (count < 0 || offset < 0)
    return invalidArgument(
        "a read at a negative offset or of a negative size");
  while (count > 0) {
    ssize_t got = ::pread(descriptor, at, static_cast<size_t>(count), offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return unavailable(std::strerror(errno));
    if (got == 0)
      return Status(StatusCode::DataLoss,
                    "the file ends at byte " + std::to_string(offset) +
                        ", before " + std::to_string(offset + count));
    at += got;
    offset += got;
    count -= got;
  }
  return okStatus();
}

StatusOr<std::string> readInputFile(const std::string &path, int64_t limit,
                                    const std::string &what) {
  std::string text;
  // Tools built without exceptions call this too: a file within the limit
  // that does not fit in memory is an error, not an abort.
  try {
    if (path == "-") {
      MUON_RETURN_IF_ERROR(
          readToEnd(STDIN_FILENO, what, "<stdin>", limit, text));
      return text;
    }
    InputFile file;
    MUON_RETURN_IF_ERROR(file.open(path, what));
    if (file.size() > limit)
      return tooLarge(what, path, limit);
    text.reserve(static_cast<size_t>(file.size()));
    MUON_RETURN_IF_ERROR(readToEnd(file.fd(), what, path, limit, text));
    return text;
  } catch (const std::bad_alloc &) {
    return Status(StatusCode::ResourceExhausted,
                  "cannot read " + what + " " + quoted(path) +
                      ": not enough memory to hold it");
  }
}

std::string readInputPrefix(const std::string &path, size_t size) {
  InputFile file;
  if (!file.open(path).ok())
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
