//===- ExchangePlan.h - The exchanges of a zero-redundancy step -*- C++ -*-===//
//
// Builds the plan of one optimizer step from a verified model on a mesh
// whose owners are assigned. For every Muon matrix the owner receives each
// partial summand of each piece it lacks, from one of the replicas holding
// it (the one that has sent the least so far, ties to the lowest rank), and
// then sends every other holder its new piece: p*S - s into the owner and
// c*S - s out of it, s being the owner's piece. With an owner holding a
// largest piece (what muon-assign-owners picks) that is exactly the report's
// lower bound; an explicit assignment to a rank with a smaller piece moves
// correspondingly more, and the report shows it.
//
// All gathers travel in one packed exchange and all scatters in another
// (round 0); splitting into overlapped rounds is the scheduler's job.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_ANALYSIS_EXCHANGEPLAN_H
#define MUON_DIALECT_MUON_ANALYSIS_EXCHANGEPLAN_H

#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Plan/Plan.h"
#include "muon/Plan/TransferSink.h"
#include "muon/Planner/Schedule.h"

namespace mlir::muon {

/// Fails, with an error on the model, when a distributed model has a Muon
/// matrix without an owner (run muon-assign-owners first) or `wireDtype` is
/// not f32 or bf16.
/// With `withTransfers` false only the matrices, owners and settings are
/// filled (what packing and scheduling need), which is much cheaper at
/// scale.
/// With `roundOf` (each matrix's round, `rounds` of them), the transfers go
/// straight into the exchanges of their rounds (2r gathers, 2r+1 scatters),
/// in the order setRounds would give them: at scale the transfers are most
/// of the plan, and building them once in place saves copying them again.
FailureOr<::muon::Plan> buildPlan(ModelOp model, const ModelLayout &layout,
                                  StringRef wireDtype,
                                  bool withTransfers = true,
                                  const std::vector<int64_t> *roundOf = nullptr,
                                  int64_t rounds = 0,
                                  ::muon::TransferSink *stream = nullptr);

/// The schedule options the model's muon.distributed op sets.
::muon::ScheduleOptions scheduleOptionsOf(ModelOp model);

/// The plan the IR describes: buildPlan with the model's wire dtype, its
/// options, then the rounds of its muon.round ops and the sequence of its
/// muon.schedule op where they exist. Fails with an error on the model.
/// `wireWithoutConfig` is the wire dtype reported for models without a
/// distributed config (which move nothing).
/// With `stream`, a distributed plan's transfers go to that sink (begun
/// here) instead of into the plan's exchanges.
FailureOr<::muon::Plan> planFromModel(ModelOp model, const ModelLayout &layout,
                                      StringRef wireWithoutConfig = "f32",
                                      bool withTransfers = true,
                                      ::muon::TransferSink *stream = nullptr);

/// computeModelLayout, then planFromModel without transfers: what the
/// packing, scheduling and verification passes work on.
FailureOr<::muon::Plan> ownersPlanOf(ModelOp model);

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_ANALYSIS_EXCHANGEPLAN_H
