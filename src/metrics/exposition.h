// Exposition: metric families as plain values, and the Prometheus text format 0.0.4.
//
// A MetricFamily is what one scrape shows for one metric name: its HELP, its TYPE and its
// samples. Histogram samples carry their suffix (_bucket, _sum, _count). RenderText writes
// families in the order given, samples in the order given, so callers that keep their
// families and label sets in ordered containers get byte-identical output for equal state.
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };
const char* MetricTypeName(MetricType t);

// Label pairs in a fixed order (the family's label names, then e.g. "le").
using Labels = std::vector<std::pair<std::string, std::string>>;

struct Sample {
  std::string suffix;  // "", "_bucket", "_sum", "_count"
  Labels labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(const std::string& name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus).
bool IsValidLabelName(const std::string& name);

// Prometheus spellings of a value: integers without a fraction, "+Inf", "-Inf", "NaN",
// other values with enough digits to round-trip.
std::string FormatValue(double v);
std::string EscapeLabelValue(const std::string& v);  // \\, \", \n
std::string EscapeHelp(const std::string& v);        // \\, \n

// The text exposition format, version 0.0.4 (Content-Type below). A family with no samples
// still shows its HELP and TYPE, so that every exported name is discoverable.
std::string RenderText(const std::vector<MetricFamily>& families);
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Checks names, label names, suffixes against the type, and that no name appears twice.
// The first problem is named: "families[3] (tessera_jobs).samples[0].labels[1]: ...".
Status Validate(const std::vector<MetricFamily>& families);

}  // namespace tessera::metrics
