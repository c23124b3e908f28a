//===- RankRun.cpp - What a rank sends rank 0 after its steps -------------===//
#include "RankRun.h"

namespace muon::tool {

std::vector<char> encode(const RankRun &run) {
  std::vector<double> v = {run.bytesSent,     run.bytesReceived,
                           run.nsFlops,       run.consistent,
                           run.plannedSent,   run.plannedReceived,
                           run.plannedFlops,  run.peakWorkingBytes,
                           run.workingBytesBound};
  v.insert(v.end(), run.stepSeconds.begin(), run.stepSeconds.end());
  std::vector<char> out;
  append(out, v.data(), v.size());
  return out;
}

RankRun decode(const std::vector<char> &bytes) {
  std::vector<double> v = as<double>(bytes);
  RankRun run;
  run.bytesSent = v[0];
  run.bytesReceived = v[1];
  run.nsFlops = v[2];
  run.consistent = v[3];
  run.plannedSent = v[4];
  run.plannedReceived = v[5];
  run.plannedFlops = v[6];
  run.peakWorkingBytes = v[7];
  run.workingBytesBound = v[8];
  run.stepSeconds.assign(v.begin() + 9, v.end());
  return run;
}

} // namespace muon::tool
