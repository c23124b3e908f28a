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

    Placement: a matrix whose parameter is replicated (DDP, context
    parallelism, HSDP's replicate axis) may instead be orthogonalized once
    per replica (`muon.assign N redundant [...]`): under DDP every holder
    runs it on its own copy and nothing moves for it. `muon.distributed`'s
    `placement` decides: "once" never, "redundant_below" for matrices of
    fewer than `redundant_below` elements, "auto" (the default) where the
    cost model of `muon/Plan/Placement.h` predicts it faster on the machine
    these options describe (a tool copies them from a machine profile);
    without a machine, "auto" keeps one owner per matrix. A redundant
    matrix's owner is picked among the first replica's holders and loads
    every replica's owner alike.

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
  let options = [
    Option<"nsFlopsPerSecond", "ns-flops-per-second", "double", "0",
           "Newton-Schulz's rate on one rank (flop/s) for placement auto; "
           "0: no machine, every matrix once">,
    Option<"linkLatency", "link-latency", "double", "0",
           "Seconds per message inside a node">,
    Option<"linkBytesPerSecond", "link-bytes-per-second", "double", "0",
           "Bytes per second per rank and direction inside a node">,
    Option<"interLatency", "inter-node-latency", "double", "0",
           "Seconds per message across nodes">,
    Option<"interBytesPerSecond", "inter-node-bytes-per-second", "double",
           "0", "Bytes per second per rank and direction across nodes">,
    Option<"ranksPerNode", "ranks-per-node", "int64_t", "0",
           "Ranks per node in consecutive blocks; 0: one node">,
  ];
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

def PackRounds : Pass<"muon-pack-rounds", "::mlir::muon::ModelOp"> {
  let summary = "Split the step's exchanges into rounds that can overlap";
  let description = [{
    With owners assigned, every Muon matrix is gathered to its owner,
    orthogonalized there and scattered back. This pass decides which
    matrices travel together: round r gathers its matrices in one packed
    exchange (all-to-all-v, never one collective per parameter) and scatters
    them in another, so NS of one round can overlap the exchanges of others.

    Each owner spreads its matrices over R rounds, largest first, each to the
    round where that owner has the least NS work. R is the largest number of
    matrices a rank owns, capped by `max_rounds`, and raised until each
    round's gathered matrices fit `gather_budget_bytes` per rank (both on
    `muon.distributed`). With `async = false` there is one round per owning
    rank, in rank order: the seeds' sequential debug mode. Without a
    distributed config there is one round and nothing moves. The exchanges'
    contents are not written out: they follow from the layouts, the owners
    and the rounds (see docs/plan-format.md). Existing rounds and schedule
    are replaced.

    Before:
    ```mlir
    muon.model @m {
      shard.grid @mesh(shape = 2)
      muon.distributed {max_rounds = 2 : i64}
      muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
      muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
      muon.param @c : tensor<64x64xf32> on @mesh split [[0], []]
      muon.assign 0 [@a, @c]
      muon.assign 1 [@b]
    }
    ```
    After (added):
    ```mlir
      muon.round 0 [@a, @b]
      muon.round 1 [@c]
    ```
  }];
}

def ScheduleStep : Pass<"muon-schedule-step", "::mlir::muon::ModelOp"> {
  let summary = "Split exchanges into start/done and order the step";
  let description = [{
    Writes the step as one `muon.schedule`: every exchange becomes a
    `muon.exchange_start` returning a `!muon.token` and a
    `muon.exchange_done` on it, interleaved with `muon.newton_schulz` of each
    round and the elementwise steps: `muon.momentum` first (the gathers
    carry its result), `muon.apply_update` of a round right after its
    scatter, and `muon.adamw_update` after the AdamW `reduce` exchange (which
    starts first) or last. A list scheduler issues starts as early as the
    limits allow and
    dones as late as possible: at most `prefetch_count + 1` exchanges in
    flight, gathers up to `prefetch_count` rounds ahead, the gathered
    matrices of a round (held from its gather's start to its scatter's done)
    within `gather_budget_bytes`, gather r done just before NS r and
    scatter r started just after. Every choice depends only on the model,
    never on the rank, so all ranks issue the same collectives in the same
    order. With `async = false` one exchange is in flight at a time.

    Before: the rounds of `muon-pack-rounds`, `prefetch_count = 1`.
    After:
    ```mlir
    muon.schedule {
      muon.momentum
      %0 = muon.exchange_start gather round 0 : !muon.token
      %1 = muon.exchange_start gather round 1 : !muon.token
      muon.exchange_done %0
      muon.newton_schulz round 0
      %2 = muon.exchange_start scatter round 0 : !muon.token
      muon.exchange_done %1
      muon.newton_schulz round 1
      %3 = muon.exchange_start scatter round 1 : !muon.token
      muon.exchange_done %2
      muon.apply_update round 0
      muon.exchange_done %3
      muon.apply_update round 1
      muon.adamw_update
    }
    ```
  }];
}

def VerifySchedule : Pass<"muon-verify-schedule", "::mlir::muon::ModelOp"> {
  let summary = "Check the step's schedule against every rule";
  let description = [{
    Re-simulates the `muon.schedule` without the scheduler's logic and
    reports the first violation at the offending op: an exchange started or
    waited on twice or never, NS of a round before its gather is done, a
    scatter started before its round's NS, momentum after a gather started,
    a round's update before its scatter is done, AdamW before its reduce is
    done, a step missing or repeated, more exchanges in flight than
    `prefetch_count + 1`, or a rank holding more gathered bytes than
    `gather_budget_bytes`. There is one sequence for all ranks, so every rank
    issues the same exchanges in the same order by construction. The IR is
    not changed.

    ```mlir
    muon.schedule {
      muon.momentum
      %0 = muon.exchange_start gather round 0 : !muon.token
      // error: NS of round 0 before its gather is done
      muon.newton_schulz round 0
      ...
    ```
  }];
}

#endif // MUON_TRANSFORMS_PASSES
