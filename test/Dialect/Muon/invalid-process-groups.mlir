// Verifier rules of the process-group style, one case each.
// RUN: muon-opt %s -split-input-file -verify-diagnostics

muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{'fsdp' groups are not a partition of the world: rank 1 is in group 0 and group 1}}
  muon.group fsdp [[0, 1], [1, 2]]
}

// -----

muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{'ddp' group 1 lists rank 2 twice}}
  muon.group ddp [[0, 1], [2, 2]]
}

// -----

muon.model @m attributes {world_size = 6 : i64} {
  // expected-error @+1 {{'ddp' groups are not a partition of the world: rank 4 is in no group}}
  muon.group ddp [[0, 1], [2, 3]]
}

// -----

muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{'tp' group 1 [3] has 1 rank but group 0 has 3; the groups of a kind must have equal size}}
  muon.group tp [[0, 1, 2], [3]]
}

// -----

muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{'tp' group 0 names rank 7, outside the world of 4 ranks}}
  muon.group tp [[0, 7], [1, 2]]
}

// -----

// tp groups cut across fsdp positions: not a grid.
muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{process groups 'tp' and 'fsdp' are not orthogonal: tp group 0 [0, 3] holds ranks 0 and 3, which sit at different positions (0 and 1) of fsdp groups [0, 1] and [2, 3]}}
  muon.group fsdp [[0, 1], [2, 3]]
  muon.group tp [[0, 3], [1, 2]]
}

// -----

// The same grouping under two kinds does not factor the world.
muon.model @m attributes {world_size = 4 : i64} {
  // expected-error @+1 {{process groups 'fsdp' and 'ddp' are not orthogonal: both put ranks 0 and 1 in one group}}
  muon.group fsdp [[0, 1], [2, 3]]
  muon.group ddp [[0, 1], [2, 3]]
}

// -----

muon.model @m attributes {world_size = 8 : i64} {
  // expected-error @+1 {{process groups do not factor the world into a grid: group sizes fsdp=2 tp=2 multiply to 4, not world_size 8}}
  muon.group fsdp [[0, 1], [2, 3], [4, 5], [6, 7]]
  muon.group tp [[0, 2], [1, 3], [4, 6], [5, 7]]
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group fsdp [[0, 1]]
  // expected-error @+1 {{process groups 'fsdp' and 'shard' are the same kind; give only one}}
  muon.group shard [[0, 1]]
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  // expected-error @+1 {{unknown process-group kind 'zero'; expected one of fsdp, shard, tp, ddp, replicate, cp, ep, pp}}
  muon.group zero [[0, 1]]
}

// -----

// expected-error @+1 {{process groups need the model's 'world_size'}}
muon.model @m {
  muon.group ddp [[0, 1]]
}

// -----

muon.model @m attributes {world_size = 4 : i64} {
  muon.group pp [[0, 1], [2, 3]]
  muon.group ddp [[0, 2], [1, 3]]
  // expected-error @+1 {{stage 2 of parameter 'w' is out of range: pp groups have 2 ranks (stages 0..1)}}
  muon.param @w : tensor<8x8xf32> stage 2
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group pp [[0, 1]]
  // expected-error @+1 {{parameter 'w' has no stage, but the model has pp process groups}}
  muon.param @w : tensor<8x8xf32>
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group ddp [[0, 1]]
  // expected-error @+1 {{parameter 'w' has a stage but there is no pp process group}}
  muon.param @w : tensor<8x8xf32> stage 0
}

// -----

muon.model @m attributes {world_size = 2 : i64, num_experts = 4 : i64} {
  muon.group ep [[0, 1]]
  // expected-error @+1 {{expert 4 of parameter 'e' is out of range: num_experts is 4}}
  muon.param @e : tensor<8x8xf32> expert 4
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group ddp [[0, 1]]
  // expected-error @+1 {{parameter 'e' has an expert id but there is no ep process group}}
  muon.param @e : tensor<8x8xf32> expert 0
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group ddp [[0, 1]]
  // expected-error @+1 {{parameter 'w' has tp_dim but there is no tp process group}}
  muon.param @w : tensor<8x8xf32> tp_dim 0
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  muon.group tp [[0, 1]]
  muon.distributed
  // expected-error @+1 {{parameter 'w' has tp_dim 3, out of range for a tensor of 2 dim(s)}}
  muon.param @w : tensor<8x8xf32> tp_dim 3
}

// -----

muon.model @m attributes {world_size = 2 : i64, fsdp_dim = 1 : i64} {
  muon.group fsdp [[0, 1]]
  muon.distributed
  // expected-error @+1 {{fsdp_dim 1 is out of range for parameter 'b' of 1 dim(s)}}
  muon.param @b : tensor<8xf32>
}

// -----

// FSDP without a distributed config.
muon.model @m attributes {world_size = 2 : i64} {
  muon.group fsdp [[0, 1]]
  // expected-error @+1 {{parameter 'w' is sharded (dim 0 split on mesh axis 'fsdp') but there is no distributed config}}
  muon.param @w : tensor<8x8xf32>
}

// -----

muon.model @m attributes {world_size = 2 : i64} {
  // expected-error @+1 {{a model uses either a grid (DTensor style) or process groups, not both}}
  shard.grid @mesh(shape = 2)
  muon.group ddp [[0, 1]]
}

// -----

// expected-error @+1 {{'world_size' is only meaningful with process groups}}
muon.model @m attributes {world_size = 2 : i64} {
  shard.grid @mesh(shape = 2)
}
