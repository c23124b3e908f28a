//===- FakeGraphs.cpp - CUDA graphs by stream capture on the fake GPU -----===//
//
// Stream capture as CUDA defines it, for what a step graph needs: while a
// capture holds a stream, what is queued there (copies, fills, kernels,
// cuBLAS products, NCCL sends and receives) goes into the graph and does
// not run. A stream joins the capture when it waits for an event recorded
// in it (the fork) and must be joined back by the origin stream before the
// capture ends; events recorded in a capture are the graph's own, so a
// record there changes nothing the host can see. An instantiated graph
// replays its lanes in order on every launch: the first lane on the launch
// stream, the others on hidden streams that start from the launch's point
// through the graph's events, with fresh records each launch.
//
// What real CUDA refuses or breaks on during a capture is a misuse here,
// and invalidates the capture (cudaStreamEndCapture then fails): a
// synchronize of a capturing stream, a query of an event recorded in the
// capture, a wait across the capture's boundary, a stream-ordered
// allocation or free in it (graph memory nodes are not modelled), a cuBLAS
// product captured on a handle without its own workspace (cuBLAS would
// allocate one inside the graph), a capture left with a stream not joined
// back.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include <cuda_runtime_api.h>

#include <map>

using namespace muon::fakegpu;

namespace muon::fakegpu {

void enqueue(State &s, CUstream_st *stream, Op op) {
  if (!stream->capture) {
    stream->ops.push_back(std::move(op));
    return;
  }
  if (op.kind == OpKind::Free) {
    misuse(s, "cudaFreeAsync on a capturing stream (graph memory nodes are "
              "not modelled by the fake)");
    invalidateCapture(s, stream);
    return;
  }
  stream->capture->lanes[stream->lane].ops.push_back(std::move(op));
}

void invalidateCapture(State &, CUstream_st *stream) {
  if (stream && stream->capture)
    stream->capture->invalidated = true;
}

} // namespace muon::fakegpu

namespace {

CUgraph_st *findGraph(State &s, cudaGraph_t handle) {
  for (auto &g : s.graphs)
    if (g.get() == handle && g->live)
      return g.get();
  return nullptr;
}

CUgraphExec_st *findExec(State &s, cudaGraphExec_t handle) {
  for (auto &e : s.graphExecs)
    if (e.get() == handle && e->live)
      return e.get();
  return nullptr;
}

/// Releases every stream the capture holds.
void endCapture(CUgraph_st *graph) {
  for (CUgraph_st::Lane &lane : graph->lanes)
    if (lane.stream->capture == graph)
      lane.stream->capture = nullptr;
  graph->capturing = false;
}

/// Whether every lane but the first ends with a record the first waits for.
bool joined(const CUgraph_st &graph, size_t &unjoined) {
  for (size_t l = 1; l < graph.lanes.size(); ++l) {
    const std::vector<Op> &ops = graph.lanes[l].ops;
    bool ok = false;
    if (!ops.empty() && ops.back().kind == OpKind::Record)
      for (const Op &op : graph.lanes[0].ops)
        ok = ok || (op.kind == OpKind::Wait && op.event == ops.back().event);
    if (!ok) {
      unjoined = l;
      return false;
    }
  }
  return true;
}

} // namespace

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t handle,
                                   enum cudaStreamCaptureMode) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->live || stream == &s.legacyStream) {
    misuse(s, "cudaStreamBeginCapture on an unknown stream or the legacy "
              "default stream");
    return cudaErrorStreamCaptureUnsupported;
  }
  if (stream->capture) {
    misuse(s, "cudaStreamBeginCapture on a stream already capturing");
    return cudaErrorIllegalState;
  }
  s.graphs.push_back(std::make_unique<CUgraph_st>());
  CUgraph_st *graph = s.graphs.back().get();
  graph->lanes.push_back({stream, {}});
  stream->capture = graph;
  stream->lane = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t *out) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *out = nullptr;
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->capture || stream->lane != 0) {
    misuse(s, "cudaStreamEndCapture on a stream that did not begin a capture");
    return cudaErrorIllegalState;
  }
  CUgraph_st *graph = stream->capture;
  size_t unjoined = 0;
  const bool allJoined = joined(*graph, unjoined);
  endCapture(graph);
  if (!allJoined) {
    misuse(s, "cudaStreamEndCapture with lane " + std::to_string(unjoined) +
                  " of the capture not joined back into its origin stream");
    graph->live = false;
    return cudaErrorStreamCaptureUnjoined;
  }
  if (graph->invalidated) {
    graph->live = false;
    return cudaErrorStreamCaptureInvalidated;
  }
  *out = graph;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle,
                                  enum cudaStreamCaptureStatus *status) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->live) {
    misuse(s, "cudaStreamIsCapturing of an unknown stream");
    return cudaErrorInvalidResourceHandle;
  }
  *status = !stream->capture ? cudaStreamCaptureStatusNone
            : stream->capture->invalidated
                ? cudaStreamCaptureStatusInvalidated
                : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t handle,
                                 unsigned long long) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUgraph_st *graph = findGraph(s, handle);
  if (!graph || graph->capturing) {
    misuse(s, "cudaGraphInstantiate of an unknown graph or one still being "
              "captured");
    return cudaErrorInvalidValue;
  }
  auto exec = std::make_unique<CUgraphExec_st>();
  std::map<CUevent_st *, CUevent_st *> own;
  for (auto &event : graph->events) {
    exec->events.push_back(std::make_unique<CUevent_st>());
    own[event.get()] = exec->events.back().get();
  }
  exec->lanes = graph->lanes;
  exec->laneStreams.push_back(nullptr);
  for (size_t l = 0; l < exec->lanes.size(); ++l) {
    for (Op &op : exec->lanes[l].ops)
      if (op.event)
        op.event = own.at(op.event);
    if (l > 0) {
      s.laneStreams.push_back(std::make_unique<CUstream_st>());
      exec->laneStreams.push_back(s.laneStreams.back().get());
    }
  }
  s.graphExecs.push_back(std::move(exec));
  *out = s.graphExecs.back().get();
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t handle, cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUgraphExec_st *exec = findExec(s, handle);
  CUstream_st *stream = findStream(s, streamHandle);
  if (!exec || !stream || !stream->live) {
    misuse(s, "cudaGraphLaunch of an unknown graph or on an unknown stream");
    return cudaErrorInvalidResourceHandle;
  }
  if (stream->capture) {
    misuse(s, "cudaGraphLaunch into a capture (child graphs are not "
              "modelled by the fake)");
    invalidateCapture(s, stream);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (s.sticky != cudaSuccess)
    return s.sticky;
  // Each of the graph's events is recorded once per launch: this launch's
  // records, then the waits on them.
  for (CUgraph_st::Lane &lane : exec->lanes)
    for (Op &op : lane.ops)
      if (op.kind == OpKind::Record)
        op.generation = ++op.event->recorded;
  for (size_t l = 0; l < exec->lanes.size(); ++l) {
    CUstream_st *target = l == 0 ? stream : exec->laneStreams[l];
    for (Op op : exec->lanes[l].ops) {
      if (op.kind == OpKind::Wait)
        op.generation = op.event->recorded;
      target->ops.push_back(std::move(op));
    }
  }
  ++s.counters.graphLaunches;
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUgraphExec_st *exec = findExec(s, handle);
  if (!exec) {
    misuse(s, "cudaGraphExecDestroy of an unknown executable graph");
    return cudaErrorInvalidValue;
  }
  exec->live = false; // launches queued before still run, as on a GPU
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUgraph_st *graph = findGraph(s, handle);
  if (!graph) {
    misuse(s, "cudaGraphDestroy of an unknown graph");
    return cudaErrorInvalidValue;
  }
  graph->live = false;
  return cudaSuccess;
}

} // extern "C"
