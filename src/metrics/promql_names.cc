#include "metrics/promql_names.h"

#include <cctype>

namespace tessera::metrics {
namespace {

bool IdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IdentChar(char c) { return IdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

bool IsKeyword(const std::string& w) {
  static const std::set<std::string> kKeywords = {"and",   "or",  "unless", "bool", "offset",
                                                  "atan2", "inf", "nan",    "Inf",  "NaN"};
  return kKeywords.count(w) > 0;
}
// Aggregation operators may be followed by a by/without clause before their "(".
bool IsAggregation(const std::string& w) {
  static const std::set<std::string> kAggregations = {
      "sum",   "min",  "max",     "avg",          "group",    "stddev", "stdvar",
      "count", "topk", "bottomk", "count_values", "quantile", "limitk", "limit_ratio"};
  return kAggregations.count(w) > 0;
}
bool TakesLabelList(const std::string& w) {
  return w == "by" || w == "without" || w == "on" || w == "ignoring" || w == "group_left" ||
         w == "group_right";
}

// Skips from an opening quote to past its closing quote; returns false if unterminated.
bool SkipString(const std::string& s, size_t& i) {
  const char quote = s[i++];
  while (i < s.size()) {
    if (s[i] == '\\' && quote != '`') {
      i += 2;
      continue;
    }
    if (s[i++] == quote) return true;
  }
  return false;
}

// Skips a balanced group that opens at s[i] (one of "{[(") and may contain strings.
bool SkipGroup(const std::string& s, size_t& i) {
  const char open = s[i];
  const char close = open == '{' ? '}' : open == '[' ? ']' : ')';
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      if (!SkipString(s, i)) return false;
      continue;
    }
    if (c == open) depth++;
    if (c == close && --depth == 0) {
      ++i;
      return true;
    }
    ++i;
  }
  return false;
}

}  // namespace

StatusOr<std::set<std::string>> PromQLMetricNames(const std::string& expr) {
  std::set<std::string> names;
  size_t i = 0;
  auto error = [&](const char* what, size_t at) {
    return InvalidArgument("PromQL \"" + expr + "\": " + what + " at offset " + std::to_string(at));
  };
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      const size_t at = i;
      if (!SkipString(expr, i)) return error("unterminated string", at);
    } else if (c == '{' || c == '[') {
      const size_t at = i;
      // Grafana's old [[var]] syntax is skipped like a range.
      if (!SkipGroup(expr, i)) return error("unbalanced bracket", at);
    } else if (c == '$') {
      ++i;
      if (i < expr.size() && expr[i] == '{') {
        const size_t at = i;
        if (!SkipGroup(expr, i)) return error("unbalanced ${", at);
      } else {
        while (i < expr.size() && IdentChar(expr[i])) ++i;
      }
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < expr.size() &&
                std::isdigit(static_cast<unsigned char>(expr[i + 1])))) {
      // Numbers, durations (5m, 1h30m), hex, exponents.
      while (i < expr.size() &&
             (IdentChar(expr[i]) || expr[i] == '.' ||
              ((expr[i] == '+' || expr[i] == '-') && (expr[i - 1] == 'e' || expr[i - 1] == 'E')))) {
        ++i;
      }
    } else if (IdentStart(c)) {
      const size_t start = i;
      while (i < expr.size() && IdentChar(expr[i])) ++i;
      const std::string word = expr.substr(start, i - start);
      size_t j = i;
      while (j < expr.size() && std::isspace(static_cast<unsigned char>(expr[j]))) ++j;
      const bool call = j < expr.size() && expr[j] == '(';
      if (TakesLabelList(word)) {
        if (call) {
          i = j;
          const size_t at = i;
          if (!SkipGroup(expr, i)) return error("unbalanced label list", at);
        }
      } else if (!call && !IsKeyword(word) && !IsAggregation(word)) {
        names.insert(word);
      }
    } else {
      ++i;
    }
  }
  return names;
}

}  // namespace tessera::metrics
