//===- OutputFile.cpp - Files the tools write, safely ---------------------===//
#include "muon/Support/OutputFile.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace muon {
namespace {

std::string errnoText(int code) { return std::strerror(code); }

std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string baseOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The path with its directory resolved (the file itself may not exist).
std::string canonical(const std::string &path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer))
    return buffer;
  if (realpath(dirOf(path).c_str(), buffer))
    return std::string(buffer) + "/" + baseOf(path);
  return path;
}

/// How an output is written.
enum class Mode { Replace, InPlace };

/// A regular file (or a path to create) is replaced atomically; whatever
/// else exists is written in place. Symlinks are followed to their target,
/// except those into /proc (/dev/stdout -> /proc/self/fd/1), which stand
/// for an open descriptor.
Mode modeOf(const std::string &path, std::string &target) {
  target = path;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return Mode::Replace; // does not exist yet
  if (S_ISLNK(st.st_mode)) {
    char buffer[PATH_MAX];
    if (!realpath(path.c_str(), buffer) ||
        std::strncmp(buffer, "/proc/", 6) == 0)
      return Mode::InPlace;
    target = buffer;
    if (stat(buffer, &st) != 0)
      return Mode::InPlace;
  }
  return S_ISREG(st.st_mode) ? Mode::Replace : Mode::InPlace;
}

// The signal-time cleanup table: fixed storage, so the handler neither
// allocates nor locks.
constexpr int kSlots = 32;
char cleanupPaths[kSlots][PATH_MAX];
std::atomic<bool> cleanupUsed[kSlots];

void onSignal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (cleanupUsed[i].load())
      unlink(cleanupPaths[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

} // namespace

bool writeFully(int fd, const char *data, size_t size, int64_t offset) {
  while (size > 0) {
    ssize_t n = offset < 0 ? write(fd, data, size)
                           : pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
    if (offset >= 0)
      offset += n;
  }
  return true;
}

Status checkOutputs(const std::vector<std::string> &inputs,
                    const std::vector<OutputTarget> &outputs) {
  struct Known {
    std::string what;
    bool exists;
    dev_t dev;
    ino_t ino;
    std::string canonical;
  };
  std::vector<Known> seen;
  for (const std::string &in : inputs) {
    if (in.empty() || in == "-")
      continue;
    struct stat st;
    if (stat(in.c_str(), &st) == 0)
      seen.push_back({"the input '" + in + "'", true, st.st_dev, st.st_ino,
                      canonical(in)});
  }
  for (const OutputTarget &out : outputs) {
    if (out.path.empty() || out.path == "-")
      continue;
    std::string name = out.flag + " '" + out.path + "'";
    struct stat st;
    bool exists = stat(out.path.c_str(), &st) == 0;
    std::string canon = canonical(out.path);
    if (exists && S_ISDIR(st.st_mode)) {
      return invalidArgument(name + " is a directory");
    }
    for (const Known &k : seen) {
      bool same = exists && k.exists ? k.dev == st.st_dev && k.ino == st.st_ino
                                     : k.canonical == canon;
      // Device nodes and FIFOs may be named twice (two reports to /dev/null).
      if (same && exists && !S_ISREG(st.st_mode) &&
          k.what.rfind("the input", 0) != 0)
        same = false;
      if (same) {
        return invalidArgument(name + " is the same file as " + k.what);
      }
    }
    std::string target;
    if (modeOf(out.path, target) == Mode::Replace) {
      std::string dir = dirOf(target);
      struct stat ds;
      if (stat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode)) {
        return invalidArgument(name + ": the directory '" + dir +
                               "' does not exist");
      }
      if (access(dir.c_str(), W_OK | X_OK) != 0) {
        return invalidArgument(name + ": the directory '" + dir +
                               "' is not writable");
      }
    } else if (access(out.path.c_str(), W_OK) != 0) {
      return invalidArgument(name + " is not writable: " + errnoText(errno));
    }
    if (exists)
      seen.push_back({name, true, st.st_dev, st.st_ino, canon});
    else
      seen.push_back({name, false, 0, 0, canon});
  }
  return okStatus();
}

Status
writeOutputs(const std::vector<std::pair<std::string, std::string>> &files) {
  return writeOutputs(files, {});
}

Status
writeOutputs(const std::vector<std::pair<std::string, std::string>> &texts,
             const std::vector<StreamedOutput> &streamed) {
  // Texts are outputs whose writer copies a string out.
  std::vector<StreamedOutput> files;
  for (const auto &[path, text] : texts)
    files.push_back({path, [&text = text](int fd, bool) {
                       if (writeFully(fd, text.data(), text.size()))
                         return okStatus();
                       return unavailable(errnoText(errno));
                     }});
  files.insert(files.end(), streamed.begin(), streamed.end());
  struct Staged {
    std::string temp, target;
    int handle;
  };
  std::vector<Staged> staged;
  auto discard = [&] {
    for (const Staged &s : staged) {
      unlink(s.temp.c_str());
      unregisterCleanup(s.handle);
    }
  };
  std::vector<const StreamedOutput *> inPlace;
  for (const StreamedOutput &file : files) {
    const std::string &path = file.path;
    if (path == "-") {
      inPlace.push_back(&file);
      continue;
    }
    std::string target;
    if (modeOf(path, target) == Mode::InPlace) {
      inPlace.push_back(&file);
      continue;
    }
    std::string temp = dirOf(target) + "/." + baseOf(target) + ".tmp-" +
                       std::to_string(getpid()) + "-" +
                       std::to_string(staged.size()) + "-XXXXXX";
    std::vector<char> name(temp.begin(), temp.end());
    name.push_back(0);
    int fd = mkstemp(name.data());
    if (fd < 0) {
      discard();
      return unavailable("cannot write '" + path + "': " + errnoText(errno));
    }
    temp = name.data();
    staged.push_back({temp, target, registerCleanup(temp)});
    // The new file gets the permissions an ordinary create would give.
    mode_t mask = umask(0);
    umask(mask);
    struct stat old;
    fchmod(fd, stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777)
                                               : (0666 & ~mask));
    Status wrote = file.write(fd, /*seekable=*/true);
    if (wrote.ok() && fsync(fd) != 0)
      wrote = unavailable(errnoText(errno));
    if (close(fd) != 0 && wrote.ok())
      wrote = unavailable(errnoText(errno));
    if (!wrote.ok()) {
      discard();
      return wrote.withContext("cannot write '" + path + "': ");
    }
  }
  for (size_t i = 0; i < staged.size(); ++i)
    if (rename(staged[i].temp.c_str(), staged[i].target.c_str()) != 0) {
      const std::string why = errnoText(errno);
      discard();
      return unavailable("cannot move the new '" + staged[i].target +
                         "' into place: " + why);
    }
  for (const Staged &s : staged)
    unregisterCleanup(s.handle);
  // Devices, FIFOs and standard output: written as they are.
  for (const StreamedOutput *file : inPlace) {
    const std::string &path = file->path;
    int fd = path == "-" ? STDOUT_FILENO
                         : open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return unavailable("cannot write '" + path + "': " + errnoText(errno));
    Status wrote = file->write(fd, /*seekable=*/false);
    if (fd != STDOUT_FILENO)
      close(fd);
    if (!wrote.ok())
      return wrote.withContext("cannot write '" + path + "': ");
  }
  return okStatus();
}

void installSignalCleanup() {
  static bool installed = false;
  if (installed)
    return;
  installed = true;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, nullptr);
  }
}

int registerCleanup(const std::string &path) {
  if (path.size() >= PATH_MAX)
    return -1;
  for (int i = 0; i < kSlots; ++i) {
    if (cleanupUsed[i].load())
      continue;
    std::memcpy(cleanupPaths[i], path.c_str(), path.size() + 1);
    cleanupUsed[i].store(true);
    return i;
  }
  return -1;
}

void unregisterCleanup(int handle) {
  if (handle >= 0 && handle < kSlots)
    cleanupUsed[handle].store(false);
}

Status makeDirectories(const std::string &dir) {
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    std::string prefix = dir.substr(0, at);
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST)
      return unavailable("cannot create the directory '" + prefix +
                         "': " + errnoText(errno));
    if (at == std::string::npos)
      return okStatus();
  }
}

Status syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  Status synced = fd >= 0 && ::fsync(fd) == 0
                      ? okStatus()
                      : unavailable("cannot flush the directory '" + dir +
                                    "': " + errnoText(errno));
  if (fd >= 0)
    ::close(fd);
  return synced;
}

void removeTree(const std::string &path) {
  if (DIR *dir = opendir(path.c_str())) {
    while (dirent *entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..")
        continue;
      std::string child = path + "/" + name;
      struct stat st;
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        removeTree(child);
      else
        unlink(child.c_str());
    }
    closedir(dir);
  }
  rmdir(path.c_str());
}

} // namespace muon
