// Sorting rows of integer keys packed into single words, for the engine's job order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera {

// Sorts the `n` rows of K integer keys (row-major in `keys`, n * K values) by (keys...,
// row index) and writes the row indices in that order to `rows`. It packs each row into
// one 64-bit word (every column offset by its minimum, then the index) and sorts the words:
// by radix from 256 rows (no data-dependent branches, where a comparison sort of such keys
// spends most of its time in branch mispredictions; digits of 8 to 11 bits, whichever the
// row count makes cheapest), by comparison below that. Returns false, leaving
// `rows` as it was, when the columns' ranges and the index do not fit 64 bits together (the
// caller then sorts by comparison); the order is the same either way.
bool RadixSortRows(const std::vector<int64_t>& keys, size_t K, size_t n,
                   std::vector<uint32_t>& rows);

}  // namespace tessera
