#include "metrics/exposition.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace tessera::metrics {

const char* MetricTypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

namespace {
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

bool IsValidMetricName(const std::string& name) {
  if (name.empty() || !(IsAlpha(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!(IsAlpha(c) || IsDigit(c) || c == ':')) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || !IsAlpha(name[0]) || name.rfind("__", 0) == 0) return false;
  for (char c : name) {
    if (!(IsAlpha(c) || IsDigit(c))) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integral values that a double holds exactly print without exponent or fraction.
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Prefer the shortest spelling that reads back to the same double.
  for (int precision = 6; precision < 17; ++precision) {
    char shorter[40];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderText(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    out += "# HELP " + f.name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + f.name + " " + MetricTypeName(f.type) + "\n";
    for (const Sample& s : f.samples) {
      out += f.name;
      out += s.suffix;
      if (!s.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += s.labels[i].first + "=\"" + EscapeLabelValue(s.labels[i].second) + "\"";
        }
        out += '}';
      }
      out += ' ';
      out += FormatValue(s.value);
      out += '\n';
    }
  }
  return out;
}

Status Validate(const std::vector<MetricFamily>& families) {
  std::set<std::string> seen;
  for (size_t i = 0; i < families.size(); ++i) {
    const MetricFamily& f = families[i];
    const std::string path = "families[" + std::to_string(i) + "] (" + f.name + ")";
    if (!IsValidMetricName(f.name)) return InvalidArgument(path + ".name: not a valid metric name");
    if (!seen.insert(f.name).second) return InvalidArgument(path + ".name: appears twice");
    for (size_t j = 0; j < f.samples.size(); ++j) {
      const Sample& s = f.samples[j];
      const std::string spath = path + ".samples[" + std::to_string(j) + "]";
      const bool histogram = f.type == MetricType::kHistogram;
      if (histogram ? !(s.suffix == "_bucket" || s.suffix == "_sum" || s.suffix == "_count")
                    : !s.suffix.empty()) {
        return InvalidArgument(spath + ".suffix: \"" + s.suffix + "\" does not fit a " +
                               MetricTypeName(f.type));
      }
      std::set<std::string> names;
      for (size_t k = 0; k < s.labels.size(); ++k) {
        const std::string& label = s.labels[k].first;
        const std::string lpath = spath + ".labels[" + std::to_string(k) + "]";
        if (!IsValidLabelName(label)) {
          return InvalidArgument(lpath + ": \"" + label + "\" is not a valid label name");
        }
        if (!names.insert(label).second)
          return InvalidArgument(lpath + ": \"" + label + "\" twice");
      }
      if (histogram && (s.suffix == "_bucket") != names.count("le")) {
        return InvalidArgument(spath + ": only _bucket samples carry \"le\"");
      }
      if (f.type == MetricType::kCounter && !(s.value >= 0)) {
        return InvalidArgument(spath + ".value: a counter cannot be negative or NaN");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::metrics
