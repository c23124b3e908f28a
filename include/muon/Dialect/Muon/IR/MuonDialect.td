//===- MuonDialect.td - The muon dialect ------------------*- tablegen -*-===//
#ifndef MUON_DIALECT_TD
#define MUON_DIALECT_TD

include "mlir/IR/OpBase.td"

def Muon_Dialect : Dialect {
  let name = "muon";
  let cppNamespace = "::mlir::muon";
  let summary = "Distributed Muon: meshes, parameter shardings, optimizer steps";
  let description = [{
    The `muon` dialect describes a model's parameters as they are laid out by
    a distributed-training framework, and the Muon optimizer step applied to
    them. A `muon.model` holds a device mesh (upstream `shard.grid`, with axis
    names attached as `muon.axis_names`) or, in the process-group style, one
    `muon.group` per parallelism kind; one `muon.param` per parameter; and the
    optimizer, AdamW and distributed configurations.

    Layouts use the split-axes model of the upstream `shard` dialect: for
    every tensor dim, the mesh axes that split it from major to minor
    (torch.chunk semantics, uneven and empty chunks allowed), plus the axes on
    which the gradient is a pending partial sum, plus an optional `only`
    sub-mesh (pipeline stage, expert) outside of which the parameter does not
    exist.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
  let hasOperationAttrVerify = 1;
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Discardable attributes this dialect attaches to `shard.grid`.
    static constexpr ::llvm::StringLiteral kAxisNamesAttr = "muon.axis_names";
    static constexpr ::llvm::StringLiteral kDevicesAttr = "muon.devices";
  }];
}

class Muon_Op<string mnemonic, list<Trait> traits = []>
    : Op<Muon_Dialect, mnemonic, traits>;

#endif // MUON_DIALECT_TD
