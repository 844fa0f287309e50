// Registry: live Prometheus instruments (counters, gauges, histograms with labels) and
// collectors that produce families at scrape time.
//
// The number of labels is part of an instrument's type (CounterVec<2> takes two label
// values), so a call with the wrong arity does not compile. Children are kept in ordered
// maps: a scrape lists them sorted by label values, never in hash order. Every instrument
// and the registry are thread-safe; a scrape may run while the server observes.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "metrics/exposition.h"

namespace tessera::metrics {

template <size_t N>
using LabelValues = std::array<std::string, N>;

// Something that contributes families to a scrape.
class Collector {
 public:
  virtual ~Collector() = default;
  virtual void Collect(std::vector<MetricFamily>& out) const = 0;
};

namespace internal {
template <size_t N>
Labels Zip(const std::array<std::string, N>& names, const LabelValues<N>& values) {
  Labels out;
  out.reserve(N);
  for (size_t i = 0; i < N; ++i) out.emplace_back(names[i], values[i]);
  return out;
}
}  // namespace internal

namespace internal {
// What counters and gauges share: one double per label set, listed sorted in a scrape.
template <size_t N>
class ValueVec : public Collector {
 public:
  ValueVec(std::string name, std::string help, std::array<std::string, N> label_names,
           MetricType type)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        type_(type) {}
  double Get(const LabelValues<N>& labels) const {
    std::lock_guard lock(mu_);
    auto it = values_.find(labels);
    return it == values_.end() ? 0 : it->second;
  }
  void Collect(std::vector<MetricFamily>& out) const override {
    MetricFamily f{name_, help_, type_, {}};
    std::lock_guard lock(mu_);
    for (const auto& [labels, v] : values_) {
      f.samples.push_back({"", Zip(label_names_, labels), v});
    }
    out.push_back(std::move(f));
  }

 protected:
  mutable std::mutex mu_;
  std::map<LabelValues<N>, double> values_;

 private:
  const std::string name_, help_;
  const std::array<std::string, N> label_names_;
  const MetricType type_;
};
}  // namespace internal

// A family of monotonically increasing values.
template <size_t N>
class CounterVec final : public internal::ValueVec<N> {
 public:
  CounterVec(std::string name, std::string help, std::array<std::string, N> label_names)
      : internal::ValueVec<N>(std::move(name), std::move(help), std::move(label_names),
                              MetricType::kCounter) {}
  // Adds v (ignored unless v >= 0: a counter never goes down).
  void Add(const LabelValues<N>& labels, double v = 1) {
    if (!(v >= 0)) return;
    std::lock_guard lock(this->mu_);
    this->values_[labels] += v;
  }
  // For a counter that mirrors an exact total kept elsewhere (e.g. integer micro-units):
  // raises the value to `total`; never lowers it.
  void Reach(const LabelValues<N>& labels, double total) {
    std::lock_guard lock(this->mu_);
    double& v = this->values_[labels];
    if (total > v) v = total;
  }
};

// A family of values that go up and down. Clear() drops every child, for gauges that are
// recomputed from scratch (series of a deleted node disappear).
template <size_t N>
class GaugeVec final : public internal::ValueVec<N> {
 public:
  GaugeVec(std::string name, std::string help, std::array<std::string, N> label_names)
      : internal::ValueVec<N>(std::move(name), std::move(help), std::move(label_names),
                              MetricType::kGauge) {}
  void Set(const LabelValues<N>& labels, double v) {
    std::lock_guard lock(this->mu_);
    this->values_[labels] = v;
  }
  void Add(const LabelValues<N>& labels, double v) {
    std::lock_guard lock(this->mu_);
    this->values_[labels] += v;
  }
  // Replaces every child at once (one lock: a scrape never sees half of an update).
  void Replace(std::map<LabelValues<N>, double> values) {
    std::lock_guard lock(this->mu_);
    this->values_ = std::move(values);
  }
  void Clear() { Replace({}); }
};

struct HistogramData {
  std::vector<uint64_t> counts;  // per bucket, not cumulative; last one is +Inf
  double sum = 0;
  uint64_t count = 0;
};

// A family of distributions over fixed upper bounds (le), cumulative in the exposition.
template <size_t N>
class HistogramVec final : public Collector {
 public:
  HistogramVec(std::string name, std::string help, std::array<std::string, N> label_names,
               std::vector<double> bounds)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}
  void Observe(const LabelValues<N>& labels, double v) {
    size_t bucket = 0;
    while (bucket < bounds_.size() && v > bounds_[bucket]) ++bucket;
    std::lock_guard lock(mu_);
    HistogramData& d = data_[labels];
    if (d.counts.empty()) d.counts.assign(bounds_.size() + 1, 0);
    d.counts[bucket]++;
    d.sum += v;
    d.count++;
  }
  HistogramData Get(const LabelValues<N>& labels) const {
    std::lock_guard lock(mu_);
    auto it = data_.find(labels);
    if (it != data_.end()) return it->second;
    HistogramData empty;
    empty.counts.assign(bounds_.size() + 1, 0);
    return empty;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  void Collect(std::vector<MetricFamily>& out) const override {
    MetricFamily f{name_, help_, MetricType::kHistogram, {}};
    std::lock_guard lock(mu_);
    for (const auto& [labels, d] : data_) {
      Labels base = internal::Zip(label_names_, labels);
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= bounds_.size(); ++b) {
        cumulative += d.counts[b];
        Labels l = base;
        l.emplace_back("le", b < bounds_.size() ? FormatValue(bounds_[b]) : "+Inf");
        f.samples.push_back({"_bucket", std::move(l), static_cast<double>(cumulative)});
      }
      f.samples.push_back({"_sum", base, d.sum});
      f.samples.push_back({"_count", base, static_cast<double>(d.count)});
    }
    out.push_back(std::move(f));
  }

 private:
  const std::string name_, help_;
  const std::array<std::string, N> label_names_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<LabelValues<N>, HistogramData> data_;
};

// Owns instruments and refers to collectors; Collect() gathers everything sorted by name.
class Registry {
 public:
  template <size_t N>
  StatusOr<CounterVec<N>*> AddCounter(const std::string& name, const std::string& help,
                                      std::array<std::string, N> label_names) {
    TESSERA_RETURN_IF_ERROR(CheckNew(name, label_names.data(), N, MetricType::kCounter));
    return Own(std::make_unique<CounterVec<N>>(name, help, std::move(label_names)), name);
  }
  template <size_t N>
  StatusOr<GaugeVec<N>*> AddGauge(const std::string& name, const std::string& help,
                                  std::array<std::string, N> label_names) {
    TESSERA_RETURN_IF_ERROR(CheckNew(name, label_names.data(), N, MetricType::kGauge));
    return Own(std::make_unique<GaugeVec<N>>(name, help, std::move(label_names)), name);
  }
  // Bounds must be finite and strictly increasing; +Inf is implied.
  template <size_t N>
  StatusOr<HistogramVec<N>*> AddHistogram(const std::string& name, const std::string& help,
                                          std::array<std::string, N> label_names,
                                          std::vector<double> bounds) {
    TESSERA_RETURN_IF_ERROR(CheckNew(name, label_names.data(), N, MetricType::kHistogram));
    TESSERA_RETURN_IF_ERROR(CheckBounds(name, bounds));
    return Own(
        std::make_unique<HistogramVec<N>>(name, help, std::move(label_names), std::move(bounds)),
        name);
  }
  // A collector owned elsewhere; it must outlive the registry's last Collect().
  void AddCollector(const Collector* collector);

  // Every family, sorted by name (ties keep registration order).
  std::vector<MetricFamily> Collect() const;
  std::string RenderText() const { return metrics::RenderText(Collect()); }

 private:
  Status CheckNew(const std::string& name, const std::string* labels, size_t n,
                  MetricType type) const;
  static Status CheckBounds(const std::string& name, const std::vector<double>& bounds);
  template <typename T>
  T* Own(std::unique_ptr<T> p, const std::string& name) {
    T* raw = p.get();
    std::lock_guard lock(mu_);
    names_.push_back(name);
    owned_.push_back(std::move(p));
    collectors_.push_back(raw);
    return raw;
  }

  mutable std::mutex mu_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Collector>> owned_;
  std::vector<const Collector*> collectors_;
};

}  // namespace tessera::metrics
