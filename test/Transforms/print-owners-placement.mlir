// muon-print-owners with redundant matrices: each replica's owner lists
// the matrix, marked, and counts its flops; a placement line sums up.
// RUN: muon-opt %s -muon-assign-owners -muon-print-owners -o /dev/null | FileCheck %s

// HSDP, replicate 2 x shard 2. @a (64 x 64, 7864320 NS flops) once, on
// rank 0; @b (32 x 32, 983040) once per replica: rank 1 (LPT in the first
// replica, ranks 0 and 1) and its mirror rank 3.
// CHECK:      model @m: 4 ranks, 2 Muon matrices, wire_dtype f32
// CHECK-NEXT: rank 0: ns_flops 7864320 owned 1 [a]
// CHECK-NEXT: rank 1: ns_flops 983040 owned 1 [b (redundant)]
// CHECK-NEXT: rank 2: ns_flops 0 owned 0 []
// CHECK-NEXT: rank 3: ns_flops 983040 owned 1 [b (redundant)]
// CHECK-NEXT: placement: 1 once, 1 redundant (once per replica; their flops count on every replica's owner)
// CHECK-NEXT: total.ns_flops 8847360
muon.model @m {
  shard.grid @mesh(shape = 2x2) {muon.axis_names = ["replicate", "shard"]}
  muon.distributed {placement = "redundant_below", redundant_below = 4096 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[1], []]
  muon.param @b : tensor<32x32xf32> on @mesh split [[1], []]
}
