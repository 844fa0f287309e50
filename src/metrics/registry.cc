#include "metrics/registry.h"

#include <algorithm>
#include <cmath>

namespace tessera::metrics {

void Registry::AddCollector(const Collector* collector) {
  std::lock_guard lock(mu_);
  collectors_.push_back(collector);
}

Status Registry::CheckNew(const std::string& name, const std::string* labels, size_t n,
                          MetricType type) const {
  if (!IsValidMetricName(name)) {
    return InvalidArgument("metric \"" + name + "\": not a valid Prometheus metric name");
  }
  for (size_t i = 0; i < n; ++i) {
    if (!IsValidLabelName(labels[i]) || (type == MetricType::kHistogram && labels[i] == "le")) {
      return InvalidArgument("metric \"" + name + "\": label \"" + labels[i] +
                             "\" is not a valid label name here");
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j] == labels[i]) {
        return InvalidArgument("metric \"" + name + "\": label \"" + labels[i] + "\" twice");
      }
    }
  }
  std::lock_guard lock(mu_);
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
    return AlreadyExists("metric \"" + name + "\": already registered");
  }
  return Status::Ok();
}

Status Registry::CheckBounds(const std::string& name, const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
      return InvalidArgument("metric \"" + name + "\": bounds[" + std::to_string(i) +
                             "] must be finite and greater than the one before");
    }
  }
  return Status::Ok();
}

std::vector<MetricFamily> Registry::Collect() const {
  std::vector<const Collector*> collectors;
  {
    std::lock_guard lock(mu_);
    collectors = collectors_;
  }
  std::vector<MetricFamily> out;
  for (const Collector* c : collectors) c->Collect(out);
  std::stable_sort(out.begin(), out.end(),
                   [](const MetricFamily& a, const MetricFamily& b) { return a.name < b.name; });
  return out;
}

}  // namespace tessera::metrics
