// Newton-Schulz placement in the IR: `muon.assign N redundant [...]` (once
// per replica) and muon.distributed's `placement`, in the custom form and
// through the generic form.
// RUN: muon-opt %s | FileCheck %s
// RUN: muon-opt %s | muon-opt | FileCheck %s
// RUN: muon-opt -mlir-print-op-generic %s | muon-opt | FileCheck %s
// RUN: muon-opt -mlir-print-op-generic %s | FileCheck %s --check-prefix=GENERIC

// CHECK-LABEL: muon.model @ddp
// CHECK:         muon.distributed {placement = "redundant_below", redundant_below = 4096 : i64}
// CHECK:         muon.assign 0 redundant [@small, @experts[1]]
// CHECK-NEXT:    muon.assign 1 [@big]
// CHECK-NEXT:    muon.assign 0 [@experts[0]]
// GENERIC: "muon.assign"() <{params = [@small, @experts], rank = 0 : i64, redundant, slices = array<i64: -1, 1>}>
// GENERIC: "muon.assign"() <{params = [@big], rank = 1 : i64, slices = array<i64: -1>}>
muon.model @ddp {
  shard.grid @mesh(shape = 2)
  muon.distributed {placement = "redundant_below", redundant_below = 4096 : i64}
  muon.param @small : tensor<16x16xf32> on @mesh split [[], []]
  muon.param @big : tensor<128x128xf32> on @mesh split [[], []]
  muon.param @experts : tensor<2x16x16xf32> on @mesh split [[], [], []]
  muon.assign 0 redundant [@small, @experts[1]]
  muon.assign 1 [@big]
  muon.assign 0 [@experts[0]]
}

// CHECK-LABEL: muon.model @auto
// CHECK:         muon.distributed {placement = "once"}
muon.model @auto {
  shard.grid @mesh(shape = 2)
  muon.distributed {placement = "once"}
  muon.param @w : tensor<16x16xf32> on @mesh split [[], []]
}
