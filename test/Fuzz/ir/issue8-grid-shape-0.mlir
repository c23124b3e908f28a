muon.model @model {
  shard.grid @mesh(shape = 0)
  muon.distributed
  muon.param @w : tensor<4x4xf32> on @mesh split [[0], []]
}
