//===- Passes.td - muon conversion passes -----------------*- tablegen -*-===//
#ifndef MUON_CONVERSION_PASSES
#define MUON_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def ConvertProcessGroupsToMesh
    : Pass<"muon-convert-process-groups-to-mesh", "::mlir::muon::ModelOp"> {
  let summary = "Turn the process-group style into placements on a mesh";
  let description = [{
    Replaces the `muon.group` ops of a model by one `shard.grid` whose axes
    are the group kinds (a rank's coordinate on an axis is its position in its
    group of that kind), and gives every parameter its layout on that grid:
    FSDP/shard split `fsdp_dim`, TP splits `tp_dim` as the major split, DDP,
    replicate and CP replicate, PP restricts to the parameter's stage, EP to
    the position of the parameter's expert. Orthogonality, partition and
    range checks run in the model verifier before this pass, so it never
    sees invalid groups. Models already on a grid are left unchanged.

    Before:
    ```mlir
    muon.model @m attributes {world_size = 4 : i64} {
      muon.group fsdp [[0, 1], [2, 3]]
      muon.group tp [[0, 2], [1, 3]]
      muon.distributed
      muon.param @w0 : tensor<1024x4096xf32> tp_dim 0
    }
    ```
    After:
    ```mlir
    muon.model @m {
      shard.grid @mesh(shape = 2x2) {muon.axis_names = ["tp", "fsdp"]}
      muon.distributed
      muon.param @w0 : tensor<1024x4096xf32> on @mesh split [[0, 1], []]
    }
    ```
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

#endif // MUON_CONVERSION_PASSES
