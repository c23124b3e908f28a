//===- Validate.h - A plan checked against itself ---------------*- C++ -*-===//
//
// A plan file is input like any other: a trainer may load one written by
// another version, edited by hand, or damaged. Before any rank touches
// memory, validatePlan re-derives from the plan's own model (mesh, params,
// owners, rounds) everything the runtime will index with, and requires the
// rest of the plan to agree:
//  - sizes within the documented limits (Support/Limits.h);
//  - parameters, layouts and the mesh consistent (axes in range, each
//    used once, `only` coordinates on the mesh, devices a permutation);
//  - the matrices exactly the Muon matrices of the parameters, in order,
//    with their shapes and NS flops; owners that hold a piece;
//  - every transfer's source holding exactly the box and summand it sends,
//    its destination the owner (gathers) or a holder receiving its own
//    piece (scatters), and each owner receiving every (piece, summand) it
//    lacks exactly once, each holder its new piece exactly once;
//  - every AdamW reduction between holders of the same box, covering every
//    other summand exactly once;
//  - NS batches holding exactly each rank's matrices, by round and shape;
//  - rounds a partition, two exchanges per round (and the reduce), and a
//    schedule that passes verifySchedule.
// With all of that true, the step executor's reads and writes stay inside
// the buffers it sizes from the same plan.
//
// Each check returns the first problem as an InvalidArgument Status whose
// location is the plan-file JSON path, raw ("" for the plan itself), so that
// a caller can nest it under its own path; json::describe prints it.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_VALIDATE_H
#define MUON_PLAN_VALIDATE_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Json.h"

namespace muon {

/// The first problem, at its plan-file JSON path ("exchanges[2].transfers[7]");
/// ok when the plan is sound.
Status validatePlan(const Plan &plan);

/// A group's hyper-parameters in range (finite, non-negative, momentum and
/// betas below 1, a known adjust_lr), at the path of the field inside the
/// group ("lr", "betas[1]"); ok when sound. What validatePlan checks of
/// every group, and what a trainer's new settings must pass.
Status checkGroupSettings(const PlanGroup &group);

/// The largest lr (and extra_scale_factor) a group may take.
inline constexpr double kMaxStepRate = 1e10;
/// The bounds that keep every step of finite inputs finite: lr and
/// extra_scale_factor at most kMaxStepRate, lr x weight_decay at most 2
/// (checkGroupSettings checks them too).
Status checkStepBounds(const PlanGroup &group);

/// A QK-clip layer against its parameters' shapes (null: no such
/// parameter): both exist and are 2-D, num_heads >= 1 divides the query's
/// rows, num_kv_heads >= 1 divides num_heads and the key's rows, the
/// threshold is finite and > 0. The path is the field inside the layer
/// ("key", "num_heads"); ok when sound. validatePlan and the dialect's
/// verifier both ask it.
Status checkQkClipLayer(const QkClipLayer &layer,
                        const std::vector<int64_t> *queryShape,
                        const std::vector<int64_t> *keyShape);

/// The plan's Newton-Schulz settings (each configuration's steps,
/// coefficients and eps, and the precision: coefficients under which the
/// iteration could overflow it are refused), as validatePlan checks them:
/// what a run that sets another ns_dtype (muon-run --ns-dtype f16) checks
/// again.
Status checkNewtonSchulz(const Plan &plan);

/// The checks of the parts every rank reads whole (settings, mesh,
/// parameters): what must hold before anything indexes with them.
Status validatePlanHeader(const Plan &plan);

/// The checks of one rank's part of a plan (Plan::sliceRank >= 0), as
/// strictly as validatePlan checks the whole, for everything that part holds:
/// its matrices exactly those the rank holds or owns (each the parameters'
/// matrix it names), rounds, NS batches and every transfer and reduction
/// with the rank at one end. For a matrix the rank owns, that is all of its
/// transfers, checked as validatePlan does; for one it only holds, its own
/// gather (if any) and its scatter. What it cannot see (other ranks' counts
/// agreeing with its own) the launching side checks with validatePlan.
/// Costs O(what the rank holds), plus O(world size) for the mesh.
Status validatePlanSlice(const Plan &plan);

} // namespace muon

#endif // MUON_PLAN_VALIDATE_H
