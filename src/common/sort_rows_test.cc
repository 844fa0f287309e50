#include "common/sort_rows.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "common/rng.h"

namespace tessera {
namespace {

// The order a comparison sort gives: by the keys, then by row index.
std::vector<uint32_t> ByComparison(const std::vector<int64_t>& keys, size_t K, size_t n) {
  std::vector<uint32_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0u);
  std::sort(rows.begin(), rows.end(), [&](uint32_t a, uint32_t b) {
    for (size_t k = 0; k < K; ++k)
      if (keys[a * K + k] != keys[b * K + k]) return keys[a * K + k] < keys[b * K + k];
    return a < b;
  });
  return rows;
}

TEST(RadixSortRows, EqualsComparisonSortOnRandomKeys) {
  Rng rng(7);
  for (int round = 0; round < 200; ++round) {
    const size_t K = 1 + rng.Below(3);
    // Mostly below 3,000 rows (by comparison below 256, then radix), every tenth round
    // past 16,384 rows.
    const size_t n = round % 10 == 0 ? 16384 + rng.Below(20000) : rng.Below(3000);
    // Ranges from a few values (ties, decided by the index) to 2^16, negative ones too:
    // three such columns and the index still fit 64 bits.
    std::vector<int64_t> span(K);
    for (auto& s : span) s = int64_t{1} << rng.Below(17);
    std::vector<int64_t> keys(n * K);
    for (size_t i = 0; i < keys.size(); ++i)
      keys[i] = static_cast<int64_t>(rng.Below(span[i % K])) - span[i % K] / 2;
    // Every fourth round the last column repeats the first (as FIFO's key and the submit
    // time do), which the packing leaves out.
    if (round % 4 == 1 && K > 1)
      for (size_t r = 0; r < n; ++r) keys[r * K + K - 1] = keys[r * K];
    std::vector<uint32_t> rows;
    ASSERT_TRUE(RadixSortRows(keys, K, n, rows) || n == 0) << "round " << round;
    if (n == 0) continue;
    EXPECT_EQ(rows, ByComparison(keys, K, n)) << "round " << round << ", K " << K;
  }
}

TEST(RadixSortRows, ExtremeValues) {
  std::vector<uint32_t> rows;
  // One row: no bits at all.
  ASSERT_TRUE(RadixSortRows({INT64_MAX}, 1, 1, rows));
  EXPECT_EQ(rows, std::vector<uint32_t>{0});
  // Near INT64_MIN, but small ranges: 1 + 4 bits and 1 for the index.
  ASSERT_TRUE(RadixSortRows({INT64_MIN + 1, 5, INT64_MIN, -3}, 2, 2, rows));
  EXPECT_EQ(rows, (std::vector<uint32_t>{1, 0}));
  // A column spanning the whole int64 range leaves no bit for the index.
  EXPECT_FALSE(RadixSortRows({3, INT64_MIN, 3, INT64_MAX}, 2, 2, rows));
}

TEST(RadixSortRows, ARepeatedColumnTakesNoBits) {
  // Two 40-bit columns and the index would not fit 64 bits; the same column twice does.
  const size_t n = 1000;
  std::vector<int64_t> keys;
  Rng rng(3);
  for (size_t r = 0; r < n; ++r) {
    const int64_t v = static_cast<int64_t>(rng.Below(uint64_t{1} << 40));
    keys.push_back(v);
    keys.push_back(v);
  }
  std::vector<uint32_t> rows;
  ASSERT_TRUE(RadixSortRows(keys, 2, n, rows));
  EXPECT_EQ(rows, ByComparison(keys, 2, n));
}

TEST(RadixSortRows, TooWideLeavesRowsAlone) {
  std::vector<int64_t> keys = {INT64_MIN, INT64_MAX, 0};
  std::vector<uint32_t> rows = {42};
  EXPECT_FALSE(RadixSortRows(keys, 1, 3, rows));
  EXPECT_EQ(rows, std::vector<uint32_t>{42});
}

}  // namespace
}  // namespace tessera
