//===- Limits.h - Documented maxima and checked arithmetic ------*- C++ -*-===//
//
// Every size that enters from outside (a spec, an IR file, a plan file, a
// flag) is checked against these maxima where it enters, with the limit in
// the message, so that no product of sizes overflows 64 bits and no
// allocation is sized by an unchecked number. They are far above the largest
// real models (Kimi-K2 on 2048 ranks: 69,668 matrices; docs/user-guide.md
// lists them with their reasons).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_LIMITS_H
#define MUON_SUPPORT_LIMITS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muon::limits {

/// Ranks of a world (mesh devices, process-group world_size).
constexpr int64_t kMaxWorldSize = int64_t(1) << 16;
/// Axes of a mesh.
constexpr int64_t kMaxMeshAxes = 16;
/// Dims of a parameter tensor.
constexpr int64_t kMaxTensorDims = 16;
/// Elements of one parameter tensor.
constexpr int64_t kMaxParamElements = int64_t(1) << 40;
/// Elements of one Muon matrix (a 2^17 x 2^17 matrix; Newton-Schulz on it
/// needs 64 GiB in f32 before any workspace).
constexpr int64_t kMaxMatrixElements = int64_t(1) << 34;
/// Elements of all parameters of a model together.
constexpr int64_t kMaxModelElements = int64_t(1) << 42;
/// Parameters of a model.
constexpr int64_t kMaxParams = int64_t(1) << 20;
/// Muon matrices of a model (each slice of a batched parameter counts).
constexpr int64_t kMaxMatrices = int64_t(1) << 20;
/// Pieces of a model: for every matrix (and every partial AdamW
/// parameter), the ranks holding a piece of it. Plans grow with it.
constexpr int64_t kMaxPieces = int64_t(1) << 24;
/// Newton-Schulz flops of one step, all matrices together.
constexpr int64_t kMaxStepFlops = int64_t(1) << 62;
/// Bytes one step may move, all ranks together (an upper bound the
/// layout gives before any plan exists).
constexpr int64_t kMaxStepBytes = int64_t(1) << 60;
/// Newton-Schulz iterations.
constexpr int64_t kMaxNsSteps = 99;
/// Exchanges prefetched beyond the one in use.
constexpr int64_t kMaxPrefetchCount = 1024;
/// Rounds a step is split into.
constexpr int64_t kMaxRounds = 4096;
/// Ranks times exchanges: the per-rank exchange tables of a plan.
constexpr int64_t kMaxRankExchanges = int64_t(1) << 24;
/// Nesting of JSON arrays and objects (specs need 6, plans 5).
constexpr int64_t kMaxJsonDepth = 64;
/// Experts of a process-group model (num_experts, expert ids).
constexpr int64_t kMaxExperts = int64_t(1) << 20;
/// Bytes of a text file read whole: a spec, IR, a JSON plan, a checkpoint
/// manifest, a profile file, a report (InputFile.h).
constexpr int64_t kMaxTextFileBytes = int64_t(1) << 30;
/// Bytes of a binary plan read whole (by the launching side or
/// --convert-plan; a rank of a run reads only its part).
constexpr int64_t kMaxBinaryPlanFileBytes = int64_t(1) << 34;

/// "2^16 (65536)": how messages show a limit.
std::string describe(int64_t limit);

} // namespace muon::limits

namespace muon {

/// a * b, or nothing when it overflows int64.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// a + b, or nothing when it overflows int64.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// The product of `values` if every partial product stays within `limit`,
/// else nothing. Values must be >= 0.
std::optional<int64_t> boundedProduct(const std::vector<int64_t> &values,
                                      int64_t limit);

/// Parses a non-negative decimal integer written plainly: digits only, no
/// sign, no leading zeros ("0" itself is fine), within int64.
std::optional<int64_t> parseDecimal(const std::string &text);

} // namespace muon

#endif // MUON_SUPPORT_LIMITS_H
