//===- MirrorLower.cpp - A symmetric matrix's lower triangle mirrored ------===//
//
// By 16 x 16 blocks transposed through a local buffer, so that every cache
// line of the matrix is read or written whole. Writing the mirror one value
// at a time walks a column: at m = 1024 its rows are exactly 4 KiB apart,
// every write of a column maps to the same L1 set, and the lines evict each
// other before the next column reuses them (the element-wise pass measured
// 1.55 ms at m = 1024 against 0.77 ms by blocks, 5% of f32 Newton-Schulz's
// time on a 1024 x 1024 matrix; docs/performance.md, issue 52).
//
//===----------------------------------------------------------------------===//
#include "MirrorLower.h"
#include "RoundHalf.h"

#include <algorithm>
#include <cstring>

namespace muon::runtime::cpu {
namespace {

constexpr int64_t kBlock = 16;

template <DType kRounding, bool kCopy>
void mirrorBlocks(float *s, int64_t m, float *copy) {
  float block[kBlock][kBlock];
  for (int64_t i0 = 0; i0 < m; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, m - i0);
    // Whole blocks left of the diagonal (j0 + kBlock <= i0): rows read
    // whole, each block's columns written whole as rows of the upper
    // triangle.
    for (int64_t j0 = 0; j0 < i0; j0 += kBlock) {
      for (int64_t r = 0; r < rows; ++r) {
        float *row = s + (i0 + r) * m + j0;
        float *copyRow = kCopy ? copy + (i0 + r) * m + j0 : nullptr;
        for (int64_t c = 0; c < kBlock; ++c) {
          const float v = roundAs<kRounding>(row[c]);
          if (kRounding != DType::F32)
            row[c] = v;
          if (kCopy)
            copyRow[c] = v;
          block[c][r] = v;
        }
      }
      for (int64_t c = 0; c < kBlock; ++c)
        std::memcpy(s + (j0 + c) * m + i0, block[c],
                    static_cast<size_t>(rows) * sizeof(float));
    }
    // The diagonal block, one value at a time (its columns are short).
    for (int64_t i = i0; i < i0 + rows; ++i)
      for (int64_t j = i0; j <= i; ++j) {
        const float v = roundAs<kRounding>(s[i * m + j]);
        s[i * m + j] = v;
        if (kCopy)
          copy[i * m + j] = v;
        s[j * m + i] = v;
      }
  }
}

template <DType kRounding>
void mirrorBlocksRounded(float *s, int64_t m, float *copy) {
  copy ? mirrorBlocks<kRounding, true>(s, m, copy)
       : mirrorBlocks<kRounding, false>(s, m, nullptr);
}

} // namespace

void mirrorLower(float *s, int64_t m, float *copy, DType rounding) {
  switch (rounding) {
  case DType::BF16:
    return mirrorBlocksRounded<DType::BF16>(s, m, copy);
  case DType::F16:
    return mirrorBlocksRounded<DType::F16>(s, m, copy);
  case DType::F32:
    return mirrorBlocksRounded<DType::F32>(s, m, copy);
  }
}

} // namespace muon::runtime::cpu
