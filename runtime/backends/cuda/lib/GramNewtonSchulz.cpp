//===- GramNewtonSchulz.cpp - The Gram form's phase on cuBLAS -------------===//
//
// One phase of `length` steps on a chunk of same-shape matrices, as the CPU
// runs it (OneDnnNewtonSchulz.cpp in bf16, GramNewtonSchulz.cpp in f32), the
// m x m matrices column-major in the workspace, every product one strided
// batched GEMM (or the lower tiles) for the whole chunk:
//   R = X X^T (X^T X for tall X)
//   per step:  F = b R + a I (f32, polynomialBase), F += c R R (the product
//              in f32 on top of F), H = F rounded once (bf16, f16; f32's H
//              is F)
//              Q = H on the first step, else Q <- H Q
//              R <- H (H R), but after the last step
//   X <- Q X (X Q for tall X): the phase's one m x n product, beta 0
// Every m x m result is mirrored from its lower triangle: the products of
// two commuting symmetric matrices are symmetric only up to rounding, and
// the CPU's are exactly symmetric.
//
//===----------------------------------------------------------------------===//
#include "NewtonSchulz.h"

#include "CudaSupport.h"
#include "Kernels.h"

#include <utility>

namespace muon::runtime::cuda {

void NewtonSchulzRunner::gramPhase(const Chunk &chunk, Slot from,
                                   const std::array<double, 3> *steps,
                                   int64_t length) {
  const bool half = roundsToHalf(chunk.precision);
  const Slot to = from == Slot::X0 ? Slot::X1 : Slot::X0;
  Slot r = Slot::Gram, h = Slot::Poly, q = Slot::Product, t = Slot::Scratch;
  gramMatrix(chunk, from, r, /*mirror=*/true);
  for (int64_t step = 0; step < length; ++step) {
    const float a = static_cast<float>(steps[step][0]),
                b = static_cast<float>(steps[step][1]),
                c = static_cast<float>(steps[step][2]);
    // H (the first straight into Q), summed in f32 and rounded once.
    const Slot polynomial = step == 0 ? q : h;
    const Slot sum = half ? Slot::PolyF32 : polynomial;
    launchPolynomialBase(stream, chunk.at(r), chunk.precision,
                         reinterpret_cast<float *>(chunk.at(sum)), chunk.count,
                         chunk.m, chunk.layout.squareStride, a, b);
    symmetricProduct(chunk, c, r, r, 1.0f, sum, /*mirror=*/true);
    if (half)
      launchRoundToHalf(stream, reinterpret_cast<const float *>(chunk.at(sum)),
                        reinterpret_cast<uint16_t *>(chunk.at(polynomial)),
                        chunk.precision, chunk.count, chunk.m * chunk.m,
                        chunk.layout.squareStride);
    if (step != 0) {
      symmetricProduct(chunk, 1.0f, polynomial, q, 0.0f, t, /*mirror=*/true);
      std::swap(q, t);
    }
    if (step + 1 < length) {
      symmetricProduct(chunk, 1.0f, polynomial, r, 0.0f, t, /*mirror=*/true);
      symmetricProduct(chunk, 1.0f, polynomial, t, 0.0f, r, /*mirror=*/true);
    }
  }
  // X <- Q X (wide) or X Q (tall): the standard step's update product with
  // Q for B and beta 0 (no copy of X to add).
  const UpdateProduct update = updateProduct(chunk.rows, chunk.cols);
  const int64_t xStride = chunk.layout.xStride,
                square = chunk.layout.squareStride;
  if (update.polynomialFirst)
    gemm(update.shape, 1.0f, chunk.at(q), square, chunk.at(from), xStride,
         0.0f, chunk.at(to), xStride, chunk.count, chunk.precision,
         chunk.precision);
  else
    gemm(update.shape, 1.0f, chunk.at(from), xStride, chunk.at(q), square,
         0.0f, chunk.at(to), xStride, chunk.count, chunk.precision,
         chunk.precision);
}

} // namespace muon::runtime::cuda
