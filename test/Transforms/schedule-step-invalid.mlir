// RUN: muon-opt %s -muon-schedule-step -verify-diagnostics

// expected-error @+1 {{the step has no rounds; run muon-pack-rounds first}}
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
}
