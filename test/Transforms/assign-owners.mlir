// RUN: muon-opt %s -split-input-file -muon-assign-owners | FileCheck %s

// LPT on Newton-Schulz cost: the big matrix fills rank 0, the rest go to the
// less loaded rank 1. Ties go to the lowest rank.
// CHECK-LABEL: muon.model @lpt
// CHECK:         muon.assign 0 [@a]
// CHECK-NEXT:    muon.assign 1 [@b, @c, @d]
// CHECK-NEXT:  }
muon.model @lpt {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<64x64xf32> on @mesh split [[], []]
  muon.param @b : tensor<32x64xf32> on @mesh split [[], []]
  muon.param @c : tensor<64x32xf32> on @mesh split [[], []]
  muon.param @d : tensor<16x16xf32> on @mesh split [[], []]
  muon.param @norm : tensor<64xf32> on @mesh split [[]]
}

// -----

// Uneven rows: 3 rows over 2 ranks leave rank 0 with 2 rows and rank 1 with
// 1; only holders of the largest piece are candidates, so both go to rank 0.
// CHECK-LABEL: muon.model @uneven
// CHECK:         muon.assign 0 [@a, @b]
// CHECK-NOT:     muon.assign 1
muon.model @uneven {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<3x8xf32> on @mesh split [[0], []]
  muon.param @b : tensor<3x8xf32> on @mesh split [[0], []]
}

// -----

// Pipeline stages: a matrix is owned inside its stage.
// CHECK-LABEL: muon.model @stages
// CHECK:         muon.assign 0 [@s0]
// CHECK-NEXT:    muon.assign 2 [@s1]
muon.model @stages {
  shard.grid @mesh(shape = 2x2) {muon.axis_names = ["pp", "dp"]}
  muon.distributed
  muon.param @s0 : tensor<8x8xf32> on @mesh split [[1], []] only [0 = 0]
  muon.param @s1 : tensor<8x8xf32> on @mesh split [[1], []] only [0 = 1]
}

// -----

// Expert stack split on its batch dim: each slice goes to a rank holding it.
// CHECK-LABEL: muon.model @experts
// CHECK:         muon.assign 0 [@e[0]]
// CHECK-NEXT:    muon.assign 1 [@e[1]]
// CHECK-NEXT:    muon.assign 2 [@e[2]]
// CHECK-NEXT:    muon.assign 3 [@e[3]]
muon.model @experts {
  shard.grid @mesh(shape = 4) {muon.axis_names = ["ep"]}
  muon.distributed
  muon.param @e : tensor<4x8x8xf32> on @mesh split [[0], [], []]
}

// -----

// Explicit assignments are kept as given.
// CHECK-LABEL: muon.model @explicit
// CHECK:         muon.assign 1 [@a, @b]
// CHECK-NOT:     muon.assign
muon.model @explicit {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<64x64xf32> on @mesh split [[], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[], []]
  muon.assign 1 [@a, @b]
}

// -----

// Without a distributed config every rank runs the single-device step on
// what it holds: no owners.
// CHECK-LABEL: muon.model @single
// CHECK-NOT:     muon.assign
muon.model @single {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<64x64xf32> on @mesh split [[], []]
}

// -----

// Per-head Newton-Schulz: each head's block is a matrix with its own
// candidates. @v's two heads of columns (8 x 6, the costlier) span both row
// shards: a tie, to rank 0 then the less loaded rank 1. @w's heads of 4 rows
// lie in rank 0's rows (head 0), across both (head 1: 2 rows each, to the
// less loaded rank 1) and in rank 1's rows (head 2).
// CHECK-LABEL: muon.model @heads
// CHECK:         muon.assign 0 [@w[0], @v[0]]
// CHECK-NEXT:    muon.assign 1 [@w[1], @w[2], @v[1]]
// CHECK-NEXT:  }
muon.model @heads {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<12x8xf32> on @mesh split [[0], []] num_heads 3
  muon.param @v : tensor<8x12xf32> on @mesh split [[0], []] num_heads 2 head_split_dim 1
}
