// RUN: muon-opt %s -split-input-file -muon-schedule-step | FileCheck %s

// prefetch_count = 1: two exchanges in flight; gather 1 overlaps NS 0,
// scatter 0 overlaps NS 1. Momentum comes first (the gathers carry its
// result), each round's update right after its scatter, AdamW last.
// CHECK-LABEL: muon.model @prefetch1
// CHECK:       muon.schedule {
// CHECK-NEXT:    muon.momentum
// CHECK-NEXT:    %[[G0:.*]] = muon.exchange_start gather round 0 : !muon.token
// CHECK-NEXT:    %[[G1:.*]] = muon.exchange_start gather round 1 : !muon.token
// CHECK-NEXT:    muon.exchange_done %[[G0]]
// CHECK-NEXT:    muon.newton_schulz round 0
// CHECK-NEXT:    %[[S0:.*]] = muon.exchange_start scatter round 0 : !muon.token
// CHECK-NEXT:    muon.exchange_done %[[G1]]
// CHECK-NEXT:    muon.newton_schulz round 1
// CHECK-NEXT:    %[[S1:.*]] = muon.exchange_start scatter round 1 : !muon.token
// CHECK-NEXT:    muon.exchange_done %[[S0]]
// CHECK-NEXT:    muon.apply_update round 0
// CHECK-NEXT:    muon.exchange_done %[[S1]]
// CHECK-NEXT:    muon.apply_update round 1
// CHECK-NEXT:    muon.adamw_update
// CHECK-NEXT:  }
muon.model @prefetch1 {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 1 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
  muon.round 1 [@b]
}

// -----

// prefetch_count = 0: nothing overlaps.
// CHECK-LABEL: muon.model @prefetch0
// CHECK:       muon.schedule {
// CHECK-NEXT:    muon.momentum
// CHECK-NEXT:    %[[G0:.*]] = muon.exchange_start gather round 0
// CHECK-NEXT:    muon.exchange_done %[[G0]]
// CHECK-NEXT:    muon.newton_schulz round 0
// CHECK-NEXT:    %[[S0:.*]] = muon.exchange_start scatter round 0
// CHECK-NEXT:    muon.exchange_done %[[S0]]
// CHECK-NEXT:    muon.apply_update round 0
// CHECK-NEXT:    %[[G1:.*]] = muon.exchange_start gather round 1
// CHECK-NEXT:    muon.exchange_done %[[G1]]
// CHECK-NEXT:    muon.newton_schulz round 1
// CHECK-NEXT:    %[[S1:.*]] = muon.exchange_start scatter round 1
// CHECK-NEXT:    muon.exchange_done %[[S1]]
// CHECK-NEXT:    muon.apply_update round 1
// CHECK-NEXT:    muon.adamw_update
// CHECK-NEXT:  }
muon.model @prefetch0 {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 0 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.assign 0 [@a, @b]
  muon.round 0 [@a]
  muon.round 1 [@b]
}

// -----

// An AdamW bias with a partial gradient: its reduction starts first, and
// AdamW runs as soon as it is done.
// CHECK-LABEL: muon.model @adamw_partial
// CHECK:       muon.schedule {
// CHECK-NEXT:    muon.momentum
// CHECK-NEXT:    %[[R:.*]] = muon.exchange_start reduce round 0 : !muon.token
// CHECK-NEXT:    %[[G0:.*]] = muon.exchange_start gather round 0
// CHECK-NEXT:    muon.exchange_done %[[G0]]
// CHECK-NEXT:    muon.newton_schulz round 0
// CHECK-NEXT:    %[[S0:.*]] = muon.exchange_start scatter round 0
// CHECK-NEXT:    muon.exchange_done %[[R]]
// CHECK-NEXT:    muon.adamw_update
// CHECK-NEXT:    muon.exchange_done %[[S0]]
// CHECK-NEXT:    muon.apply_update round 0
// CHECK-NEXT:  }
muon.model @adamw_partial {
  shard.grid @mesh(shape = 2)
  muon.distributed {prefetch_count = 1 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @bias : tensor<64xf32> on @mesh split [[]] partial [0]
  muon.assign 0 [@a]
  muon.round 0 [@a]
}

// -----

// Without a distributed config: momentum, NS, update, AdamW; nothing moves.
// CHECK-LABEL: muon.model @single
// CHECK:       muon.schedule {
// CHECK-NEXT:    muon.momentum
// CHECK-NEXT:    muon.newton_schulz round 0
// CHECK-NEXT:    muon.apply_update round 0
// CHECK-NEXT:    muon.adamw_update
// CHECK-NEXT:  }
muon.model @single {
  shard.grid @mesh(shape = 1)
  muon.param @a : tensor<8x8xf32> on @mesh split [[], []]
  muon.round 0 [@a]
}
