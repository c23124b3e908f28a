//===- NsPrecision.h - What ns_dtype "auto" is on this CPU ------*- C++ -*-===//
//
// ns_dtype "auto" on the CPU is the precision whose Newton-Schulz runs
// faster here, decided by the rate of the products each one runs on, not
// by the instructions the CPU has. Two CPUs with the same bf16 instructions
// (oneDNN's avx512_core_bf16) differ by 4.5x: a Zen 4 EPYC runs oneDNN's
// bf16 products at 2.1x OpenBLAS's sgemm, an Emerald Rapids without AMX at
// 0.47x (docs/decisions.md, docs/performance.md, issue 52). So:
//
//   - no bf16 products (AVX2, AVX-512 without AVX512_BF16, a build without
//     oneDNN): f32. bf16 would run the same f32 products, each result
//     rounded, which is never faster. Decided by the ISA alone.
//   - bf16 products (AVX512_BF16, AMX): both products are timed once per
//     process on one thread, and bf16 is chosen where its products run at
//     least kBf16MinSpeedup times sgemm's rate, else f32.
//
// The rates can be given instead of measured (kProductRatesVariable): a
// launcher hands its own to the processes it starts (muon-run to its
// ranks, muon-bench to muon-run), so that they decide alike. Ranks that
// decide on their own still run one precision: the step executor runs
// rank 0's choice on every rank (StepExecutor.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_NSPRECISION_H
#define MUON_RUNTIME_CPU_NSPRECISION_H

#include "muon/Runtime/DType.h"
#include "muon/Support/Status.h"

#include <string>

namespace muon::runtime::cpu {

/// How fast the two products Newton-Schulz runs on go on one thread, in
/// flop/s: BLAS's sgemm (f32) and oneDNN's bf16 matmul with f32
/// accumulation (bf16); 0 where not known.
struct ProductRates {
  double f32 = 0, bf16 = 0;
};

/// What the choice is made from.
struct NsPrecisionFacts {
  /// Whether bf16 Newton-Schulz would run on oneDNN's bf16 products here:
  /// oneDNN is built in, the device may use it, and the CPU has bf16 dot
  /// products as oneDNN sees it (DNNL_MAX_CPU_ISA can hide them).
  bool bf16Products = false;
  /// oneDNN's ISA ("avx512_core_bf16"), or why there is none ("built
  /// without oneDNN").
  std::string isa;
  /// The BLAS and its kernels ("OpenBLAS, Cooperlake kernels").
  std::string blas;
  /// Read only where bf16Products.
  ProductRates rates;
  /// Where `rates` come from ("measured on one thread", or the variable),
  /// or why they are missing (a failed measurement).
  std::string ratesSource;
};

/// What ns_dtype "auto" is, and why, in words for summaries and reports.
struct NsPrecisionChoice {
  DType dtype = DType::F32;
  std::string reason;
};

/// How much faster than sgemm the bf16 products must run for bf16 to be
/// chosen. The bf16 forms reach a lower share of their products' rate than
/// the f32 forms on wide matrices (0.58 against 0.48 of the dense floor at
/// 768x3072, 0.61 against 0.49 at 512x2048, alike at 1024x1024: up to
/// 1.24x, 1.26x in another sitting), so under that f32 is as fast on some
/// shapes, and it is the more accurate on every shape (docs/performance.md,
/// issue 52).
inline constexpr double kBf16MinSpeedup = 1.3;

/// The rule above, on given facts (unit-tested for every ISA).
NsPrecisionChoice chooseDefaultNsPrecision(const NsPrecisionFacts &facts);

/// The environment variable that gives the product rates instead of a
/// measurement: "f32=RATE,bf16=RATE" in flop/s ("f32=1.05e11,bf16=2.24e11").
inline constexpr const char *kProductRatesVariable = "MUON_CPU_PRODUCT_RATES";

/// The variable's text as rates; InvalidArgument, naming the variable and
/// the form it wants, for anything else.
StatusOr<ProductRates> parseProductRates(const std::string &text);
/// Rates as the variable's text (round-trips through parseProductRates).
std::string formatProductRates(const ProductRates &rates);

/// Times sgemm and oneDNN's bf16 product on one thread (a thread of its
/// own, its CPU time, the best of a few 384 x 384 x 384 products each,
/// interleaved; about 10 ms). Where oneDNN has no bf16 products, or the
/// build has no oneDNN, Unimplemented says why.
StatusOr<ProductRates> measureProductRates();

/// This process's facts: read once, on first use; the rates from
/// kProductRatesVariable where it is set and valid, else measured (only
/// where there are bf16 products to measure).
const NsPrecisionFacts &processNsPrecisionFacts();
/// chooseDefaultNsPrecision on them, once per process.
const NsPrecisionChoice &processDefaultNsPrecision();

/// For a program that starts others (muon-run its ranks): sets
/// kProductRatesVariable to the rates this process decided with, where it
/// measured them, so that the processes it starts decide alike without
/// measuring. Does nothing where the choice needed no rates.
void shareProductRates();

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_NSPRECISION_H
