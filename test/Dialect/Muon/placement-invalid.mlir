// muon.distributed's placement settings, each rule once.
// RUN: muon-opt %s -split-input-file -verify-diagnostics

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'placement' must be "auto", "once" or "redundant_below", got "sometimes"}}
  muon.distributed {placement = "sometimes"}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'redundant_below' (a size in elements) goes with placement "redundant_below" and only with it}}
  muon.distributed {placement = "redundant_below"}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'redundant_below' (a size in elements) goes with placement "redundant_below" and only with it}}
  muon.distributed {placement = "once", redundant_below = 16 : i64}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  // expected-error @+1 {{distributed 'redundant_below' must be >= 0, got -1}}
  muon.distributed {placement = "redundant_below", redundant_below = -1 : i64}
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
}

// -----

muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @w : tensor<8x8xf32> on @mesh split [[], []]
  // expected-error @+1 {{expected '['}}
  muon.assign 0 redundantly [@w]
}
