//===- Passes.td - muon dialect passes --------------------*- tablegen -*-===//
#ifndef MUON_TRANSFORMS_PASSES
#define MUON_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def AssignOwners : Pass<"muon-assign-owners", "::mlir::muon::ModelOp"> {
  let summary = "Give every Muon matrix exactly one owner, balancing NS cost";
  let description = [{
    Zero redundancy: each Muon matrix (each 2-D slice of a batched parameter
    counts) is orthogonalized on exactly one rank. Candidates are the ranks
    holding the largest piece of the matrix, so that gathering to the owner
    moves no more than the lower bound. Matrices are taken in decreasing
    Newton-Schulz cost `ns_steps*(4m^2n+2m^3)` (m <= n) and each goes to the
    least-loaded candidate (LPT). Ties look ahead: each distinct candidate
    set is a group that must absorb the work only it can take, and among
    equally loaded candidates the rank whose groups expect the least final
    average load wins (so work any rank may take avoids groups that will be
    busy with work only they can take, e.g. expert groups); then the lowest
    rank. Every rank computes the same result. `only` sub-meshes are honoured because only
    holders are candidates.

    The result is written as `muon.assign` ops, one per rank with work, so
    the model verifier checks it like a user's explicit assignment. Models
    with explicit assignments, or without a distributed config (where every
    rank runs the single-device algorithm), are left unchanged.

    Before:
    ```mlir
    muon.model @m {
      shard.grid @mesh(shape = 2) {muon.axis_names = ["dp"]}
      muon.distributed
      muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
      muon.param @b : tensor<32x64xf32> on @mesh split [[0], []]
    }
    ```
    After:
    ```mlir
    muon.model @m {
      ...
      muon.assign 0 [@a]
      muon.assign 1 [@b]
    }
    ```
  }];
}

def PrintOwners : Pass<"muon-print-owners", "::mlir::muon::ModelOp"> {
  let summary = "Print each rank's owned matrices and the report figures";
  let description = [{
    Prints, for a model whose owners are assigned, each rank's owned matrices
    and Newton-Schulz flops, the total, and the two lower bounds of the run
    report (bytes any zero-redundancy scheme must receive, and the busiest
    rank's least NS work). The IR is not changed.

    ```
    model @m: 2 ranks, 3 Muon matrices, wire_dtype f32
    rank 0: ns_flops 15728640 owned 2 [a, c]
    rank 1: ns_flops 7864320 owned 1 [b]
    total.ns_flops 23592960
    busiest_rank.ns_flops 15728640
    lower_bound.makespan_flops 11796480
    lower_bound.bytes_received 49152
    ```
  }];
  let options = [
    Option<"wireDtype", "wire-dtype", "std::string", "\"f32\"",
           "Element type the exchanges carry (f32 or bf16)">,
  ];
}

#endif // MUON_TRANSFORMS_PASSES
