//===- MuonOps.td - muon dialect operations ---------------*- tablegen -*-===//
#ifndef MUON_OPS_TD
#define MUON_OPS_TD

include "muon/Dialect/Muon/IR/MuonDialect.td"
include "muon/Dialect/Muon/IR/MuonEnums.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/AttrTypeBase.td"

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Muon_TokenType : TypeDef<Muon_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "An exchange in flight, from its start to its done";
}

//===----------------------------------------------------------------------===//
// muon.model
//===----------------------------------------------------------------------===//

def Muon_ModelOp : Muon_Op<"model", [
    Symbol, SymbolTable, IsolatedFromAbove, SingleBlock, NoTerminator]> {
  let summary = "A model: its mesh or process groups, parameters and optimizer";
  let description = [{
    The unit the compiler works on. Its body holds either one `shard.grid`
    (DTensor style) or `muon.group` ops (process-group style, converted into
    a grid by `muon-convert-process-groups-to-mesh`), then `muon.param`,
    `muon.optimizer`, `muon.adamw`, `muon.distributed` and `muon.assign` ops.

    The region verifier checks everything that spans several ops: the style is
    consistent, groups partition the world and are orthogonal, stage and expert
    ids are in range, nothing is sharded or partial without a distributed
    config, and explicit assignments cover every Muon matrix exactly once with
    a rank that holds it.

    Process-group style attributes: `world_size` (required there), `fsdp_dim`
    (the dim FSDP splits, default 0), `num_experts` (default: largest expert
    id + 1).

    ```mlir
    muon.model @gpt {
      shard.grid @mesh(shape = 2x4) {muon.axis_names = ["dp", "tp"]}
      muon.distributed {prefetch_count = 1 : i64}
      muon.param @wq : tensor<4096x4096xf32> on @mesh split [[0], [1]]
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<I64Attr>:$world_size,
                       OptionalAttr<I64Attr>:$fsdp_dim,
                       OptionalAttr<I64Attr>:$num_experts);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name)>];
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// True when the model is described with process groups.
    bool usesProcessGroups();
  }];
}

//===----------------------------------------------------------------------===//
// muon.param
//===----------------------------------------------------------------------===//

def Muon_ParamOp : Muon_Op<"param", [
    Symbol, HasParent<"ModelOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "One model parameter and how it is laid out";
  let description = [{
    Declares a parameter by name with its global shape and storage type, and
    its layout: `on @grid split [[axes of dim 0], [axes of dim 1], ...]`
    (major to minor), `partial [axes]` (pending sums), `only [axis = coord]`
    (sub-mesh). Leading dims of tensors with more than two dims are batch dims
    of independent matrices. `group` names the parameter's algorithm, one of
    the registry's (muon/Plan/Algorithm.h): `muon` (default for 2-D and
    more), `adamw` (default for 0-D and 1-D) or another element-wise one
    (`lion`). `param_group "name"` puts the parameter in the group op
    (`muon.optimizer`, `muon.adamw` or `muon.param_group`) of that name (its
    algorithm must be the parameter's); without it the parameter is in the
    first group of its algorithm.

    In the process-group style a parameter has no `on` clause; instead
    `tp_dim`, `stage` and `expert` say what the groups do with it.

    `num_heads N` (per-head Newton-Schulz, either style) cuts dim
    `head_split_dim` (0: rows, the default; 1: columns) of every trailing
    matrix into N equal blocks, each a Muon matrix of its own: `@p[i]` is
    head `i % N` of batch slice `i / N`.

    ```mlir
    // TP splits dim 0 first (major), then FSDP splits each TP chunk.
    muon.param @wq : tensor<8192x8192xbf16> on @mesh split [[1, 0], []]
    muon.param @moe : tensor<64x2048x7168xf32> on @mesh split [[0], [], []]
    muon.param @bias : tensor<512xf32> on @mesh split [[]] partial [1]
    muon.param @head : tensor<4x4xf32> on @mesh split [[], []] only [0 = 3] group adamw
    muon.param @wte : tensor<96x32xf32> on @mesh split [[0], []] group adamw param_group "embeddings"
    muon.param @w0 : tensor<1024x4096xf32> tp_dim 0 stage 1
    muon.param @wqkv : tensor<96x32xf32> on @mesh split [[0], []] num_heads 12
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyRankedTensor>:$tensor_type,
                       OptionalAttr<FlatSymbolRefAttr>:$grid,
                       OptionalAttr<ArrayAttr>:$split_axes,
                       OptionalAttr<DenseI64ArrayAttr>:$partial_axes,
                       OptionalAttr<DenseI64ArrayAttr>:$only,
                       OptionalAttr<StrAttr>:$group,
                       OptionalAttr<StrAttr>:$param_group,
                       OptionalAttr<I64Attr>:$tp_dim,
                       OptionalAttr<I64Attr>:$stage,
                       OptionalAttr<I64Attr>:$expert,
                       OptionalAttr<I64Attr>:$num_heads,
                       OptionalAttr<I64Attr>:$head_split_dim);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The algorithm `group` names (the verifier checks that the registry
    /// has it), else the default for the tensor's rank: Muon for 2 or more
    /// dims, AdamW below.
    ::muon::AlgorithmId getAlgorithm();
    /// Whether the algorithm orthogonalizes the parameter's matrices (Muon).
    bool isOrthogonalized();
    /// The split axes of every dim (empty entries where none), the partial
    /// axes and the `only` pairs, as plain vectors.
    std::vector<std::vector<int64_t>> getSplitAxesVector();
    std::vector<std::pair<int64_t, int64_t>> getOnlyPairs();
  }];
}

//===----------------------------------------------------------------------===//
// Configuration ops
//===----------------------------------------------------------------------===//

def Muon_OptimizerOp : Muon_Op<"optimizer", [HasParent<"ModelOp">]> {
  let summary = "A Muon parameter group (defaults of torch.optim.Muon)";
  let description = [{
    One Muon group of the model (as one of torch.optim's param_groups), named
    `name` (default "muon"); a model may have several, with unique names
    across its `muon.optimizer` and `muon.adamw` ops. `lr`, `weight_decay`,
    `momentum`, `nesterov` and `adjust_lr` are the group's starting values,
    which a trainer may change between steps. The Newton-Schulz settings
    (`ns_steps`, `ns_coefficients`, `eps`) are fixed by the plan: they decide
    the group's flops and its matrices' NS batches (batches never mix
    groups of different settings), and groups may differ in them, as
    torch.optim.Muon's. `ns_dtype` is the plan's one precision, so every
    Muon group of a model must agree on it.

    `ns_coefficients` holds one (a, b, c) triple used for every Newton-Schulz
    step, or one triple per step (e.g. a Polar Express schedule).
    `adjust_lr` is `original` (lr * sqrt(max(1, rows/cols))),
    `match_rms_adamw` (lr * 0.2 * sqrt(max(rows, cols))), `spectral`
    (lr * sqrt(max(rows, cols))), `unit_rms_norm` or `spectral_unclamped`
    (both lr * sqrt(rows/cols)). `weight_decay_mode` is `decoupled`
    (param * (1 - lr * weight_decay) everywhere), `cautious` (only where the
    update and the parameter agree in sign, arXiv 2510.12402) or `none`.
    `ns_dtype` is the
    element type Newton-Schulz runs in: `f32`, `bf16` (torch.optim.Muon's
    choice), `f16` (normalized in f32, then f16 products with f32
    accumulation; coefficients whose products could pass 65504 are
    refused) or `auto` (the running device's default).

    The settings added since (`normuon`, `normuon_beta2`, ...) are not
    declared here: each row of the settings table
    (muon/Plan/GroupSettings.h) that the op does not declare is an
    attribute of the row's name (f64, bool or string), verified and read by
    the table (GroupSettingAttrs.h), so a new setting changes no op. An
    attribute that is neither declared nor in the table is refused.
    `normuon` makes the group NorMuon (arXiv 2510.05491): after
    Newton-Schulz each row of the orthogonalized matrix is divided by
    sqrt(v) + 1e-8, v an EMA (weight `normuon_beta2`, in [0, 1)) of the
    row's mean square, kept on the matrix's owner, and the matrix is
    rescaled to its Newton-Schulz norm.

    ```mlir
    muon.optimizer {lr = 2.0e-02 : f64, ns_steps = 5 : i64,
                    ns_coefficients = [array<f64: 3.4445, -4.775, 2.0315>]}
    muon.optimizer {group_name = "attention", lr = 1.0e-02 : f64}
    muon.optimizer {group_name = "rows", normuon = true,
                    normuon_beta2 = 9.0e-01 : f64}
    ```
  }];
  let arguments = (ins
    OptionalAttr<StrAttr>:$group_name,
    DefaultValuedAttr<F64Attr, "1e-3">:$lr,
    DefaultValuedAttr<F64Attr, "0.1">:$weight_decay,
    DefaultValuedAttr<F64Attr, "0.95">:$momentum,
    DefaultValuedAttr<BoolAttr, "true">:$nesterov,
    DefaultValuedAttr<I64Attr, "5">:$ns_steps,
    OptionalAttr<ArrayAttr>:$ns_coefficients,
    DefaultValuedAttr<F64Attr, "1e-7">:$eps,
    DefaultValuedAttr<Muon_AdjustLrAttr,
                      "::mlir::muon::AdjustLr::Original">:$adjust_lr,
    DefaultValuedAttr<Muon_NsDtypeAttr,
                      "::mlir::muon::NsDtype::Auto">:$ns_dtype,
    DefaultValuedAttr<Muon_WeightDecayModeAttr,
                      "::mlir::muon::WeightDecayMode::Decoupled">:$weight_decay_mode);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The (a, b, c) coefficients of Newton-Schulz step `step`.
    std::array<double, 3> getCoefficients(int64_t step);
    /// `group_name`, or "muon".
    ::llvm::StringRef groupName();
  }];
}

def Muon_AdamWOp : Muon_Op<"adamw", [HasParent<"ModelOp">]> {
  let summary = "An AdamW parameter group (embeddings, heads, norms, biases)";
  let description = [{
    One AdamW group, named `group_name` (default "adamw"); a model may have
    several. The values are the group's starting hyper-parameters.

    ```mlir
    muon.adamw {group_name = "embeddings", lr = 3.0e-03 : f64, weight_decay = 0.0 : f64}
    ```
  }];
  let arguments = (ins
    OptionalAttr<StrAttr>:$group_name,
    DefaultValuedAttr<F64Attr, "1e-3">:$lr,
    OptionalAttr<DenseF64ArrayAttr>:$betas,
    DefaultValuedAttr<F64Attr, "1e-8">:$eps,
    DefaultValuedAttr<F64Attr, "0.01">:$weight_decay);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// `group_name`, or "adamw".
    ::llvm::StringRef groupName();
  }];
}

def Muon_ParamGroupOp : Muon_Op<"param_group", [HasParent<"ModelOp">]> {
  let summary = "A parameter group of an element-wise algorithm (Lion, ...)";
  let description = [{
    One group of a registered algorithm (muon/Plan/Algorithm.h) that has
    no op of its own: every algorithm but Muon (`muon.optimizer`) and AdamW
    (`muon.adamw`), which keep theirs. `algorithm` names it; `group_name`
    defaults to the algorithm's name. Its settings are attributes named
    after the settings table's rows (muon/Plan/GroupSettings.h: "lr",
    "beta1", ...; f64, bool or string), verified and read by the table
    (GroupSettingAttrs.h), so that an algorithm added to the registry needs
    no op of its own; a setting left out keeps its default.

    ```mlir
    muon.param_group {algorithm = "lion", group_name = "norms",
                      lr = 1.0e-04 : f64, beta2 = 9.8e-01 : f64}
    ```
  }];
  let arguments = (ins StrAttr:$algorithm, OptionalAttr<StrAttr>:$group_name);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// `group_name`, or the algorithm's name.
    ::llvm::StringRef groupName();
  }];
}

def Muon_DistributedOp : Muon_Op<"distributed", [HasParent<"ModelOp">]> {
  let summary = "Distributed options; absent means no distributed config";
  let description = [{
    `prefetch_count` caps the exchanges in flight; `async = false` is the
    sequential debug mode (owners one rank after another). Explicit owners are
    given by `muon.assign` ops next to it. `gather_budget_bytes` (0: no
    limit) caps the bytes of gathered matrices a rank holds at once, and
    `max_rounds` the rounds the exchanges are split into when no budget
    forces more; `wire_dtype` (f32 or bf16) is what the exchanges carry.
    These three are compiler settings, not in the spec.

    `placement` says where Newton-Schulz runs for a matrix whose whole
    gradient several ranks have (replicas): "auto" (by predicted time, on
    the machine muon-assign-owners is given; once without one), "once"
    (one owner), or "redundant_below" (once per replica for matrices of
    fewer than `redundant_below` elements). Absent means "auto".
  }];
  let arguments = (ins
    DefaultValuedAttr<I64Attr, "1">:$prefetch_count,
    DefaultValuedAttr<BoolAttr, "true">:$async,
    DefaultValuedAttr<I64Attr, "0">:$gather_budget_bytes,
    DefaultValuedAttr<I64Attr, "8">:$max_rounds,
    DefaultValuedAttr<Muon_WireDtypeAttr,
                      "::mlir::muon::WireDtype::F32">:$wire_dtype,
    OptionalAttr<StrAttr>:$placement,
    OptionalAttr<I64Attr>:$redundant_below);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Muon_AssignOp : Muon_Op<"assign", [HasParent<"ModelOp">]> {
  let summary = "Explicit owner of Muon matrices (a custom assign function)";
  let description = [{
    Rank `rank` orthogonalizes the listed matrices: a parameter name means all
    its matrices, `@p[i]` the i-th matrix of a batched parameter.

    With `redundant`, the listed matrices are orthogonalized once per
    replica instead of once: `rank` owns them in its replica, and in every
    other replica (the holders that differ from it only on the mesh axes
    where the parameter is replicated) the rank at `rank`'s coordinates off
    those axes owns them; gathers and scatters stay inside each replica.
    Under DDP every holder is a replica of its own: each orthogonalizes its
    own copy and nothing moves for the matrix. A matrix of a parameter
    that is not replicated cannot be redundant (muon-verify-schedule).

    ```mlir
    muon.assign 0 [@wq, @experts[3]]
    muon.assign 0 redundant [@norm_proj]
    ```
  }];
  let arguments = (ins I64Attr:$rank, ArrayAttr:$params,
                       DenseI64ArrayAttr:$slices, UnitAttr:$redundant);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Muon_QkClipOp : Muon_Op<"qk_clip", [HasParent<"ModelOp">]> {
  let summary = "An attention layer whose W_q and W_k QK-clip rescales";
  let description = [{
    MuonClip (Kimi K2, arXiv 2507.20534): after each step's update, query
    head h whose largest logit of the step S_h (a step input) exceeds
    `threshold` has its rows of `query` scaled by sqrt(threshold / S_h); key
    head j's rows of `key` are scaled by sqrt(threshold / max S_h) over the
    num_heads / num_kv_heads query heads sharing it. Both parameters are
    2-D [out, in] weights whose rows are the heads' blocks. Nothing in the
    exchange plan changes; the plan carries the layer to the runtime.

    ```mlir
    muon.qk_clip "layer0.attn" query @wq key @wk heads 8 kv_heads 2 threshold 1.000000e+02
    ```
  }];
  let arguments = (ins StrAttr:$layer, FlatSymbolRefAttr:$query,
                       FlatSymbolRefAttr:$key, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, F64Attr:$threshold);
  let assemblyFormat = [{
    $layer `query` $query `key` $key `heads` $num_heads `kv_heads`
    $num_kv_heads `threshold` $threshold attr-dict
  }];
  let hasVerifier = 1;
}

def Muon_GroupOp : Muon_Op<"group", [HasParent<"ModelOp">]> {
  let summary = "One process-group kind: a partition of the world";
  let description = [{
    `kind` is one of fsdp, shard, tp, ddp, replicate, cp, ep, pp. The groups
    partition 0..world_size-1 into equal groups; a rank's coordinate on this
    kind's mesh axis is its position inside its group.

    ```mlir
    muon.group fsdp [[0, 1], [2, 3]]
    ```
  }];
  let arguments = (ins Muon_GroupKindAttr:$kind, ArrayAttr:$groups);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    std::vector<std::vector<int64_t>> getGroupsVector();
  }];
}

//===----------------------------------------------------------------------===//
// The step: rounds and their schedule
//===----------------------------------------------------------------------===//

def Muon_RoundOp : Muon_Op<"round", [HasParent<"ModelOp">]> {
  let summary = "The Muon matrices gathered, orthogonalized and scattered together";
  let description = [{
    Round `index` holds the listed matrices (`@p` all matrices of a parameter,
    `@p[i]` one). It gathers them to their owners in one packed exchange and
    scatters the results in another. Written by `muon-pack-rounds`; the
    model verifier checks that the rounds are numbered 0..R-1 and hold every
    Muon matrix exactly once. The exchanges' contents are not spelled out:
    they follow from the layouts, the owners and the rounds.

    ```mlir
    muon.round 0 [@wq, @experts[3]]
    ```
  }];
  let arguments = (ins I64Attr:$index, ArrayAttr:$params,
                       DenseI64ArrayAttr:$slices);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Muon_ScheduleOp : Muon_Op<"schedule", [
    HasParent<"ModelOp">, SingleBlock, NoTerminator]> {
  let summary = "The step as one sequence every rank issues identically";
  let description = [{
    Holds the step in issue order: `muon.momentum`, `muon.exchange_start`
    and `muon.exchange_done` (gathers, scatters, the AdamW reduce),
    `muon.newton_schulz`, `muon.apply_update` and `muon.adamw_update`. Collectives must be issued in
    the same order on every rank, so there is one sequence for all. The
    region verifier checks that every token is waited on by exactly one
    `muon.exchange_done`; `muon-verify-schedule` checks the ordering rules and
    limits.

    ```mlir
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
    ```
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins)>];
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def Muon_ExchangeStartOp : Muon_Op<"exchange_start", [HasParent<"ScheduleOp">]> {
  let summary = "Post the gather or scatter of a round, or the AdamW reduce";
  let arguments = (ins Muon_ExchangePhaseAttr:$phase, I64Attr:$round);
  let results = (outs Muon_TokenType:$token);
  let assemblyFormat = "$phase `round` $round attr-dict `:` type($token)";
  let hasVerifier = 1;
}

def Muon_ExchangeDoneOp : Muon_Op<"exchange_done", [HasParent<"ScheduleOp">]> {
  let summary = "Wait for an exchange started earlier";
  let arguments = (ins Muon_TokenType:$token);
  let assemblyFormat = "$token attr-dict";
}

def Muon_NewtonSchulzOp : Muon_Op<"newton_schulz", [HasParent<"ScheduleOp">]> {
  let summary = "Run this rank's Newton-Schulz batches of a round";
  let arguments = (ins I64Attr:$round);
  let assemblyFormat = "`round` $round attr-dict";
}

def Muon_MomentumOp : Muon_Op<"momentum", [HasParent<"ScheduleOp">]> {
  let summary = "Momentum and the Nesterov mix on every local Muon piece";
  let description = [{
    `buf = lerp(buf, grad, 1 - momentum)`, then the update
    `lerp(grad, buf, momentum)` with Nesterov (else `buf`), on each rank's
    own pieces with its own gradient summand. Both are linear, so summing the
    summands' results at the owner gives the update of the summed gradient:
    the gathers carry this step's result.
  }];
  let assemblyFormat = "attr-dict";
}

def Muon_ApplyUpdateOp : Muon_Op<"apply_update", [HasParent<"ScheduleOp">]> {
  let summary = "Weight decay and the adjusted-lr update for a round";
  let description = [{
    On every local piece of the round's matrices, once their orthogonalized
    values are back: `param *= 1 - lr * weight_decay`, then
    `param -= adjusted_lr * update`.
  }];
  let arguments = (ins I64Attr:$round);
  let assemblyFormat = "`round` $round attr-dict";
}

def Muon_AdamWUpdateOp : Muon_Op<"adamw_update", [HasParent<"ScheduleOp">]> {
  let summary = "AdamW on every local piece of the adamw group";
  let description = [{
    Runs on summed gradients: for parameters with partial axes, after the
    `reduce` exchange is done.
  }];
  let assemblyFormat = "attr-dict";
}

#endif // MUON_OPS_TD
