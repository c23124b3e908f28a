// RUN: muon-opt %s -muon-assign-owners -verify-diagnostics

// expected-error @+1 {{owners are assigned on a mesh; run muon-convert-process-groups-to-mesh first}}
muon.model @m attributes {world_size = 2 : i64} {
  muon.group ddp [[0, 1]]
  muon.distributed
  muon.param @a : tensor<8x8xf32>
}
