//===- OutputFile.h - Files the tools write, safely -------------*- C++ -*-===//
//
// Every file a tool writes (an MLIR file, a plan, a report) goes through
// here, so that:
//  - an output that is the same file as an input or as another output is
//    refused before any work (compared by device and inode, or by resolved
//    path for files that do not exist yet: `./x.json` is `x.json`);
//  - an output whose directory is missing or not writable is refused before
//    any work, naming the output, not a temporary file;
//  - a regular file (new, existing, or behind a symlink, which stays a
//    symlink) is written through a temporary file in its directory, flushed
//    to disk and renamed over the target, so a reader never sees half of it
//    and a failure leaves the old file as it was;
//  - anything else that exists (/dev/null, a FIFO, a terminal, /dev/stdout)
//    is opened and written in place: renaming over it would replace a
//    device node with a regular file;
//  - a temporary file is removed on every failure, and on SIGINT, SIGTERM
//    and SIGHUP once installSignalCleanup() ran.
// "-" means standard output. Plain C++ and POSIX: the runtime uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_OUTPUTFILE_H
#define MUON_SUPPORT_OUTPUTFILE_H

#include "muon/Support/Status.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace muon {

/// An output as the user named it: the flag (for messages) and the path.
struct OutputTarget {
  std::string flag; // "--report", "-o"
  std::string path;
};

/// The checks above, before any work. `inputs` are paths the tool reads
/// ("-" and empty entries are skipped). InvalidArgument naming the output
/// that fails them.
Status checkOutputs(const std::vector<std::string> &inputs,
                    const std::vector<OutputTarget> &outputs);

/// Writes every (path, text): all regular files are staged first, and none
/// is moved into place unless every one was written. Unavailable naming
/// the output that failed (or the writer's own code, below).
Status
writeOutputs(const std::vector<std::pair<std::string, std::string>> &files);

/// Writes all `size` bytes to `fd`, retrying short writes and EINTR: in
/// order from the descriptor's position, or with `offset` >= 0 at that
/// offset (pwrite). False with errno set on failure (EIO for a write that
/// makes no progress).
bool writeFully(int fd, const char *data, size_t size, int64_t offset = -1);

/// An output produced straight into its file, for one too large to hold
/// in memory twice (a 16,384-rank binary plan). `write(fd, seekable)` gets
/// the open file: for a regular file (staged under a temporary name)
/// `seekable` is true and it may pwrite anywhere; otherwise (a pipe, a
/// terminal, standard output) it must write in order from the start. A
/// failure it returns (the path is put in front) fails every output.
struct StreamedOutput {
  std::string path;
  std::function<Status(int fd, bool seekable)> write;
};

/// writeOutputs with some outputs streamed: the same staging, all or none.
Status
writeOutputs(const std::vector<std::pair<std::string, std::string>> &files,
             const std::vector<StreamedOutput> &streamed);

/// One file.
inline Status writeOutput(const std::string &path, const std::string &text) {
  return writeOutputs({{path, text}});
}

/// Makes SIGINT, SIGTERM and SIGHUP remove the temporary files being
/// written (and the paths registered below) before the process ends with
/// the signal. Idempotent.
void installSignalCleanup();

/// A file to remove if a signal ends the process while it is registered
/// (the handler only unlinks: that is async-signal-safe). Returns a handle
/// for unregisterCleanup, or -1 when the table is full (the file is then
/// simply not removed).
int registerCleanup(const std::string &path);
void unregisterCleanup(int handle);

/// Removes a directory tree (best effort).
void removeTree(const std::string &path);

/// Creates directory `dir` and its missing parents (several processes may
/// race to: the first creates, the others find it). Unavailable naming the
/// part that could not be created.
Status makeDirectories(const std::string &dir);

/// Flushes directory `dir`'s entries to disk, so that files renamed into
/// it survive a crash (writeOutputs flushes the files themselves).
Status syncDirectory(const std::string &dir);

} // namespace muon

#endif // MUON_SUPPORT_OUTPUTFILE_H
