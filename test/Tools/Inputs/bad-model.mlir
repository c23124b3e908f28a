muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.param @w : tensor<8x8xf32> on @mesh split [[0], []]
}
