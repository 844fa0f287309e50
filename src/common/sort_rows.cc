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
  // The words are distinct (the index is in them). Below a few thousand rows a comparison
  // sort of them is cheaper than radix passes over 2^16 counters each (a replay's cycles
  // have few pending jobs; the counters then cost more than the sort).
  constexpr size_t kRadixFrom = 1 << 14;
  if (n < kRadixFrom) {
    std::sort(a.begin(), a.end());
  } else {
    // LSD radix, 16 bits per pass: stable, so lower digits keep their order.
    std::vector<uint64_t> b(n);
    for (int shift = 0; shift < total; shift += 16) {
      std::vector<uint32_t> count(1 << 16, 0);
      for (uint64_t w : a) ++count[(w >> shift) & 0xffff];
      uint32_t sum = 0;
      for (uint32_t& c : count) sum += std::exchange(c, sum);
      for (uint64_t w : a) b[count[(w >> shift) & 0xffff]++] = w;
      a.swap(b);
    }
  }
  const uint64_t mask = (uint64_t{1} << std::bit_width(static_cast<uint64_t>(n - 1))) - 1;
  rows.resize(n);
  for (size_t r = 0; r < n; ++r) rows[r] = static_cast<uint32_t>(a[r] & mask);
  return true;
}

}  // namespace tessera
