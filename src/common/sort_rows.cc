#include "common/sort_rows.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <utility>

namespace tessera {

bool RadixSortRows(const std::vector<int64_t>& keys, size_t K, size_t n,
                   std::vector<uint32_t>& rows) {
  if (n == 0 || n > UINT32_MAX) return false;
  std::vector<int64_t> lo(K, INT64_MAX), hi(K, INT64_MIN);
  for (size_t r = 0; r < n; ++r)
    for (size_t k = 0; k < K; ++k) {
      lo[k] = std::min(lo[k], keys[r * K + k]);
      hi[k] = std::max(hi[k], keys[r * K + k]);
    }
  std::vector<int> bits(K);
  int total = std::bit_width(static_cast<uint64_t>(n - 1));
  for (size_t k = 0; k < K; ++k) {
    bits[k] = std::bit_width(static_cast<uint64_t>(hi[k]) - static_cast<uint64_t>(lo[k]));
    total += bits[k];
  }
  if (total > 64) return false;
  std::vector<uint64_t> a(n);
  for (size_t r = 0; r < n; ++r) {
    uint64_t w = 0;
    for (size_t k = 0; k < K; ++k)
      if (bits[k] > 0)
        w = (w << bits[k]) |
            (static_cast<uint64_t>(keys[r * K + k]) - static_cast<uint64_t>(lo[k]));
    a[r] = (w << std::bit_width(static_cast<uint64_t>(n - 1))) | r;
  }
  // The words are distinct (the index is in them). LSD radix passes are stable, so lower
  // digits keep their order; a pass costs the rows plus 2^digit counters. Small counts sort
  // by comparison; up to 16k rows 11-bit digits (a replay's cycles have a few thousand
  // pending jobs: 2,048 counters per pass), then 16-bit digits.
  if (n < 256) {
    std::sort(a.begin(), a.end());
  } else {
    const int digit = n < (1 << 14) ? 11 : 16;
    const uint64_t digit_mask = (uint64_t{1} << digit) - 1;
    std::vector<uint64_t> b(n);
    std::vector<uint32_t> count(size_t{1} << digit);
    for (int shift = 0; shift < total; shift += digit) {
      std::fill(count.begin(), count.end(), 0);
      for (uint64_t w : a) ++count[(w >> shift) & digit_mask];
      uint32_t sum = 0;
      for (uint32_t& c : count) sum += std::exchange(c, sum);
      for (uint64_t w : a) b[count[(w >> shift) & digit_mask]++] = w;
      a.swap(b);
    }
  }
  const uint64_t mask = (uint64_t{1} << std::bit_width(static_cast<uint64_t>(n - 1))) - 1;
  rows.resize(n);
  for (size_t r = 0; r < n; ++r) rows[r] = static_cast<uint32_t>(a[r] & mask);
  return true;
}

}  // namespace tessera
