#include "sim/alloc_curve.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

namespace tessera::sim {

double RoundHalfEven(double x, int decimals) {
  double scale = std::pow(10.0, decimals);
  // std::nearbyint honours the current rounding mode, which is round-to-nearest-even by default.
  return std::nearbyint(x * scale) / scale;
}

std::optional<double> AllocCurve::UnallocatedAt(int percent) const {
  if (percent < 0 || percent >= static_cast<int>(allocated.size()) || !allocated[percent])
    return std::nullopt;
  return RoundHalfEven(100.0 - *allocated[percent], 2);
}

AllocCurve DiscretiseAllocCurve(const std::vector<AllocSample>& samples, int64_t total_gpus,
                                int max_percent) {
  AllocCurve curve;
  curve.allocated.assign(max_percent + 1, std::nullopt);
  if (total_gpus <= 0) return curve;
  // Bucket the rounded samples by their arrive column once; each column then needs its own
  // bucket or its two neighbours.
  std::vector<double> sum(max_percent + 3, 0.0);
  std::vector<int64_t> count(max_percent + 3, 0);
  for (const AllocSample& s : samples) {
    double arrive = RoundHalfEven(
        static_cast<double>(s.arrived_milli) / static_cast<double>(total_gpus) / 10.0, 0);
    double alloc = RoundHalfEven(
        static_cast<double>(s.allocated_milli) / static_cast<double>(total_gpus) / 10.0, 2);
    if (arrive < 0 || arrive > max_percent + 1) continue;
    int a = static_cast<int>(arrive);
    sum[a] += alloc;
    count[a] += 1;
  }
  for (int x = 0; x <= max_percent; ++x) {
    double s = sum[x];
    int64_t c = count[x];
    if (c == 0) {
      for (int y = std::max(0, x - 1); y <= x + 1; ++y) {
        s += sum[y];
        c += count[y];
      }
    }
    if (c > 0) curve.allocated[x] = RoundHalfEven(s / static_cast<double>(c), 2);
  }
  return curve;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

}  // namespace tessera::sim
