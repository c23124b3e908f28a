// RUN: muon-opt %s -split-input-file -muon-convert-process-groups-to-mesh | FileCheck %s

// FSDP x TP x DDP on 8 ranks (the spec-format example): ranks are row-major
// for the axis order ddp, tp, fsdp, so no device table is needed. TP is the
// major split when both split the same dim.
// CHECK-LABEL: muon.model @fsdp_tp_ddp {
// CHECK-NEXT:    shard.grid @mesh(shape = 2x2x2) {muon.axis_names = ["ddp", "tp", "fsdp"]}
// CHECK-NEXT:    muon.distributed
// CHECK-NEXT:    muon.param @w0 : tensor<1024x4096xf32> on @mesh split {{\[}}[1, 2], []]
// CHECK-NEXT:    muon.param @w1 : tensor<4096x1024xf32> on @mesh split {{\[}}[2], [1]]
// CHECK-NEXT:    muon.param @norm : tensor<4096xf32> on @mesh split {{\[}}[2]]
// CHECK-NEXT:  }
// CHECK-NOT:   muon.group
muon.model @fsdp_tp_ddp attributes {world_size = 8 : i64} {
  muon.group ddp [[0, 4], [1, 5], [2, 6], [3, 7]]
  muon.group fsdp [[0, 1], [2, 3], [4, 5], [6, 7]]
  muon.group tp [[0, 2], [1, 3], [4, 6], [5, 7]]
  muon.distributed
  muon.param @w0 : tensor<1024x4096xf32> tp_dim 0
  muon.param @w1 : tensor<4096x1024xf32> tp_dim 1
  muon.param @norm : tensor<4096xf32>
}

// -----

// Pipeline stages and experts become `only` coordinates; expert e of E lives
// at position floor(e * g / E) of its ep group.
// CHECK-LABEL: muon.model @pp_ep {
// CHECK-NEXT:    shard.grid @mesh(shape = 2x2) {muon.axis_names = ["pp", "ep"]}
// CHECK-NEXT:    muon.distributed
// CHECK-NEXT:    muon.param @attn : tensor<8x8xf32> on @mesh split {{\[}}[], []] only [0 = 1]
// CHECK-NEXT:    muon.param @e0 : tensor<8x8xf32> on @mesh split {{\[}}[], []] only [0 = 0, 1 = 0]
// CHECK-NEXT:    muon.param @e1 : tensor<8x8xf32> on @mesh split {{\[}}[], []] only [0 = 0, 1 = 0]
// CHECK-NEXT:    muon.param @e2 : tensor<8x8xf32> on @mesh split {{\[}}[], []] only [0 = 0, 1 = 1]
// CHECK-NEXT:    muon.param @e3 : tensor<8x8xf32> on @mesh split {{\[}}[], []] only [0 = 0, 1 = 1]
muon.model @pp_ep attributes {world_size = 4 : i64} {
  muon.group pp [[0, 2], [1, 3]]
  muon.group ep [[0, 1], [2, 3]]
  muon.distributed
  muon.param @attn : tensor<8x8xf32> stage 1
  muon.param @e0 : tensor<8x8xf32> stage 0 expert 0
  muon.param @e1 : tensor<8x8xf32> stage 0 expert 1
  muon.param @e2 : tensor<8x8xf32> stage 0 expert 2
  muon.param @e3 : tensor<8x8xf32> stage 0 expert 3
}

// -----

// Groups that form a grid in no row-major order keep a device table.
// CHECK-LABEL: muon.model @permuted {
// CHECK-NEXT:    shard.grid @mesh(shape = 2x2) {muon.axis_names = ["fsdp", "tp"], muon.devices = array<i64: 0, 1, 3, 2>}
muon.model @permuted attributes {world_size = 4 : i64} {
  muon.group fsdp [[0, 3], [1, 2]]
  muon.group tp [[0, 1], [3, 2]]
  muon.distributed
  muon.param @w : tensor<8x8xf32> tp_dim 1
}

// -----

// A model already on a mesh is left alone.
// CHECK-LABEL: muon.model @already {
// CHECK-NEXT:    shard.grid @mesh(shape = 2)
// CHECK-NEXT:    muon.param @w : tensor<8x8xf32> on @mesh split {{\[}}[], []]
muon.model @already {
  shard.grid @mesh(shape = 2)
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
}

// -----

// A 0-D parameter cannot be split: FSDP keeps a full copy on every rank.
// CHECK-LABEL: muon.model @scalar {
// CHECK:         muon.param @scale : tensor<f32> on @mesh split []
// CHECK-NEXT:    muon.param @w : tensor<8x8xf32> on @mesh split {{\[}}[0], []]
muon.model @scalar attributes {world_size = 2 : i64} {
  muon.group fsdp [[0, 1]]
  muon.distributed
  muon.param @scale : tensor<f32>
  muon.param @w : tensor<8x8xf32>
}
