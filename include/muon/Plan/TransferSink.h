//===- TransferSink.h - Transfers taken as the compiler makes them -*- C++ -*-===//
//
// A distributed plan's transfers are most of it: 19 million at 16,384 ranks
// (1.2 GB as a list). A compiler given a sink hands each transfer to it as
// it is made instead of storing it in the plan, so the list never exists.
// Two sinks: PlanBinaryWriter (PlanBinary.h) encodes them into the rank
// sections of a binary plan file; TransferCounter only counts each rank's
// bytes, which is all a dry run's report needs.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_TRANSFERSINK_H
#define MUON_PLAN_TRANSFERSINK_H

#include "muon/Plan/Plan.h"

#include <cstdint>
#include <vector>

namespace muon {

class TransferSink {
public:
  virtual ~TransferSink();
  /// Called once, with the plan's parameters, mesh and world size set.
  virtual void begin(const Plan &plan) = 0;
  /// Whether begin() was called: a compiler given a sink uses it only for a
  /// distributed plan built with its rounds.
  virtual bool begun() const = 0;
  /// One transfer of exchange `exchange` (a gather when `gather`), in the
  /// exchange's order; exchanges may interleave.
  virtual void add(int64_t exchange, bool gather, const Transfer &transfer) = 0;
  /// The finished plan's per-rank figures with the added transfers' bytes
  /// (what computeRankFigures counts from a whole plan).
  virtual std::vector<RankFigures> figures(const Plan &plan) const = 0;
};

/// Counts each rank's bytes sent and received, and keeps nothing else.
class TransferCounter final : public TransferSink {
public:
  void begin(const Plan &plan) override;
  bool begun() const override { return started; }
  void add(int64_t exchange, bool gather, const Transfer &transfer) override;
  std::vector<RankFigures> figures(const Plan &plan) const override;
  /// How many transfers were added.
  int64_t count() const { return transfers; }

private:
  bool started = false;
  int64_t wireBytes = 0, transfers = 0;
  std::vector<int64_t> sent, received;
};

} // namespace muon

#endif // MUON_PLAN_TRANSFERSINK_H
