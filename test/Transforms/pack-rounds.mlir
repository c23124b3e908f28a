// RUN: muon-opt %s -split-input-file -muon-pack-rounds | FileCheck %s

// Each owner's matrices are spread over the rounds, largest first.
// CHECK-LABEL: muon.model @two_rounds
// CHECK:         muon.round 0 [@a, @b]
// CHECK-NEXT:    muon.round 1 [@c]
muon.model @two_rounds {
  shard.grid @mesh(shape = 2)
  muon.distributed {max_rounds = 2 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @c : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @c]
  muon.assign 1 [@b]
}

// -----

// The sequential debug order: one round per owner, in rank order.
// CHECK-LABEL: muon.model @debug
// CHECK:         muon.round 0 [@b]
// CHECK-NEXT:    muon.round 1 [@a, @c]
muon.model @debug {
  shard.grid @mesh(shape = 2)
  muon.distributed {async = false}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @c : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@b]
  muon.assign 1 [@a, @c]
}

// -----

// A 20 KiB budget holds one gathered 64x64 f32 matrix (16 KiB) per rank, so
// rank 0's two matrices go to different rounds even with max_rounds = 1.
// CHECK-LABEL: muon.model @budget
// CHECK:         muon.round 0 [@a]
// CHECK-NEXT:    muon.round 1 [@c]
muon.model @budget {
  shard.grid @mesh(shape = 2)
  muon.distributed {max_rounds = 1 : i64, gather_budget_bytes = 20480 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @c : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @c]
}

// -----

// A batched parameter whose slices land in different rounds is listed by
// slice (each owner spreads its matrices over the rounds)...
// CHECK-LABEL: muon.model @slices
// CHECK:         muon.round 0 [@e[0], @f[0]]
// CHECK-NEXT:    muon.round 1 [@e[1], @f[1]]
muon.model @slices {
  shard.grid @mesh(shape = 2)
  muon.distributed {max_rounds = 2 : i64}
  muon.param @e : tensor<2x32x32xf32> on @mesh split [[], [0], []]
  muon.param @f : tensor<2x16x16xf32> on @mesh split [[], [0], []]
  muon.assign 0 [@e]
  muon.assign 1 [@f]
}

// -----

// ... and one whose slices share a round is named whole.
// CHECK-LABEL: muon.model @whole
// CHECK:         muon.round 0 [@e, @f]
// CHECK-NOT:     muon.round 1
muon.model @whole {
  shard.grid @mesh(shape = 2)
  muon.distributed {max_rounds = 1 : i64}
  muon.param @e : tensor<2x32x32xf32> on @mesh split [[], [0], []]
  muon.param @f : tensor<2x16x16xf32> on @mesh split [[], [0], []]
  muon.assign 0 [@e]
  muon.assign 1 [@f]
}

// -----

// No distributed config: one round, nothing moves.
// CHECK-LABEL: muon.model @single
// CHECK:         muon.round 0 [@a]
muon.model @single {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
}
