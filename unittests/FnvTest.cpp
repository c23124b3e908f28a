//===- FnvTest.cpp - The project's FNV-1a ---------------------------------===//
#include "muon/Support/Fnv.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

using namespace muon;

namespace {

TEST(Fnv, KnownValues) {
  // The published 64-bit FNV-1a test vectors.
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  // A hash continued over parts is the hash of the whole.
  EXPECT_EQ(fnv1a(std::string_view("bar"), fnv1a("foo")), fnv1a("foobar"));
}

TEST(Fnv, ChunksHashLikeEachChunkAlone) {
  // Sizes around the eight chunks hashed side by side: none, a short last
  // chunk, exactly eight, eight and a few more.
  const size_t chunk = 64;
  std::vector<unsigned char> data(chunk * 21 + 5);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>(i * 131 + (i >> 7));
  for (size_t size : {size_t(0), size_t(1), chunk - 1, chunk, 8 * chunk,
                      8 * chunk + 3, 17 * chunk, data.size()}) {
    std::vector<uint64_t> got((size + chunk - 1) / chunk + 1, 0);
    fnv1aChunks(data.data(), size, chunk, got.data());
    for (size_t c = 0; c * chunk < size; ++c)
      EXPECT_EQ(got[c], fnv1a(data.data() + c * chunk,
                              std::min(chunk, size - c * chunk)))
          << "size " << size << ", chunk " << c;
    // Nothing written past the last chunk.
    EXPECT_EQ(got.back(), 0u) << "size " << size;
  }
}

TEST(Fnv, KeyedChunksStartFromTheirKeyAndNumber) {
  const size_t chunk = 64;
  std::vector<unsigned char> data(chunk * 19 + 7);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>(i * 37 + 11);
  const uint64_t key = fnv1a("a state's identity");
  std::vector<uint64_t> got((data.size() + chunk - 1) / chunk);
  for (uint64_t first : {uint64_t(0), uint64_t(5)}) {
    fnv1aKeyedChunks(data.data(), data.size(), chunk, key, first, got.data());
    for (size_t c = 0; c < got.size(); ++c) {
      uint64_t number = first + c;
      uint64_t start = fnv1a(&number, sizeof(number), key);
      EXPECT_EQ(got[c], fnv1a(data.data() + c * chunk,
                              std::min(chunk, data.size() - c * chunk), start))
          << "chunk " << c << " numbered from " << first;
    }
  }
  // The same bytes under another key, or at another number, differ.
  std::vector<uint64_t> other(got.size()), moved(got.size());
  fnv1aKeyedChunks(data.data(), data.size(), chunk, key ^ 1, 5, other.data());
  fnv1aKeyedChunks(data.data(), data.size(), chunk, key, 6, moved.data());
  for (size_t c = 0; c < got.size(); ++c) {
    EXPECT_NE(got[c], other[c]) << "chunk " << c;
    EXPECT_NE(got[c], moved[c]) << "chunk " << c;
  }
}

} // namespace

TEST(Fnv, AStringLiteralIsHashedAsText) {
  // Not as a pointer with the hash taken for a byte count.
  const uint64_t h = muon::fnv1a("abc", 7);
  EXPECT_EQ(h, muon::fnv1a(std::string_view("abc"), 7));
  EXPECT_EQ(muon::fnv1a("abc"), muon::fnv1a(std::string("abc")));
}
