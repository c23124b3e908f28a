//===- Trace.cpp - A step's timeline as a Chrome/Perfetto trace -----------===//
#include "muon/Plan/Trace.h"

#include "muon/Support/JsonWriter.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace muon {

int64_t TraceLanes::start(int64_t exchange) {
  for (size_t l = 0; l < held.size(); ++l)
    if (held[l] < 0) {
      held[l] = exchange;
      return static_cast<int64_t>(l) + 1;
    }
  held.push_back(exchange);
  return static_cast<int64_t>(held.size());
}

int64_t TraceLanes::done(int64_t exchange) {
  for (size_t l = 0; l < held.size(); ++l)
    if (held[l] == exchange) {
      held[l] = -1;
      return static_cast<int64_t>(l) + 1;
    }
  return 0; // not started: the schedule verifier rules this out
}

static std::string eventName(const Plan &plan, const TraceEvent &e) {
  switch (e.kind) {
  case TraceEvent::Kind::Exchange: {
    const Exchange &ex = plan.exchanges[e.index];
    if (ex.phase == Exchange::Phase::Reduce)
      return "reduce (exchange " + std::to_string(e.index) + ")";
    return std::string(phaseName(ex.phase)) + " round " +
           std::to_string(ex.round) + " (exchange " + std::to_string(e.index) +
           ")";
  }
  case TraceEvent::Kind::NewtonSchulz:
    return "ns round " + std::to_string(e.index) + " " +
           std::to_string(e.rows) + "x" + std::to_string(e.cols) + " x" +
           std::to_string(e.matrices);
  case TraceEvent::Kind::Momentum:
    return "momentum";
  case TraceEvent::Kind::ApplyUpdate:
    return "apply round " + std::to_string(e.index);
  case TraceEvent::Kind::AdamW:
    return "adamw";
  }
  return "";
}

static const char *category(TraceEvent::Kind kind) {
  switch (kind) {
  case TraceEvent::Kind::Exchange:
    return "exchange";
  case TraceEvent::Kind::NewtonSchulz:
    return "ns";
  default:
    return "elementwise";
  }
}

std::string renderTrace(const Plan &plan, const std::vector<TraceEvent> &events,
                        const std::string &source) {
  std::string text;
  json::Writer j(text);
  j.beginObject();
  j.key("traceEvents");
  j.beginArray();
  // Names for the ranks and lanes that have events.
  std::set<std::pair<int64_t, int64_t>> lanes;
  for (const TraceEvent &e : events)
    lanes.insert({e.rank, e.lane});
  int64_t lastRank = -1;
  for (const auto &[rank, lane] : lanes) {
    if (rank != lastRank) {
      j.beginObject();
      j.member("name", "process_name");
      j.member("ph", "M");
      j.member("pid", rank);
      j.key("args");
      j.beginObject();
      j.member("name", "rank " + std::to_string(rank));
      j.endObject();
      j.endObject();
      lastRank = rank;
    }
    j.beginObject();
    j.member("name", "thread_name");
    j.member("ph", "M");
    j.member("pid", rank);
    j.member("tid", lane);
    j.key("args");
    j.beginObject();
    j.member("name", lane == 0 ? std::string("compute")
                               : "exchanges " + std::to_string(lane));
    j.endObject();
    j.endObject();
  }
  for (const TraceEvent &e : events) {
    j.beginObject();
    j.member("name", eventName(plan, e));
    j.member("cat", category(e.kind));
    j.member("ph", "X");
    j.member("pid", e.rank);
    j.member("tid", e.lane);
    // Microseconds, as the format wants; doubles keep sub-microsecond
    // simulated events visible.
    j.member("ts", e.begin * 1e6);
    j.member("dur", std::max(0.0, e.end - e.begin) * 1e6);
    j.key("args");
    j.beginObject();
    switch (e.kind) {
    case TraceEvent::Kind::Exchange:
      j.member("exchange", e.index);
      j.member("phase", phaseName(plan.exchanges[e.index].phase));
      j.member("round", plan.exchanges[e.index].round);
      j.member("bytes_sent", e.bytesSent);
      j.member("bytes_received", e.bytesReceived);
      break;
    case TraceEvent::Kind::NewtonSchulz:
      j.member("round", e.index);
      j.member("rows", e.rows);
      j.member("cols", e.cols);
      j.member("matrices", e.matrices);
      j.member("flops", e.flops);
      break;
    case TraceEvent::Kind::ApplyUpdate:
      j.member("round", e.index);
      break;
    default:
      break;
    }
    j.endObject();
    j.endObject();
  }
  j.endArray();
  j.member("displayTimeUnit", "ms");
  j.key("otherData");
  j.beginObject();
  j.member("format", "muon-trace/1");
  j.member("source", source);
  j.member("world_size", plan.worldSize);
  j.endObject();
  j.endObject();
  text += "\n";
  return text;
}

// Fixed-size records: every field as int64 or double, in order.
namespace {
struct Record {
  int64_t kind, rank, lane, index;
  double begin, end;
  int64_t bytesSent, bytesReceived, rows, cols, matrices, flops;
};
} // namespace

std::vector<char> encodeTrace(const std::vector<TraceEvent> &events) {
  std::vector<char> out(events.size() * sizeof(Record));
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent &e = events[i];
    Record r{static_cast<int64_t>(e.kind), e.rank, e.lane, e.index, e.begin,
             e.end, e.bytesSent, e.bytesReceived, e.rows, e.cols, e.matrices,
             e.flops};
    std::memcpy(out.data() + i * sizeof(Record), &r, sizeof(Record));
  }
  return out;
}

bool decodeTrace(const std::vector<char> &bytes,
                 std::vector<TraceEvent> &events) {
  if (bytes.size() % sizeof(Record))
    return false;
  for (size_t at = 0; at < bytes.size(); at += sizeof(Record)) {
    Record r;
    std::memcpy(&r, bytes.data() + at, sizeof(Record));
    if (r.kind < 0 || r.kind > static_cast<int64_t>(TraceEvent::Kind::AdamW))
      return false;
    TraceEvent e;
    e.kind = static_cast<TraceEvent::Kind>(r.kind);
    e.rank = r.rank;
    e.lane = r.lane;
    e.index = r.index;
    e.begin = r.begin;
    e.end = r.end;
    e.bytesSent = r.bytesSent;
    e.bytesReceived = r.bytesReceived;
    e.rows = r.rows;
    e.cols = r.cols;
    e.matrices = r.matrices;
    e.flops = r.flops;
    events.push_back(e);
  }
  return true;
}

} // namespace muon
