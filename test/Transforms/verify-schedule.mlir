// RUN: muon-opt %s -split-input-file -muon-verify-schedule -verify-diagnostics

// A valid schedule passes and is left unchanged.
muon.model @ok {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 0 : i64}
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
    muon.apply_update round 0
    muon.adamw_update
  }
}

// -----

muon.model @ns_too_early {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    // expected-error @+1 {{NS of round 0 before its gather is done}}
    muon.newton_schulz round 0
    muon.exchange_done %0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
  }
}

// -----

muon.model @scatter_too_early {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    // expected-error @+1 {{scatter of round 0 starts before its NS}}
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.newton_schulz round 0
    muon.exchange_done %1
  }
}

// -----

// prefetch_count = 0 allows one exchange in flight.
muon.model @too_many_in_flight {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 0 : i64}
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.param @b : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
  muon.round 1 [@b]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    // expected-error @+1 {{2 exchanges in flight, limit 1}}
    %1 = muon.exchange_start gather round 1 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    muon.exchange_done %1
    muon.newton_schulz round 1
    %2 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %2
    %3 = muon.exchange_start scatter round 1 : !muon.token
    muon.exchange_done %3
  }
}

// -----

// Two gathered 64x64 f32 matrices (32 KiB) on rank 0 with a 20 KiB budget.
muon.model @over_budget {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 1 : i64, gather_budget_bytes = 20480 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
  muon.round 1 [@b]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    // expected-error @+1 {{rank 0 holds 32768 bytes of gathered matrices, budget 20480}}
    %1 = muon.exchange_start gather round 1 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    %2 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
    muon.newton_schulz round 1
    %3 = muon.exchange_start scatter round 1 : !muon.token
    muon.exchange_done %2
    muon.exchange_done %3
  }
}

// -----

muon.model @missing_scatter {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  // expected-error @+1 {{the scatter of round 0 is never started}}
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
  }
}

// -----

// The elementwise steps have rules too.
muon.model @apply_too_early {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    // expected-error @+1 {{update of round 0 before its scatter is done}}
    muon.apply_update round 0
    muon.exchange_done %1
    muon.adamw_update
  }
}

// -----

muon.model @momentum_too_late {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    // expected-error @+1 {{gather of round 0 starts before momentum}}
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.momentum
    muon.exchange_done %0
    muon.newton_schulz round 0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
    muon.apply_update round 0
    muon.adamw_update
  }
}

// -----

muon.model @adamw_before_reduce {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.param @bias : tensor<8xf32> on @mesh split [[]] partial [0]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %r = muon.exchange_start reduce round 0 : !muon.token
    // expected-error @+1 {{AdamW before its gradients are reduced}}
    muon.adamw_update
    muon.exchange_done %r
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
    muon.apply_update round 0
  }
}
