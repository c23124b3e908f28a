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
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_VALIDATE_H
#define MUON_PLAN_VALIDATE_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Json.h"

namespace muon {

/// The first problem, at its plan-file JSON path ("exchanges[2].transfers[7]");
/// empty when the plan is sound.
json::Error validatePlan(const Plan &plan);

} // namespace muon

#endif // MUON_PLAN_VALIDATE_H
