// RUN: muon-opt %s -muon-assign-owners -muon-print-owners -o /dev/null | FileCheck %s
// RUN: muon-opt %s -muon-assign-owners -muon-print-owners=wire-dtype=bf16 -o /dev/null | FileCheck %s --check-prefix=BF16
// RUN: not muon-opt %s -muon-print-owners=wire-dtype=fp8 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// FSDP over 2 ranks of two 64x64 matrices, and one replicated on both.
// NS flops of a 64x64 matrix: 5 * (4*64^3 + 2*64^3) = 7864320.
// Lower bound per FSDP matrix: 2*(k-1)/k * S = S = 64*64*4 bytes = 16384;
// replicated on 2 ranks: (h-1) * S = 16384. Total 3 * 16384 = 49152.
// CHECK:      model @m: 2 ranks, 3 Muon matrices, wire_dtype f32
// CHECK-NEXT: rank 0: ns_flops 15728640 owned 2 [a, c]
// CHECK-NEXT: rank 1: ns_flops 7864320 owned 1 [b]
// CHECK-NEXT: total.ns_flops 23592960
// CHECK-NEXT: busiest_rank.ns_flops 15728640
// CHECK-NEXT: lower_bound.makespan_flops 11796480
// CHECK-NEXT: lower_bound.bytes_received 49152
// BF16: lower_bound.bytes_received 24576
// BAD: unknown wire dtype 'fp8'; expected f32 or bf16
muon.model @m {
  shard.grid @mesh(shape = 2)
  muon.distributed
  muon.param @a : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @b : tensor<64x64xf32> on @mesh split [[0], []]
  muon.param @c : tensor<64x64xf32> on @mesh split [[], []]
}
