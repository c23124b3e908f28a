//===- RankRun.h - What a rank sends rank 0 after its steps -----*- C++ -*-===//
//
// Each rank of a run counts what its steps moved and computed and how long
// they took, and what its part of the plan says they should; rank 0
// gathers every rank's record (as bytes, through the run's communicator)
// to check and report them.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_TOOLS_MUON_RUN_RANKRUN_H
#define MUON_TOOLS_MUON_RUN_RANKRUN_H

#include <cstring>
#include <vector>

namespace muon::tool {

/// What each rank reports to rank 0 after its steps.
struct RankRun {
  double bytesSent = 0, bytesReceived = 0, nsFlops = 0;
  double consistent = 1; // every applied step moved and ran the same
  // What the rank's plan says it moves and computes: each rank counts its
  // own, since with a sliced plan only it knows (rank 0 holds its part).
  double plannedSent = 0, plannedReceived = 0, plannedFlops = 0;
  // The most working memory any step held, and the plan's bound.
  double peakWorkingBytes = 0, workingBytesBound = 0;
  std::vector<double> stepSeconds;
};

std::vector<char> encode(const RankRun &run);
RankRun decode(const std::vector<char> &bytes);

template <typename T> void append(std::vector<char> &out, const T *data,
                                  size_t count) {
  const char *bytes = reinterpret_cast<const char *>(data);
  out.insert(out.end(), bytes, bytes + count * sizeof(T));
}

template <typename T> std::vector<T> as(const std::vector<char> &bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_RANKRUN_H
