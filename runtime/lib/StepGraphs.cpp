//===- StepGraphs.cpp - A step recorded once and replayed -------------------===//
//
// ExecutorOptions::graphs: after a warm-up step, the step's device work
// recorded into a graph of the device (StepGraphRecorder) and replayed,
// each later step first checked against the recording call by call; the
// host state a failed recording or check changed put back.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/StepExecutor.h"

namespace muon::runtime {

Status StepExecutor::runScheduleOnce() {
  Status status = runSchedule();
  full.clear();
  batchBuffers.clear();
  return status;
}

Status StepExecutor::checkGraphsUsable() const {
  if (!graphsGivenUp.empty())
    return failedPrecondition(graphsGivenUp);
  if (options.trace)
    return failedPrecondition("tracing times each call on the host");
  if (!comm.recordable())
    return failedPrecondition("the transport's exchanges reach the host "
                              "(NCCL's and a single rank's can be recorded)");
  return okStatus();
}

StepExecutor::HostSnapshot StepExecutor::snapshot() const {
  HostSnapshot s;
  for (const LocalParam &local : locals)
    s.steps.push_back(local.steps);
  s.counters = lastCounters;
  s.peakBytes = peakBytes;
  return s;
}

void StepExecutor::restore(const HostSnapshot &s) {
  for (size_t i = 0; i < locals.size(); ++i) {
    locals[i].steps = s.steps[i];
    locals[i].summed = false;
  }
  lastCounters = s.counters;
  peakBytes = s.peakBytes;
}

namespace {
/// Recordings that may fail in a row (each costs a pass over the schedule
/// on the host) before a run gives graphs up.
constexpr int kMaxFailedRecordings = 3;
} // namespace

Status StepExecutor::runStepWork() {
  if (!options.graphs)
    return runScheduleOnce();
  lastCounters.graph = GraphUse::Eager;
  if (Status usable = checkGraphsUsable(); !usable.ok()) {
    lastCounters.graphNote = usable.message();
    return runScheduleOnce();
  }
  if (graphReady) {
    bool replayed = false;
    MUON_RETURN_IF_ERROR(checkAndReplay(replayed));
    if (replayed)
      return okStatus();
  } else if (!warmedUp) {
    // Workspaces, tile plans and the transport's connections are made by a
    // step that runs: a recording may make none of them.
    warmedUp = true;
    lastCounters.graphNote = "warm-up before the recording";
    return runScheduleOnce();
  }
  return recordAndReplay();
}

Status StepExecutor::checkAndReplay(bool &replayed) {
  // The step's calls against the recording's, none run; then the replay
  // with this step's scalars. A ready recording means the device has a
  // recorder.
  StepGraphRecorder &graphs = *device.stepGraphs();
  const HostSnapshot before = snapshot();
  graphs.beginReplayCheck();
  pass = Pass::Checking;
  Status status = runScheduleOnce();
  pass = Pass::Eager;
  const Status same = graphs.endReplayCheck();
  if (status.ok() && same.ok()) {
    graphs.replay();
    lastCounters.graph = GraphUse::Replayed;
    replayed = true;
    return okStatus();
  }
  graphs.dropRecording();
  graphReady = false;
  if (!status.ok())
    return status;
  restore(before);
  lastCounters.graphNote = "recorded again: " + same.message();
  return okStatus();
}

Status StepExecutor::recordAndReplay() {
  StepGraphRecorder *graphs = device.stepGraphs();
  const Status began =
      graphs ? graphs->beginRecording()
             : unimplemented(std::string("the ") + device.name() +
                             " device records no step graphs");
  if (!began.ok()) {
    graphsGivenUp = began.message();
    lastCounters.graphNote = began.message();
    return runScheduleOnce();
  }
  const HostSnapshot before = snapshot();
  pass = Pass::Recording;
  Status status = runScheduleOnce();
  pass = Pass::Eager;
  const Status recorded = graphs->endRecording();
  if (status.ok() && recorded.ok()) {
    graphs->replay();
    graphReady = true;
    failedRecordings = 0;
    lastCounters.graph = GraphUse::Recorded;
    return okStatus();
  }
  graphs->dropRecording();
  if (!status.ok())
    return status;
  // Nothing of the recording ran: the step runs as without graphs.
  restore(before);
  lastCounters.graphNote = "not recorded: " + recorded.message();
  if (++failedRecordings >= kMaxFailedRecordings)
    graphsGivenUp = "graphs given up after " +
                    std::to_string(kMaxFailedRecordings) +
                    " failed recordings, the last: " + recorded.message();
  return runScheduleOnce();
}

} // namespace muon::runtime
