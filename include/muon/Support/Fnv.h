//===- Fnv.h - The one FNV-1a hash of the project ---------------*- C++ -*-===//
//
// 64-bit FNV-1a with the standard offset basis and prime (as
// docs/plan-format.md specifies): plan checksums, plan hashes, checkpoint
// data hashes and the example trainer's parameter digests all use it, so
// that a value computed by one tool can be checked by another. Header-only
// and free of MLIR: the runtime uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_FNV_H
#define MUON_SUPPORT_FNV_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace muon {

inline constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;

/// FNV-1a of `size` bytes at `data`, continuing from `hash` (the offset
/// basis for a fresh hash; a previous result to hash a sequence of parts).
inline uint64_t fnv1a(const void *data, size_t size,
                      uint64_t hash = kFnvOffsetBasis) {
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= kFnvPrime;
  }
  return hash;
}

inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnvOffsetBasis) {
  return fnv1a(text.data(), text.size(), hash);
}

/// A string literal is text, not a pointer and a size: without this,
/// fnv1a("tag", hash) would take `hash` as the byte count.
template <size_t N>
inline uint64_t fnv1a(const char (&text)[N], uint64_t hash = kFnvOffsetBasis) {
  return fnv1a(std::string_view(text, N - 1), hash);
}

/// The FNV-1a of every `chunkBytes`-byte chunk of the `size` bytes at
/// `data` (the last chunk may be shorter), into `out`, which has room for
/// (size + chunkBytes - 1) / chunkBytes values: each is fnv1a of its
/// chunk. One FNV-1a chain waits for a multiply per byte; eight chunks
/// hashed side by side keep the multiplier busy, about twice the rate of
/// one chain (checkpoints hash their data in chunks). fnv1aChunksFrom
/// starts chunk c's hash from `startOf(c)`.
template <typename StartOf>
inline void fnv1aChunksFrom(const void *data, size_t size, size_t chunkBytes,
                            uint64_t *out, StartOf startOf) {
  constexpr size_t kLanes = 8;
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  const size_t whole = size / chunkBytes;
  size_t c = 0;
  for (; c + kLanes <= whole; c += kLanes) {
    const unsigned char *at = bytes + c * chunkBytes;
    uint64_t hash[kLanes];
    for (size_t l = 0; l < kLanes; ++l)
      hash[l] = startOf(c + l);
    for (size_t i = 0; i < chunkBytes; ++i)
      for (size_t l = 0; l < kLanes; ++l)
        hash[l] = (hash[l] ^ at[l * chunkBytes + i]) * kFnvPrime;
    for (size_t l = 0; l < kLanes; ++l)
      out[c + l] = hash[l];
  }
  for (; c * chunkBytes < size; ++c) {
    size_t left = size - c * chunkBytes;
    out[c] = fnv1a(bytes + c * chunkBytes,
                   left < chunkBytes ? left : chunkBytes, startOf(c));
  }
}

inline void fnv1aChunks(const void *data, size_t size, size_t chunkBytes,
                        uint64_t *out) {
  fnv1aChunksFrom(data, size, chunkBytes, out,
                  [](size_t) { return kFnvOffsetBasis; });
}

/// fnv1aChunks with each chunk's hash keyed: chunk c (counted from
/// `firstChunk`) starts from the FNV-1a of its number (8 bytes,
/// little-endian) continued from `key` instead of from the offset basis.
/// The same bytes under another key, or at another chunk number, hash
/// differently (checkpoints key their chunks with the identity of the
/// state they hold).
inline void fnv1aKeyedChunks(const void *data, size_t size, size_t chunkBytes,
                             uint64_t key, uint64_t firstChunk, uint64_t *out) {
  fnv1aChunksFrom(data, size, chunkBytes, out, [&](size_t c) {
    uint64_t number = firstChunk + c;
    return fnv1a(&number, sizeof(number), key);
  });
}

} // namespace muon

#endif // MUON_SUPPORT_FNV_H
