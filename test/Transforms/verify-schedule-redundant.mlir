// muon-verify-schedule: a redundant matrix needs a replica with its whole
// gradient. Ranks that lack it (a shard, or a partial summand) of a
// parameter that is not replicated are an error naming the rank and what it
// holds; replicated parameters (DDP, HSDP per replica) pass.
// RUN: muon-opt %s -split-input-file -muon-pack-rounds -muon-schedule-step -muon-verify-schedule -verify-diagnostics | FileCheck %s

// CHECK-LABEL: muon.model @ddp
// CHECK: muon.assign 0 redundant [@w]
muon.model @ddp {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
  muon.assign 0 redundant [@w]
}

// -----

// CHECK-LABEL: muon.model @hsdp
// CHECK: muon.assign 1 redundant [@w]
muon.model @hsdp {
  shard.grid @mesh(shape = 2x2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[1], []]
  muon.assign 1 redundant [@w]
}

// -----

muon.model @fsdp {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[0], []]
  // expected-error @+1 {{redundant matrix @w: rank 0 lacks its whole gradient (it holds rows [0, 4) and columns [0, 8) of 8 x 8), and the parameter is not replicated on any mesh axis, so there is no replica that has it whole; assign it without 'redundant'}}
  muon.assign 0 redundant [@w]
}

// -----

muon.model @partial {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] partial [0]
  // expected-error @+1 {{redundant matrix @w: rank 0 lacks its whole gradient (it holds partial summand 0 of the gradient), and the parameter is not replicated on any mesh axis}}
  muon.assign 0 redundant [@w]
}

// -----

muon.model @alone {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []] only [0 = 1]
  // expected-error @+1 {{redundant matrix @w has a single holder: there is nothing to orthogonalize redundantly; assign it without 'redundant'}}
  muon.assign 1 redundant [@w]
}
