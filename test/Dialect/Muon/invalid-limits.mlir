// Sizes past the documented limits (docs/user-guide.md, "Limits") and grids
// the layout math cannot use: errors at the op, before anything is sized by
// them.
// RUN: muon-opt %s -split-input-file -verify-diagnostics

muon.model @m {
  // expected-error @+1 {{mesh axis 0 has size 0; sizes must be at least 1}}
  shard.grid @mesh(shape = 0)
  muon.distributed
  muon.param @w : tensor<4x4xf32> on @mesh split [[0], []]
}

// -----

muon.model @m {
  // expected-error @+1 {{the model's grid must have a static shape}}
  shard.grid @mesh(shape = ?x2)
  muon.distributed
}

// -----

muon.model @m {
  // expected-error @+1 {{a mesh of 4294967296 x 4294967296 devices is above the limit of 2^16 (65536) ranks}}
  shard.grid @mesh(shape = 4294967296x4294967296)
  muon.distributed
}

// -----

muon.model @m {
  // expected-error @+1 {{a mesh of 2048 x 1024 devices is above the limit of 2^16 (65536) ranks}}
  shard.grid @mesh(shape = 2048x1024)
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  // expected-error @+1 {{parameter 'w' has more elements than the limit of 2^40 (1099511627776) per parameter}}
  muon.param @w : tensor<1099511627776x1099511627776xf32> on @mesh split [[0], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  // expected-error @+1 {{parameter 'w' has 1048576 x 1048576 matrices, above the limit of 2^34 (17179869184) elements per Muon matrix}}
  muon.param @w : tensor<1048576x1048576xf32> on @mesh split [[0], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  // expected-error @+1 {{parameter 'e' has 2147483648 matrices, above the limit of 2^20 (1048576)}}
  muon.param @e : tensor<2147483648x4x4xf32> on @mesh split [[0], [], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'prefetch_count' 9223372036854775807 is above the limit of 2^10 (1024)}}
  muon.distributed {prefetch_count = 9223372036854775807 : i64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'max_rounds' 100000 is above the limit of 2^12 (4096)}}
  muon.distributed {max_rounds = 100000 : i64}
}

// -----

// expected-error @+1 {{world_size 4611686018427387904 is outside [1, 2^16 (65536)]}}
muon.model @m attributes {world_size = 4611686018427387904 : i64} {
  muon.group ddp [[0]]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 65536)
  muon.distributed
  // expected-error @+1 {{parameter 'w': the model's matrices have more than 2^24 (16777216) pieces across ranks with this parameter}}
  muon.param @w : tensor<1024x4x4xf32> on @mesh split [[], [], []]
}
