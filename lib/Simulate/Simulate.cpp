//===- Simulate.cpp - Predicted step time of a plan -----------------------===//
#include "muon/Simulate/Simulate.h"

#include "muon/Plan/Algorithm.h"

#include <algorithm>
#include <array>

namespace muon::sim {

namespace {

/// The bytes of an algorithm's per-element slots (ElementState.h), each
/// read and written once by its elementwise step.
double slotBytes(AlgorithmId algorithm) {
  return 8.0 * static_cast<double>(algorithmOf(algorithm).slots.size());
}

// Bytes the elementwise kernels move per element (f32 state; the storage
// type's width is close enough for a model): momentum reads the gradient,
// reads and writes Muon's slots and writes the update; an update reads and
// writes the parameter and reads the orthogonalized values; an element-wise
// algorithm's update (AdamW's) reads and writes the parameter and its slots
// and reads the gradient.
double prepareBytes(AlgorithmId algorithm) {
  return 4 + slotBytes(algorithm) + 4;
}
constexpr double kApplyBytes = 12;
double elementUpdateBytes(AlgorithmId algorithm) {
  return 8 + slotBytes(algorithm) + 4;
}

enum Dir { IntraSend, IntraRecv, InterSend, InterRecv, kDirs };

struct Walker {
  const Plan &plan;
  const Profile &profile;
  bool withEvents;
  Result result;

  int64_t world = 1;
  double nsRate = 1;
  std::vector<double> slowdown; // per rank: compute-slot sharing
  std::vector<double> clock;    // per rank: where its executor is
  std::vector<std::array<double, kDirs>> linkFree;
  std::vector<TraceLanes> lanes;
  // Per exchange in flight, per rank: when the start call began, when the
  // rank's share is through the network, bytes sent / received, lane.
  struct Flight {
    std::vector<double> begin, posted, done;
    // The exchange as (src, dst, elements) messages, self-sends dropped:
    // all the simulator needs of its transfers or reductions.
    std::vector<std::array<int64_t, 3>> messages;
    bool moved = false; // the network part is computed
    std::vector<int64_t> sent, received, sendElements, recvElements, lane;
  };
  std::vector<Flight> flights;
  // Elementwise work per rank, in bytes: the orthogonalized parameters'
  // momentum, the element-wise algorithms' updates.
  std::vector<double> prepareWork, elementUpdateWork;
  std::vector<std::vector<double>> applyElements; // [round][rank]
  // With in-calls progress: per rank, the times it enters the transport
  // (a start call, a progress call between NS matrices), ascending.
  std::vector<std::vector<double>> progressPoints;

  Walker(const Plan &plan, const Profile &profile, bool withEvents)
      : plan(plan), profile(profile), withEvents(withEvents) {}

  int64_t nodeOf(int64_t rank) const { return rank / profile.ranksPerNode; }

  double memorySeconds(int64_t rank, double bytes) const {
    if (profile.memoryBytesPerSecond <= 0)
      return 0;
    return bytes / profile.memoryBytesPerSecond * slowdown[rank];
  }

  void event(TraceEvent e) {
    if (withEvents)
      result.events.push_back(e);
  }

  /// Runs elementwise work of `bytes` on `rank`'s compute lane.
  void elementwise(int64_t rank, double bytes, TraceEvent::Kind kind,
                   int64_t index) {
    double seconds = memorySeconds(rank, bytes);
    TraceEvent e;
    e.kind = kind;
    e.rank = rank;
    e.index = index;
    e.begin = clock[rank];
    e.end = clock[rank] + seconds;
    event(e);
    clock[rank] += seconds;
    result.ranks[rank].elementwiseSeconds += seconds;
  }

  void setUp() {
    world = plan.worldSize;
    result.ranks.assign(world, {});
    result.nodes = (world + profile.ranksPerNode - 1) / profile.ranksPerNode;
    nsRate = nsFlopsPerSecond(plan, profile);
    slowdown.assign(world, 1.0);
    if (profile.computeSlotsPerNode > 0)
      for (int64_t r = 0; r < world; ++r) {
        int64_t first = nodeOf(r) * profile.ranksPerNode;
        int64_t onNode = std::min(profile.ranksPerNode, world - first);
        if (onNode > profile.computeSlotsPerNode)
          slowdown[r] = static_cast<double>(onNode) /
                        static_cast<double>(profile.computeSlotsPerNode);
      }
    clock.assign(world, 0.0);
    progressPoints.assign(world, {});
    linkFree.assign(world, {0, 0, 0, 0});
    lanes.assign(world, {});
    flights.assign(plan.exchanges.size(), {});
    prepareWork.assign(world, 0);
    elementUpdateWork.assign(world, 0);
    if (profile.memoryBytesPerSecond > 0) {
      for (const PlanParam &p : plan.params)
        for (const ParamPiece &piece : paramPieces(plan.mesh, p.layout)) {
          double elements = 1;
          for (const Range &r : piece.box)
            elements *= static_cast<double>(r.size());
          if (p.orthogonalized())
            prepareWork[piece.rank] += elements * prepareBytes(p.algorithm);
          else
            elementUpdateWork[piece.rank] +=
                elements * elementUpdateBytes(p.algorithm);
        }
      applyElements.assign(plan.rounds.size(), std::vector<double>(world, 0));
      MatrixPieceCache pieceCache(plan.mesh);
      for (size_t round = 0; round < plan.rounds.size(); ++round)
        for (int64_t k : plan.rounds[round]) {
          const PlanMatrix &m = plan.matrices[k];
          for (const MatrixPiece &piece :
               pieceCache.pieces(plan.params[m.paramIndex].layout,
                                 std::max<int64_t>(m.slice, 0)))
            applyElements[round][piece.rank] +=
                static_cast<double>(piece.elements());
        }
    }
  }

  void start(int64_t e) {
    const Exchange &ex = plan.exchanges[e];
    Flight &f = flights[e];
    // Straight from the transfers: building every rank's all-to-all-v view
    // would allocate per (rank, peer), seconds at 16,384 ranks.
    f.messages.clear();
    f.sendElements.assign(world, 0);
    f.recvElements.assign(world, 0);
    auto add = [&](int64_t src, int64_t dst, int64_t elements) {
      if (src == dst || elements == 0)
        return;
      f.messages.push_back({src, dst, elements});
      f.sendElements[src] += elements;
      f.recvElements[dst] += elements;
    };
    for (const Transfer &t : ex.transfers)
      add(t.src, t.dst, t.elements());
    for (const Reduction &red : ex.reductions)
      add(red.src, red.dst, red.elements);
    f.posted.assign(world, 0);
    f.begin.assign(world, 0);
    f.done.assign(world, 0);
    f.sent.assign(world, 0);
    f.received.assign(world, 0);
    f.lane.assign(world, 0);
    std::vector<double> &posted = f.posted;
    for (int64_t r = 0; r < world; ++r) {
      // The start call packs the rank's boxes (read f32, write the wire
      // type), then posts the all-to-all-v.
      f.begin[r] = clock[r];
      double pack = memorySeconds(
          r, static_cast<double>(f.sendElements[r]) * (4 + plan.wireBytes));
      clock[r] += pack;
      result.ranks[r].elementwiseSeconds += pack;
      posted[r] = clock[r];
      if (!profile.backgroundProgress)
        progressPoints[r].push_back(clock[r]);
      f.lane[r] = lanes[r].start(e);
    }
    // In the background the exchange moves from now on; otherwise only
    // when the ranks next enter the transport, known at the first done.
    if (profile.backgroundProgress)
      move(e, posted);
  }

  /// When rank r is next inside the transport after posting at `posted`:
  /// the first progress point after it, else the done call it is in now.
  double nextInCall(int64_t r, double posted) const {
    const std::vector<double> &points = progressPoints[r];
    auto it = std::upper_bound(points.begin(), points.end(), posted);
    return it == points.end() ? clock[r] : std::max(posted, *it);
  }

  /// The network part of exchange e, with each rank's share able to move
  /// from `active[r]` on.
  void move(int64_t e, const std::vector<double> &active) {
    Flight &f = flights[e];
    f.moved = true;
    // A rank's share moves once it and all its peers are active.
    std::vector<double> ready = active;
    for (const auto &[src, dst, elements] : f.messages) {
      ready[src] = std::max(ready[src], active[dst]);
      ready[dst] = std::max(ready[dst], active[src]);
    }
    std::vector<std::array<double, kDirs>> bytes(world, {0, 0, 0, 0});
    for (const auto &[src, dst, elements] : f.messages) {
      bool intra = nodeOf(src) == nodeOf(dst);
      double b = static_cast<double>(elements * plan.wireBytes);
      bytes[src][intra ? IntraSend : InterSend] += b;
      bytes[dst][intra ? IntraRecv : InterRecv] += b;
    }
    // Each link direction serves exchanges in start order.
    std::vector<std::array<double, kDirs>> end(world);
    for (int64_t r = 0; r < world; ++r) {
      f.sent[r] = static_cast<int64_t>(bytes[r][IntraSend] + bytes[r][InterSend]);
      f.received[r] =
          static_cast<int64_t>(bytes[r][IntraRecv] + bytes[r][InterRecv]);
      for (int d = 0; d < kDirs; ++d) {
        end[r][d] = ready[r];
        if (bytes[r][d] <= 0)
          continue;
        const Link &link =
            d == IntraSend || d == IntraRecv ? profile.intraNode
                                             : profile.interNode;
        double begin = std::max(ready[r], linkFree[r][d]);
        end[r][d] =
            begin + link.latencySeconds + bytes[r][d] / link.bytesPerSecond;
        linkFree[r][d] = end[r][d];
      }
    }
    // Rank r's done returns when its own directions are through and every
    // peer sending to it has sent everything (its bytes are interleaved
    // with the rest of the peer's).
    for (int64_t r = 0; r < world; ++r)
      f.done[r] = *std::max_element(end[r].begin(), end[r].end());
    for (const auto &[src, dst, elements] : f.messages)
      f.done[dst] = std::max(
          f.done[dst],
          end[src][nodeOf(src) == nodeOf(dst) ? IntraSend : InterSend]);
  }

  void done(int64_t e) {
    Flight &f = flights[e];
    if (!f.moved) {
      // Every rank is at this done now: where each was next inside the
      // transport after posting is known.
      std::vector<double> active(world);
      for (int64_t r = 0; r < world; ++r)
        active[r] = nextInCall(r, f.posted[r]);
      move(e, active);
    }
    for (int64_t r = 0; r < world; ++r) {
      double wait = std::max(0.0, f.done[r] - clock[r]);
      result.ranks[r].waitSeconds += wait;
      clock[r] += wait;
      // Unpacking reads the wire type and adds into (or writes) f32.
      double unpack = memorySeconds(
          r, static_cast<double>(f.recvElements[r]) * (plan.wireBytes + 8));
      clock[r] += unpack;
      result.ranks[r].elementwiseSeconds += unpack;
      lanes[r].done(e);
      TraceEvent ev;
      ev.kind = TraceEvent::Kind::Exchange;
      ev.rank = r;
      ev.lane = f.lane[r];
      ev.index = e;
      ev.begin = f.begin[r];
      ev.end = clock[r];
      ev.bytesSent = f.sent[r];
      ev.bytesReceived = f.received[r];
      event(ev);
    }
    f = {};
  }

  void newtonSchulz(int64_t round) {
    for (int64_t r = 0; r < world; ++r) {
      if (r >= static_cast<int64_t>(plan.nsBatches.size()))
        break;
      for (const NsBatch &b : plan.nsBatches[r]) {
        if (b.round != round)
          continue;
        int64_t flops = 0;
        for (int64_t k : b.matrices)
          flops += plan.matrices[k].nsFlops;
        double seconds = static_cast<double>(flops) / nsRate * slowdown[r];
        if (!profile.backgroundProgress) {
          // The executor polls the transport after each matrix.
          double at = clock[r];
          for (int64_t k : b.matrices) {
            at += static_cast<double>(plan.matrices[k].nsFlops) / nsRate *
                  slowdown[r];
            progressPoints[r].push_back(at);
          }
        }
        TraceEvent ev;
        ev.kind = TraceEvent::Kind::NewtonSchulz;
        ev.rank = r;
        ev.index = round;
        ev.begin = clock[r];
        ev.end = clock[r] + seconds;
        ev.rows = b.rows;
        ev.cols = b.cols;
        ev.matrices = static_cast<int64_t>(b.matrices.size());
        ev.flops = flops;
        event(ev);
        clock[r] += seconds;
        result.ranks[r].nsSeconds += seconds;
      }
    }
  }

  void run() {
    setUp();
    using Kind = ScheduleStep::Kind;
    for (const ScheduleStep &s : plan.schedule) {
      switch (s.kind) {
      case Kind::Momentum:
        for (int64_t r = 0; r < world; ++r)
          elementwise(r, prepareWork[r],
                      TraceEvent::Kind::Momentum, 0);
        break;
      case Kind::Start:
        start(s.index);
        break;
      case Kind::Done:
        done(s.index);
        break;
      case Kind::NewtonSchulz:
        newtonSchulz(s.index);
        break;
      case Kind::ApplyUpdate:
        for (int64_t r = 0; r < world; ++r)
          elementwise(r,
                      applyElements.empty()
                          ? 0
                          : applyElements[s.index][r] * kApplyBytes,
                      TraceEvent::Kind::ApplyUpdate, s.index);
        break;
      case Kind::AdamW:
        for (int64_t r = 0; r < world; ++r)
          elementwise(r, elementUpdateWork[r],
                      TraceEvent::Kind::AdamW, 0);
        break;
      }
    }
    for (int64_t r = 0; r < world; ++r) {
      result.ranks[r].finishSeconds = clock[r];
      result.stepSeconds = std::max(result.stepSeconds, clock[r]);
    }
  }
};

} // namespace

double nsFlopsPerSecond(const Plan &plan, const Profile &profile) {
  std::string dtype =
      plan.ns.nsDtype == "auto" ? profile.defaultNsDtype : plan.ns.nsDtype;
  return profile.flopsPerSecond(dtype);
}

Result simulate(const Plan &plan, const Profile &profile,
                const Bounds &bounds, bool withEvents) {
  Walker walker(plan, profile, withEvents);
  walker.run();
  Result result = std::move(walker.result);
  // The bounds, on the same machine: the busiest rank's least NS work at
  // the rate its node allows, and the least bytes spread evenly over every
  // rank's receiving links (both classes at once when there are several
  // nodes).
  double slowest = 1;
  for (double s : walker.slowdown)
    slowest = std::max(slowest, s);
  result.computeBoundSeconds =
      static_cast<double>(bounds.makespanFlops) / walker.nsRate * slowest;
  double perRank = profile.intraNode.bytesPerSecond +
                   (result.nodes > 1 ? profile.interNode.bytesPerSecond : 0);
  result.commBoundSeconds = static_cast<double>(bounds.bytesReceived) /
                            (static_cast<double>(plan.worldSize) * perRank);
  return result;
}

} // namespace muon::sim
