// The FGD paper's packing metric: allocated GPU share as a function of arrived GPU load.
//
// Implements FGD-PROTOCOL.md section 5 exactly: one sample (arrived milli-GPU A, allocated
// milli-GPU U) per pod event; arrive = round(A / gpus / 10) half-to-even, alloc =
// round(U / gpus / 10, 2); column x (0..max) = the mean of alloc over samples with arrive
// == x, or over x-1 <= arrive <= x+1 when there are none; rounded to 2 decimals. This is
// reporting arithmetic (doubles), never a scheduling input. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::sim {

struct AllocSample {
  int64_t arrived_milli = 0;
  int64_t allocated_milli = 0;
};

struct AllocCurve {
  // allocated[x] = allocated GPU % at x % arrived load, x = 0..max_percent; nullopt when
  // no sample lies within x-1..x+1 (the paper's CSV leaves such a cell empty).
  std::vector<std::optional<double>> allocated;
  // 100 - allocated[100], the headline "unallocated GPU %"; nullopt if the load never got there.
  std::optional<double> UnallocatedAt(int percent) const;
};

AllocCurve DiscretiseAllocCurve(const std::vector<AllocSample>& samples, int64_t total_gpus,
                                int max_percent = 130);

// numpy.round(x, decimals): scale, round half to even, unscale.
double RoundHalfEven(double x, int decimals);

// Median as numpy computes it (mean of the two middle values for even counts).
double Median(std::vector<double> values);

}  // namespace tessera::sim
