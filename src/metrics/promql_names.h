// PromQL metric names: which series names an expression selects.
//
// Enough of PromQL's lexical structure to find metric names in the expressions of alert
// rules and dashboards, so that tests can check them against what Tessera exports: strings,
// label matchers {...}, ranges [...], numbers and durations, functions and aggregations
// (an identifier followed by "("), keywords and binary operators, the label lists of by,
// without, on, ignoring, group_left and group_right, and Grafana variables ($x, ${x},
// [[x]]). Stateless; thread-safe.
#pragma once

#include <set>
#include <string>

#include "common/status.h"

namespace tessera::metrics {

// The metric names an expression selects, sorted. Fails on an unterminated string,
// bracket or brace, naming the position.
StatusOr<std::set<std::string>> PromQLMetricNames(const std::string& expr);

}  // namespace tessera::metrics
