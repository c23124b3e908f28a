//===- InputFile.h - Files read by the runtime and the tools ---*- C++ -*-===//
//
// Every file the runtime and the tools read (plans, specs, IR, checkpoint
// manifests and rank files, profiles, reports) is opened through here, so
// that no input can hang, abort or exhaust a process:
//  - the open does not block (O_NONBLOCK: a FIFO with no writer would block
//    a plain open() forever), and fstat must then say it is a regular file:
//    a directory, a FIFO, a device (/dev/zero) or a socket is refused with a
//    message that says what it is;
//  - a file read whole is read up to a documented limit (limits::
//    kMaxTextFileBytes, kMaxBinaryPlanFileBytes), checked against its size
//    before reading and again while reading (a file that grows stops there);
//  - reads at offsets retry short reads and EINTR, and say "past the end"
//    rather than returning less.
// Failures are returned with a message naming the path (escaped: a path is
// input too), never thrown. Plain C++ and POSIX: the runtime uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_INPUTFILE_H
#define MUON_SUPPORT_INPUTFILE_H

#include "muon/Support/Status.h"

#include <cstdint>
#include <string>

namespace muon {

/// A regular file open for reading; closed when it goes.
class InputFile {
public:
  InputFile() = default;
  InputFile(const InputFile &) = delete;
  InputFile &operator=(const InputFile &) = delete;
  InputFile(InputFile &&other) noexcept;
  InputFile &operator=(InputFile &&other) noexcept;
  ~InputFile() { close(); }

  /// Opens `path` as described above. On failure the message is "cannot
  /// read <what> '<path>': <why>" (why: the system's reason, or "it is a
  /// directory, not a regular file", ...), the code NotFound for a path
  /// that is not there, InvalidArgument for something that is not a
  /// regular file, Unavailable for the system's other refusals.
  Status open(const std::string &path, const std::string &what = "file");
  bool isOpen() const { return descriptor >= 0; }
  int fd() const { return descriptor; }
  /// The file's size when it was opened.
  int64_t size() const { return bytes; }
  /// Reads exactly `count` bytes at `offset`: DataLoss when the file ends
  /// before (a file shorter than what it says of itself), Unavailable with
  /// the system's reason for a failed read.
  Status readAt(void *to, int64_t count, int64_t offset) const;
  void close();

private:
  int descriptor = -1;
  int64_t bytes = 0;
};

/// All of the file at `path`: a regular file of at most `limit` bytes. "-"
/// is standard input, read to its end (it may be a pipe or a terminal: the
/// caller asked for it), also at most `limit` bytes. A failure's message
/// names the path (and `what` it is, "input file"); its code is open()'s,
/// InvalidArgument for a file over the limit, ResourceExhausted when it
/// does not fit in memory.
StatusOr<std::string> readInputFile(const std::string &path, int64_t limit,
                                    const std::string &what = "file");

/// The first `size` bytes of the regular file at `path`, fewer when it is
/// shorter; empty when it cannot be opened or read (readInputFile then
/// says why).
std::string readInputPrefix(const std::string &path, size_t size);

/// What the file type `mode` (st_mode) is, for messages: "a directory", "a
/// FIFO (named pipe)", "a character device", ...
std::string fileKind(unsigned mode);

} // namespace muon

#endif // MUON_SUPPORT_INPUTFILE_H
