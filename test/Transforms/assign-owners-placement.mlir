// Newton-Schulz placed by cost (muon-assign-owners, muon/Plan/Placement.h).
// RUN: muon-opt %s -split-input-file -muon-assign-owners | FileCheck %s --check-prefix=NOMACHINE
// RUN: muon-opt %s -split-input-file -muon-assign-owners="ns-flops-per-second=6.9258e14 link-latency=5e-6 link-bytes-per-second=4.5e11 inter-node-latency=1e-5 inter-node-bytes-per-second=5e10 ranks-per-node=8" | FileCheck %s --check-prefix=H100
// A link of 20 GB/s: the 1024 x 1024 matrix, once on NVLink, turns
// redundant (under DDP redundant wins where T < S / beta + alpha: below 50
// GB/s for it, 11 GB/s for the 4096 x 4096).
// RUN: muon-opt %s -split-input-file -muon-assign-owners="ns-flops-per-second=6.9258e14 link-latency=5e-6 link-bytes-per-second=2e10 ranks-per-node=8" | FileCheck %s --check-prefix=SLOW

// DDP over 8 ranks, placement auto (the default). Without a machine, auto
// keeps one owner per matrix: today's assignment.
// NOMACHINE-LABEL: muon.model @ddp
// NOMACHINE-NOT:     redundant
// NOMACHINE:         muon.assign 0 [@big]
// NOMACHINE-NOT:     redundant
// On the h100 profile's numbers: the 64 x 64 matrix takes 11 ns of
// Newton-Schulz against 5 us per message: every holder runs it; the
// 4096 x 4096 takes 3 ms against 75 us to receive it: once. The 1024 x 1024
// (46 us against 10 us) stays once.
// H100-LABEL: muon.model @ddp
// H100:         muon.assign 0 [@big]
// H100-NEXT:    muon.assign 0 redundant [@tiny]
// H100-NEXT:    muon.assign 1 [@mid]
// H100-NEXT:  }
// SLOW-LABEL: muon.model @ddp
// SLOW:         muon.assign 0 [@big]
// SLOW-NEXT:    muon.assign 0 redundant [@tiny, @mid]
// SLOW-NEXT:  }
muon.model @ddp {
  shard.grid @mesh(shape = 8) {muon.axis_names = ["dp"]}
  muon.distributed {wire_dtype = #muon.wire_dtype<bf16>}
  muon.param @big : tensor<4096x4096xbf16> on @mesh split [[], []]
  muon.param @tiny : tensor<64x64xbf16> on @mesh split [[], []]
  muon.param @mid : tensor<1024x1024xbf16> on @mesh split [[], []]
}

// -----

// placement once: never redundant, whatever the machine.
// H100-LABEL: muon.model @once
// H100:         muon.assign 0 [@tiny]
// H100-NOT:     redundant
muon.model @once {
  shard.grid @mesh(shape = 8)
  muon.distributed {placement = "once"}
  muon.param @tiny : tensor<64x64xbf16> on @mesh split [[], []]
}

// -----

// redundant_below: by size, machine or not. FSDP's matrix has one replica
// and stays once; the redundant matrix loads both ranks, so LPT gives the
// sharded one to rank 1.
// H100-LABEL: muon.model @below
// NOMACHINE-LABEL: muon.model @below
// NOMACHINE:         muon.assign 0 [@big]
// NOMACHINE-NEXT:    muon.assign 0 redundant [@small]
// NOMACHINE-NEXT:    muon.assign 1 [@sharded]
muon.model @below {
  shard.grid @mesh(shape = 2)
  muon.distributed {placement = "redundant_below", redundant_below = 4096 : i64}
  muon.param @big : tensor<64x64xf32> on @mesh split [[], []]
  muon.param @small : tensor<32x32xf32> on @mesh split [[], []]
  muon.param @sharded : tensor<8x8xf32> on @mesh split [[0], []]
}

// -----

// HSDP (replicate 2 x shard 4): a redundant matrix's owner is picked in the
// first replica (ranks 0-3) by LPT, and its mirror in the second replica
// (rank + 4) owns it there.
// NOMACHINE-LABEL: muon.model @hsdp
// NOMACHINE:         muon.assign 0 redundant [@a]
// NOMACHINE-NEXT:    muon.assign 1 redundant [@b]
// NOMACHINE-NEXT:    muon.assign 2 redundant [@c]
muon.model @hsdp {
  shard.grid @mesh(shape = 2x4) {muon.axis_names = ["replicate", "shard"]}
  muon.distributed {placement = "redundant_below", redundant_below = 100000 : i64}
  muon.param @a : tensor<64x64xf32> on @mesh split [[1], []]
  muon.param @b : tensor<64x32xf32> on @mesh split [[1], []]
  muon.param @c : tensor<32x32xf32> on @mesh split [[1], []]
}
