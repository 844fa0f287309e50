// Every PromQL expression that Tessera ships (Grafana dashboard, Prometheus alert rules)
// selects only metric names that Tessera really exports.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "metrics/cluster_metrics.h"
#include "metrics/promql_names.h"
#include "model/codec.h"

namespace tessera::metrics {
namespace {

std::string SourcePath(const std::string& rel) {
  const char* root = std::getenv("TESSERA_SOURCE_DIR");
  return (root ? std::string(root) + "/" : std::string()) + rel;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Names Prometheus itself makes, that any expression may use.
bool IsPrometheusOwn(const std::string& name) {
  return name == "up" || name == "scrape_duration_seconds" || name == "ALERTS";
}

using Exported = std::map<std::string, MetricType>;

// What a Tessera server exports: every family with its type.
Exported ExportedFamilies() {
  Exported out;
  ClusterMetrics m;
  for (const MetricFamily& f : m.registry().Collect()) out[f.name] = f.type;
  EXPECT_EQ(out.size(), ClusterMetrics::ExportedNames().size());
  return out;
}

// The first name that Tessera does not export, or "" when all are exported.
std::string UnknownName(const std::set<std::string>& used, const Exported& exported) {
  for (const std::string& name : used) {
    if (IsPrometheusOwn(name) || exported.count(name)) continue;
    bool histogram_part = false;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() <= s.size() || name.compare(name.size() - s.size(), s.size(), s) != 0) {
        continue;
      }
      auto it = exported.find(name.substr(0, name.size() - s.size()));
      if (it != exported.end() && it->second == MetricType::kHistogram) histogram_part = true;
    }
    if (!histogram_part) return name;
  }
  return "";
}

// Collects every "expr" in panels (nested rows too) and every Prometheus templating query.
void CollectExpressions(const Json& node, const std::string& path,
                        std::vector<std::pair<std::string, std::string>>& out) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string p = path + "." + it.key();
      if (it.key() == "expr" && it->is_string()) {
        out.emplace_back(p, it->get<std::string>());
      } else {
        CollectExpressions(*it, p, out);
      }
    }
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      CollectExpressions(node[i], path + "[" + std::to_string(i) + "]", out);
    }
  }
}

// Grafana's label_values(metric, label) is not PromQL; the metric is what matters.
std::string TemplatingQueryExpr(const std::string& q) {
  const std::string prefix = "label_values(";
  if (q.rfind(prefix, 0) != 0) return q;
  const size_t comma = q.rfind(',');
  return comma == std::string::npos ? q.substr(prefix.size(), q.size() - prefix.size() - 1)
                                    : q.substr(prefix.size(), comma - prefix.size());
}

TEST(ShippedQueriesTest, UnknownNameIsCaught) {
  // The checker itself can fail: a name Tessera does not export is reported.
  const Exported exported = ExportedFamilies();
  EXPECT_EQ(UnknownName({"tessera_jobs", "tessera_job_queue_wait_seconds_bucket", "up"}, exported),
            "");
  EXPECT_EQ(UnknownName({"kube_pod_status_phase"}, exported), "kube_pod_status_phase");
  EXPECT_EQ(UnknownName({"tessera_jobs_bucket"}, exported), "tessera_jobs_bucket");
}

TEST(ShippedQueriesTest, GrafanaDashboardUsesOnlyExportedMetrics) {
  const std::string path = SourcePath("deploy/grafana/tessera-dashboard.json");
  const std::string text = ReadFile(path);
  ASSERT_FALSE(text.empty()) << "cannot read " << path;
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << path << " is not JSON";

  std::vector<std::pair<std::string, std::string>> exprs;
  CollectExpressions(doc["panels"], "panels", exprs);
  const size_t panel_exprs = exprs.size();
  for (const Json& var : doc["templating"]["list"]) {
    if (var.value("type", "") != "query") continue;
    const Json& q = var["query"];
    const std::string query = q.is_string() ? q.get<std::string>() : q.value("query", "");
    exprs.emplace_back("templating." + var.value("name", "?"), TemplatingQueryExpr(query));
  }
  // Not vacuous: the dashboard has real panels with queries.
  ASSERT_GE(panel_exprs, 10u);

  const Exported exported = ExportedFamilies();
  std::set<std::string> all_used;
  for (const auto& [where, expr] : exprs) {
    auto names = PromQLMetricNames(expr);
    ASSERT_TRUE(names.ok()) << where << ": " << names.status().ToString();
    EXPECT_FALSE(names->empty()) << where << " selects no metric: " << expr;
    EXPECT_EQ(UnknownName(*names, exported), "") << where << ": " << expr;
    all_used.insert(names->begin(), names->end());
    // NVML reads 0 % utilisation on MIG devices: an "idle GPU" query that does not leave them
    // out (as the IdleGpuAllocated alert does) counts every busy MIG GPU as idle.
    if (names->count("DCGM_FI_DEV_GPU_UTIL") && names->count("tessera_gpu_allocated_ratio")) {
      EXPECT_NE(expr.find("unless on (node, gpu) tessera_gpu_mig_instances"), std::string::npos)
          << where << ": " << expr;
    }
  }
  // The headline metrics are on the dashboard.
  for (const char* want : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                           "tessera_pending_jobs", "tessera_jobs", "tessera_queue_cost_total",
                           "tessera_job_queue_wait_seconds_bucket",
                           "tessera_scheduling_cycle_duration_seconds_bucket"}) {
    EXPECT_TRUE(all_used.count(want)) << want << " is not on the dashboard";
  }
}

TEST(ShippedQueriesTest, AlertRulesUseOnlyExportedMetrics) {
  const std::string path = SourcePath("deploy/prometheus/tessera-rules.yml");
  auto doc = LoadYamlFile(path);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const Exported exported = ExportedFamilies();
  std::set<std::string> alerts;
  for (const Json& group : (*doc)["groups"]) {
    for (const Json& rule : group["rules"]) {
      const std::string name =
          rule.contains("alert") ? rule["alert"].get<std::string>() : rule.value("record", "?");
      auto names = PromQLMetricNames(rule["expr"].get<std::string>());
      ASSERT_TRUE(names.ok()) << name << ": " << names.status().ToString();
      EXPECT_EQ(UnknownName(*names, exported), "") << name;
      if (rule.contains("alert")) alerts.insert(name);
    }
  }
  for (const char* want : {"HighGpuUtilization", "TaskPendingTooLong", "NodeNotReady",
                           "IdleGpuAllocated", "QueueOverLimit"}) {
    EXPECT_TRUE(alerts.count(want)) << want;
  }
}

}  // namespace
}  // namespace tessera::metrics
