// Round trip of every op, in the custom form and through the generic form.
// RUN: muon-opt %s | FileCheck %s
// RUN: muon-opt %s | muon-opt | FileCheck %s
// RUN: muon-opt -mlir-print-op-generic %s | muon-opt | FileCheck %s

// CHECK-LABEL: muon.model @dtensor
muon.model @dtensor {
  // CHECK: shard.grid @mesh(shape = 2x2x2) {muon.axis_names = ["pp", "dp", "tp"]}
  shard.grid @mesh(shape = 2x2x2) {muon.axis_names = ["pp", "dp", "tp"]}
  // CHECK: muon.optimizer {adjust_lr = #muon.adjust_lr<match_rms_adamw>, lr = 2.000000e-02 : f64, ns_coefficients = [array<f64: 3.444500e+00, -4.775000e+00, 2.031500e+00>], ns_dtype = #muon.ns_dtype<bf16>, ns_steps = 1 : i64}
  muon.optimizer {lr = 2.0e-02 : f64, ns_steps = 1 : i64, adjust_lr = #muon.adjust_lr<match_rms_adamw>,
                  ns_coefficients = [array<f64: 3.4445, -4.775, 2.0315>], ns_dtype = #muon.ns_dtype<bf16>}
  // CHECK: muon.adamw {betas = array<f64: 9.000000e-01, 0.94999999999999996>, lr = 5.000000e-04 : f64}
  muon.adamw {lr = 5.0e-04 : f64, betas = array<f64: 0.9, 0.95>}
  // The scale and weight-decay modes (a group of its own).
  // CHECK: muon.optimizer {adjust_lr = #muon.adjust_lr<spectral>, group_name = "cautious", ns_coefficients = [array<f64: 3.444500e+00, -4.775000e+00, 2.031500e+00>], ns_dtype = #muon.ns_dtype<bf16>, ns_steps = 1 : i64, weight_decay_mode = #muon.weight_decay_mode<cautious>}
  muon.optimizer {group_name = "cautious", ns_steps = 1 : i64, adjust_lr = #muon.adjust_lr<spectral>,
                  weight_decay_mode = #muon.weight_decay_mode<cautious>,
                  ns_coefficients = [array<f64: 3.4445, -4.775, 2.0315>], ns_dtype = #muon.ns_dtype<bf16>}
  // NorMuon (a group of its own).
  // CHECK: muon.optimizer {group_name = "normuon", normuon = true, normuon_beta2 = 9.000000e-01 : f64, ns_coefficients = [array<f64: 3.444500e+00, -4.775000e+00, 2.031500e+00>], ns_dtype = #muon.ns_dtype<bf16>, ns_steps = 1 : i64}
  muon.optimizer {group_name = "normuon", ns_steps = 1 : i64, normuon = true, normuon_beta2 = 0.9 : f64,
                  ns_coefficients = [array<f64: 3.4445, -4.775, 2.0315>], ns_dtype = #muon.ns_dtype<bf16>}
  // CHECK: muon.distributed {async = false, prefetch_count = 2 : i64, wire_dtype = #muon.wire_dtype<bf16>}
  muon.distributed {prefetch_count = 2 : i64, async = false, wire_dtype = #muon.wire_dtype<bf16>}
  // TP major, then FSDP, on dim 0 (the strided TP-then-FSDP layout).
  // CHECK: muon.param @wq : tensor<64x32xf32> on @mesh split {{\[}}[2, 1], []] only [0 = 0]
  muon.param @wq : tensor<64x32xf32> on @mesh split [[2, 1], []] only [0 = 0]
  // CHECK: muon.param @experts : tensor<4x16x8xbf16> on @mesh split {{\[}}[1], [], [2]] only [0 = 1]
  muon.param @experts : tensor<4x16x8xbf16> on @mesh split [[1], [], [2]] only [0 = 1]
  // CHECK: muon.param @norm.weight : tensor<32xf16> on @mesh split {{\[}}[]] partial [2]
  muon.param @"norm.weight" : tensor<32xf16> on @mesh split [[]] partial [2]
  // CHECK: muon.param @head : tensor<8x8xf32> on @mesh split {{\[}}[], []] group adamw
  muon.param @head : tensor<8x8xf32> on @mesh split [[], []] group adamw
  // CHECK: muon.assign 0 [@wq]
  muon.assign 0 [@wq]
  // CHECK: muon.assign 4 [@experts[0], @experts[1]]
  muon.assign 4 [@experts[0], @experts[1]]
  // CHECK: muon.assign 6 [@experts[2], @experts[3]]
  muon.assign 6 [@experts[2], @experts[3]]
}

// CHECK-LABEL: muon.model @groups attributes {fsdp_dim = 1 : i64, num_experts = 4 : i64, world_size = 8 : i64}
muon.model @groups attributes {world_size = 8 : i64, fsdp_dim = 1 : i64, num_experts = 4 : i64} {
  // CHECK: muon.group pp {{\[}}[0, 4], [1, 5], [2, 6], [3, 7]]
  muon.group pp [[0, 4], [1, 5], [2, 6], [3, 7]]
  // CHECK: muon.group ep {{\[}}[0, 2], [1, 3], [4, 6], [5, 7]]
  muon.group ep [[0, 2], [1, 3], [4, 6], [5, 7]]
  // CHECK: muon.group fsdp {{\[}}[0, 1], [2, 3], [4, 5], [6, 7]]
  muon.group fsdp [[0, 1], [2, 3], [4, 5], [6, 7]]
  muon.distributed
  // CHECK: muon.param @w0 : tensor<16x16xf32> stage 1
  muon.param @w0 : tensor<16x16xf32> stage 1
  // CHECK: muon.param @e3 : tensor<16x16xf32> stage 0 expert 3
  muon.param @e3 : tensor<16x16xf32> stage 0 expert 3
}

// A model with nothing distributed needs no distributed config.
// CHECK-LABEL: muon.model @single
muon.model @single {
  shard.grid @mesh(shape = 1)
  // CHECK: muon.param @w : tensor<4x4xf32> on @mesh split {{\[}}[], []]
  muon.param @w : tensor<4x4xf32> on @mesh split [[], []]
}

// The step's IR: rounds and a schedule with tokens.
// CHECK-LABEL: muon.model @step
// CHECK:         muon.round 0 [@a]
// CHECK:         muon.schedule {
// CHECK-NEXT:      muon.momentum
// CHECK-NEXT:      %[[R:.*]] = muon.exchange_start reduce round 0 : !muon.token
// CHECK-NEXT:      %[[T:.*]] = muon.exchange_start gather round 0 : !muon.token
// CHECK-NEXT:      muon.exchange_done %[[T]]
// CHECK-NEXT:      muon.newton_schulz round 0
// CHECK:           muon.apply_update round 0
// CHECK-NEXT:      muon.exchange_done %[[R]]
// CHECK-NEXT:      muon.adamw_update
muon.model @step {
  shard.grid @mesh(shape = 2)
  muon.distributed {wire_dtype = #muon.wire_dtype<bf16>, gather_budget_bytes = 1024 : i64, max_rounds = 4 : i64}
  muon.param @a : tensor<8x8xf32> on @mesh split [[0], []]
  muon.assign 0 [@a]
  muon.round 0 [@a]
  muon.schedule {
    muon.momentum
    %r = muon.exchange_start reduce round 0 : !muon.token
    %0 = muon.exchange_start gather round 0 : !muon.token
    muon.exchange_done %0
    muon.newton_schulz round 0
    %1 = muon.exchange_start scatter round 0 : !muon.token
    muon.exchange_done %1
    muon.apply_update round 0
    muon.exchange_done %r
    muon.adamw_update
  }
}
