//===- MuonEnums.td - Closed sets of the muon dialect ------*- tablegen -*-===//
//
// Every enum-like setting of the IR is an enum attribute: the verifier
// never has to compare strings, and a typo is a parse error.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_ENUMS_TD
#define MUON_ENUMS_TD

include "mlir/IR/EnumAttr.td"
include "muon/Dialect/Muon/IR/MuonDialect.td"

class Muon_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::mlir::muon";
  let genSpecializedAttr = 0;
}

// Written as a bare keyword inside an op's own syntax (`gather`).
class Muon_KeywordEnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<Muon_Dialect, info, mnemonic> {
  let assemblyFormat = "$value";
}

def Muon_ExchangePhase : Muon_Enum<"ExchangePhase", "what an exchange moves", [
  I32EnumAttrCase<"Gather", 0, "gather">,
  I32EnumAttrCase<"Scatter", 1, "scatter">,
  I32EnumAttrCase<"Reduce", 2, "reduce">]>;
def Muon_ExchangePhaseAttr : Muon_KeywordEnumAttr<Muon_ExchangePhase, "phase">;

def Muon_GroupKind : Muon_Enum<"ProcessGroupKind", "a process-group kind", [
  I32EnumAttrCase<"Fsdp", 0, "fsdp">,
  I32EnumAttrCase<"Shard", 1, "shard">,
  I32EnumAttrCase<"Tp", 2, "tp">,
  I32EnumAttrCase<"Ddp", 3, "ddp">,
  I32EnumAttrCase<"Replicate", 4, "replicate">,
  I32EnumAttrCase<"Cp", 5, "cp">,
  I32EnumAttrCase<"Ep", 6, "ep">,
  I32EnumAttrCase<"Pp", 7, "pp">]>;
def Muon_GroupKindAttr : Muon_KeywordEnumAttr<Muon_GroupKind, "kind">;

// Written as `#muon.adjust_lr<original>` in attribute dictionaries. The
// factors on lr for a rows x cols matrix are muon::adjustLrFactor's
// (muon/Plan/Plan.h), with their sources in docs/spec-format.md.
def Muon_AdjustLr : Muon_Enum<"AdjustLr", "how Muon scales its learning rate", [
  I32EnumAttrCase<"Original", 0, "original">,
  I32EnumAttrCase<"MatchRmsAdamW", 1, "match_rms_adamw">,
  I32EnumAttrCase<"Spectral", 2, "spectral">,
  I32EnumAttrCase<"UnitRmsNorm", 3, "unit_rms_norm">,
  I32EnumAttrCase<"SpectralUnclamped", 4, "spectral_unclamped">]>;
def Muon_AdjustLrAttr : EnumAttr<Muon_Dialect, Muon_AdjustLr, "adjust_lr"> {
  let assemblyFormat = "`<` $value `>`";
}

// Written as `#muon.weight_decay_mode<cautious>`: how a Muon group's weight
// decay acts (docs/spec-format.md 1.3).
def Muon_WeightDecayMode : Muon_Enum<"WeightDecayMode",
                                     "how Muon applies weight decay", [
  I32EnumAttrCase<"Decoupled", 0, "decoupled">,
  I32EnumAttrCase<"Cautious", 1, "cautious">,
  I32EnumAttrCase<"None", 2, "none">]>;
def Muon_WeightDecayModeAttr
    : EnumAttr<Muon_Dialect, Muon_WeightDecayMode, "weight_decay_mode"> {
  let assemblyFormat = "`<` $value `>`";
}

def Muon_WireDtype : Muon_Enum<"WireDtype", "the element type exchanges carry", [
  I32EnumAttrCase<"F32", 0, "f32">,
  I32EnumAttrCase<"BF16", 1, "bf16">]>;
def Muon_WireDtypeAttr : EnumAttr<Muon_Dialect, Muon_WireDtype, "wire_dtype"> {
  let assemblyFormat = "`<` $value `>`";
}

// Written as `#muon.ns_dtype<bf16>`; `auto` leaves the choice to the
// device that runs the plan (bf16 on CUDA; on the CPU the precision whose
// products run faster there, bf16 or f32). `f16` is never a default: it
// runs where a plan names it.
def Muon_NsDtype : Muon_Enum<"NsDtype", "the element type Newton-Schulz runs in", [
  I32EnumAttrCase<"Auto", 0, "auto">,
  I32EnumAttrCase<"F32", 1, "f32">,
  I32EnumAttrCase<"BF16", 2, "bf16">,
  I32EnumAttrCase<"F16", 3, "f16">]>;
def Muon_NsDtypeAttr : EnumAttr<Muon_Dialect, Muon_NsDtype, "ns_dtype"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // MUON_ENUMS_TD
