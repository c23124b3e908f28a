module {
  muon.model @model {
    shard.grid @mesh(shape = 2x4) {muon.axis_names = ["replicate", "shard"]}
    muon.optimizer {lr = 2.000000e-02 : f64, momentum = 9.0000001e-0 : f64}
    muon.distributed
    muon.param @w0 : tensor<96x64xf32> on @mesh split [[1], []]
    muon.param @w1 : tensor<64x96xf32> on @mesh split [[1], []]
    muon.param @w2 : tensor<10x48xf32> on @mesh split [[1], []]
    muon.param @w3 : tensor<6x20xf32> on @mesh split [[1], []]
    muon.param @experts : tensor<2x24x16xf32> on @mesh split [[], [1], []]
    muon.param @bias : tensor<96xf32> on @mesh split [[1]]
  }
}

