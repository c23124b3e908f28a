// Every verifier rule of the dialect, one case each.
// RUN: muon-opt %s -split-input-file -verify-diagnostics

muon.model @m {
  shard.grid @mesh(shape = 2x4)
  muon.distributed
  // expected-error @+1 {{parameter 'w' has 1 split entries but 2 dim(s)}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[0]]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2x4)
  muon.distributed
  // expected-error @+1 {{parameter 'w' splits dim 1 on mesh axis 2, but grid @mesh has 2 axes}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[0], [2]]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2x4)
  muon.distributed
  // expected-error @+1 {{parameter 'w' uses mesh axis 0 twice (split of dim 0 and split of dim 1)}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[0], [0]]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2x4)
  muon.distributed
  // expected-error @+1 {{parameter 'w' uses mesh axis 1 twice (split of dim 0 and only)}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[1], []] only [1 = 0]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 4x2)
  // expected-error @+1 {{parameter 'w' is restricted ('only') to coordinate 4 of mesh axis 0, which has size 4}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] only [0 = 4]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{parameter 'b' has 1 dim(s) but Muon orthogonalizes matrices (2 or more dims, leading dims being batch dims); use the adamw group}}
  muon.param @b : tensor<8xf32> on @mesh split [[]] group muon
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{unknown optimizer group 'sgd'; expected 'muon', 'adamw' or 'lion'}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] group sgd
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{parameter 'w' has element type 'i32'; expected f32, bf16 or f16}}
  muon.param @w : tensor<8x8xi32> on @mesh split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{parameter 'w' refers to unknown grid @other}}
  muon.param @w : tensor<8x8xf32> on @other split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{parameter 'w' mixes a mesh layout with process-group attributes (tp_dim, stage, expert)}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] tp_dim 0
}

// -----

// No distributed config while something is sharded.
muon.model @m {
  shard.grid @mesh(shape = 2) {muon.axis_names = ["dp"]}
  // expected-error @+1 {{parameter 'w' is sharded (dim 0 split on mesh axis 'dp') but there is no distributed config}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[0], []]
}

// -----

// No distributed config while a gradient is partial.
muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{parameter 'w' has a partial gradient on mesh axis 'axis 0' but there is no distributed config to sum it}}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] partial [0]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'ns_steps' must be less than 100, got 100}}
  muon.optimizer {ns_steps = 100 : i64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'ns_steps' must be at least 1, got 0}}
  muon.optimizer {ns_steps = 0 : i64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // The closed sets are enum attributes: anything else does not parse.
  // expected-error @+2 {{expected ::mlir::muon::AdjustLr to be one of: original, match_rms_adamw, spectral, unit_rms_norm, spectral_unclamped}}
  // expected-error @+1 {{failed to parse Muon_AdjustLrAttr parameter 'value'}}
  muon.optimizer {adjust_lr = #muon.adjust_lr<shape_scaling>}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+2 {{expected ::mlir::muon::WeightDecayMode to be one of: decoupled, cautious, none}}
  // expected-error @+1 {{failed to parse Muon_WeightDecayModeAttr parameter 'value'}}
  muon.optimizer {weight_decay_mode = #muon.weight_decay_mode<cautius>}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+2 {{expected ::mlir::muon::NsDtype to be one of: auto, f32, bf16, f16}}
  // expected-error @+1 {{failed to parse Muon_NsDtypeAttr parameter 'value'}}
  muon.optimizer {ns_dtype = #muon.ns_dtype<f64>}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'ns_coefficients' has 2 triples; expected 1 (for every step) or ns_steps = 5}}
  muon.optimizer {ns_coefficients = [array<f64: 1.0, 2.0, 3.0>, array<f64: 1.0, 2.0, 3.0>]}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'ns_coefficients' entry 0 must be an (a, b, c) triple}}
  muon.optimizer {ns_coefficients = [array<f64: 1.0, 2.0>]}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'lr' must be a finite number >= 0, got -1}}
  muon.optimizer {lr = -1.0 : f64}
}

// -----

// What the plan validator refuses, the verifier refuses first (a fuzzer
// found momentum 9 compiled into a plan that would not load).
muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'momentum' must be in [0, 1), got 9}}
  muon.optimizer {momentum = 9.0 : f64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{adamw 'betas' must be in [0, 1), got 1}}
  muon.adamw {betas = array<f64: 0.9, 1.0>}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'prefetch_count' must be >= 0, got -1}}
  muon.distributed {prefetch_count = -1 : i64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  // expected-error @+1 {{a model has at most one 'muon.distributed'}}
  muon.distributed
}

// -----

// Incomplete explicit assignments.
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{incomplete assignments: parameter 'b' is assigned to no rank}}
  muon.param @b : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
}

// -----

// Incomplete: one slice of a batched parameter has no owner.
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  // expected-error @+1 {{incomplete assignments: matrix 'e[1]' is assigned to no rank}}
  muon.param @e : tensor<2x8x8xf32> on @mesh split [[0], [], []]
  muon.assign 0 [@e[0]]
}

// -----

// Overlapping explicit assignments.
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  // expected-error @+1 {{overlapping assignments: parameter 'a' is assigned to rank 0 and to rank 1}}
  muon.assign 1 [@a]
}

// -----

// An owner must hold a piece of the matrix.
muon.model @m {
  shard.grid @mesh(shape = 2x2) {muon.axis_names = ["pp", "dp"]}
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[1], []] only [0 = 1]
  // expected-error @+1 {{assignment to rank 1: the rank does not hold parameter 'a' (held by ranks [2, 3])}}
  muon.assign 1 [@a]
}

// -----

// An empty trailing chunk holds nothing: 1 row over 2 ranks leaves rank 1 empty.
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<1x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{assignment to rank 1: the rank does not hold parameter 'a' (held by ranks [0])}}
  muon.assign 1 [@a]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{assignment names rank 2, outside the world of 2 ranks}}
  muon.assign 2 [@a]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{assignment to rank 0 names unknown parameter 'nope'}}
  muon.assign 0 [@a, @nope]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []] group adamw
  // expected-error @+1 {{names parameter 'a', which is in the adamw group; only Muon matrices have owners}}
  muon.assign 0 [@a]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @e : tensor<2x8x8xf32> on @mesh split [[], [], []]
  // expected-error @+1 {{assignment to rank 0 names matrix 'e[2]', but the parameter has 2 matrices}}
  muon.assign 0 [@e[2]]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  // expected-error @+1 {{explicit assignments need a distributed config}}
  muon.assign 0 [@a]
}

// -----

// Mesh axis names.
muon.model @m {
  // expected-error @+1 {{mesh axis name 'dp' is used twice}}
  shard.grid @mesh(shape = 2x2) {muon.axis_names = ["dp", "dp"]}
}

// -----

muon.model @m {
  // expected-error @+1 {{'muon.axis_names' has 1 names but the grid has 2 axes}}
  shard.grid @mesh(shape = 2x2) {muon.axis_names = ["dp"]}
}

// -----

muon.model @m {
  // expected-error @+1 {{'muon.devices' must be a permutation of 0..3}}
  shard.grid @mesh(shape = 2x2) {muon.devices = array<i64: 0, 1, 1, 3>}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{a model has at most one 'shard.grid'}}
  shard.grid @mesh2(shape = 2)
}

// -----

muon.model @m {
  // expected-error @+1 {{the model has parameters but neither a grid nor process groups}}
  muon.param @a : tensor<8x8xf32>
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.param @b : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
  // expected-error @+1 {{parameter 'a' is in round 0 and round 1}}
  muon.round 1 [@a, @b]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{incomplete rounds: parameter 'b' is in no round}}
  muon.param @b : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  // expected-error @+1 {{rounds must be numbered 0..0 once each; found 3 again or out of range}}
  muon.round 3 [@a]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  // expected-error @+1 {{a schedule needs the model's rounds (muon.round, from muon-pack-rounds)}}
  muon.schedule {
  }
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  muon.round 0 [@a]
  muon.schedule {
    // expected-error @+1 {{the gather of round 0 is waited on 0 times; every exchange needs exactly one muon.exchange_done}}
    %0 = muon.exchange_start gather round 0 : !muon.token
  }
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  muon.round 0 [@a]
  muon.schedule {
    // expected-error @+2 {{expected ::mlir::muon::ExchangePhase to be one of: gather, scatter, reduce}}
    // expected-error @+1 {{failed to parse Muon_ExchangePhaseAttr parameter 'value'}}
    %0 = muon.exchange_start allreduce round 0 : !muon.token
    muon.exchange_done %0
  }
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{'muon.distributed' op attribute 'wire_dtype' failed to satisfy constraint: the element type exchanges carry}}
  muon.distributed {wire_dtype = "fp8"}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  muon.round 0 [@a]
  muon.schedule {
    // expected-error @+1 {{the AdamW reduce belongs to no round; write 'round 0'}}
    %0 = muon.exchange_start reduce round 5 : !muon.token
    muon.exchange_done %0
  }
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  muon.round 0 [@a]
  muon.schedule {
    // expected-error @+1 {{'builtin.unrealized_conversion_cast' is not a step of a muon.schedule}}
    %x = "builtin.unrealized_conversion_cast"() : () -> i32
  }
}

// -----

// NorMuon's EMA weight: the plan validator's range, refused at the op.
muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'normuon_beta2': expected a number in [0, 1), got 1}}
  muon.optimizer {normuon = true, normuon_beta2 = 1.0 : f64}
}

// -----

// The settings the op does not declare come from the settings table
// (GroupSettingAttrs.h): a name outside it is refused, as is a value of the
// wrong kind or a flag's setting without the flag.
muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer has no setting 'nromuon'}}
  muon.optimizer {nromuon = true}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'normuon' must be true or false}}
  muon.optimizer {normuon = 1.0 : f64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{optimizer 'normuon_beta2' is NorMuon's setting; it needs normuon = true}}
  muon.optimizer {normuon_beta2 = 0.5 : f64}
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{adamw has no setting 'normuon'}}
  muon.adamw {normuon = true}
}

// -----

muon.model @m {
  // expected-error @+1 {{parameter 'w' num_heads 3 does not divide the rows (16) of the 16 x 8 matrix}}
  muon.param @w : tensor<16x8xf32> num_heads 3
}

// -----

muon.model @m {
  // expected-error @+1 {{parameter 'w' num_heads must be at least 1, got 0}}
  muon.param @w : tensor<16x8xf32> num_heads 0
}

// -----

muon.model @m {
  // expected-error @+1 {{parameter 'w' head_split_dim must be 0 (rows) or 1 (columns) of the matrix, got 2}}
  muon.param @w : tensor<16x8xf32> num_heads 2 head_split_dim 2
}

// -----

muon.model @m {
  // expected-error @+1 {{parameter 'b' per-head Newton-Schulz needs a Muon parameter of 2 or more dims}}
  muon.param @b : tensor<16x8xf32> num_heads 2 group adamw
}

// -----

// A matrix index names a head: 4 matrices (2 slices x 2 heads).
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @e : tensor<2x8x8xf32> on @mesh split [[], [], []] num_heads 2
  // expected-error @+1 {{assignment to rank 0 names matrix 'e[4]', but the parameter has 4 matrices}}
  muon.assign 0 [@e[4]]
}
