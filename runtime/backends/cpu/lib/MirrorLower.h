//===- MirrorLower.h - A symmetric matrix's lower triangle mirrored -*- C++ -*-===//
//
// BLAS's symmetric products (syrk) write one triangle; the next product
// reads the whole matrix. This pass copies the lower triangle of an m x m
// row-major matrix into its upper one, optionally rounding the triangle to
// bf16 or f16 first and copying it into a second matrix's lower triangle,
// in one walk (Newton-Schulz's standard form and its Gram form on BLAS).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_MIRRORLOWER_H
#define MUON_RUNTIME_CPU_MIRRORLOWER_H

#include "muon/Runtime/DType.h"

#include <cstdint>

namespace muon::runtime::cpu {

/// s's lower triangle (the diagonal included) copied into its upper one.
/// The lower triangle is rounded to `rounding`'s values first, in place
/// (F32: left as it is); with `copy`, the (rounded) lower triangle is also
/// written into copy's lower triangle. s and copy are m x m, row-major, and
/// do not overlap.
void mirrorLower(float *s, int64_t m, float *copy = nullptr,
                 DType rounding = DType::F32);

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_MIRRORLOWER_H
