muon.model @model {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<4294967296x4294967296xf32> on @mesh split [[0], []]
}
