#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tessera::sim {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, RoundHalfEven(v, decimals));
  if (std::string(buf) == "-0.00" || std::string(buf) == "-0")
    return decimals ? "0." + std::string(decimals, '0') : "0";
  return buf;
}

namespace {

double R2(double v) { return RoundHalfEven(v, 2); }

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// ---- a small SVG line chart ----
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                         "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct Line {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
};

struct ChartSpec {
  std::string title, x_label, y_label;
  bool log_x = false;
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;  // 0,0 = from data
  std::vector<double> x_ticks;                        // empty = automatic
  std::vector<std::string> x_tick_labels;
};

ChartSpec Spec(std::string title, std::string x_label, std::string y_label) {
  ChartSpec c;
  c.title = std::move(title);
  c.x_label = std::move(x_label);
  c.y_label = std::move(y_label);
  return c;
}

std::vector<double> NiceTicks(double lo, double hi, int n = 5) {
  if (hi <= lo) return {lo};
  double raw = (hi - lo) / n;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string TickLabel(double v) {
  double a = std::fabs(v);
  if (a >= 1e6 && std::fmod(a, 1e6) == 0) return Fixed(v / 1e6, 0) + "M";
  if (a >= 1e4 && std::fmod(a, 1e3) == 0) return Fixed(v / 1e3, 0) + "k";
  if (std::fabs(v - std::round(v)) < 1e-9) return Fixed(v, 0);
  return Fixed(v, 1);
}

std::string LineChart(const ChartSpec& spec, const std::vector<Line>& lines) {
  const double W = 640, H = 340, L = 64, Rm = 16, T = 36, B = 48;
  double x0 = spec.x_min, x1 = spec.x_max, y0 = spec.y_min, y1 = spec.y_max;
  if (x0 == 0 && x1 == 0) {
    bool first = true;
    for (const auto& l : lines)
      for (auto [x, y] : l.points) {
        if (spec.log_x && x <= 0) continue;
        if (first) x0 = x1 = x, first = false;
        x0 = std::min(x0, x);
        x1 = std::max(x1, x);
      }
  }
  if (y0 == 0 && y1 == 0)
    for (const auto& l : lines)
      for (auto [x, y] : l.points) y1 = std::max(y1, y);
  if (y1 <= y0) y1 = y0 + 1;
  if (x1 <= x0) x1 = x0 + 1;
  auto fx = [&](double x) {
    if (spec.log_x) {
      double lx = std::log10(std::max(x, x0)), l0 = std::log10(x0), l1 = std::log10(x1);
      return L + (lx - l0) / (l1 - l0) * (W - L - Rm);
    }
    return L + (x - x0) / (x1 - x0) * (W - L - Rm);
  };
  auto fy = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"11\">";
  s << "<text x=\"" << W / 2
    << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">"
    << Escape(spec.title) << "</text>";
  // Grid and ticks.
  for (double v : NiceTicks(y0, y1)) {
    s << "<line x1=\"" << L << "\" x2=\"" << W - Rm << "\" y1=\"" << Fixed(fy(v), 1) << "\" y2=\""
      << Fixed(fy(v), 1) << "\" stroke=\"#e5e5e5\"/>";
    s << "<text x=\"" << L - 6 << "\" y=\"" << Fixed(fy(v) + 4, 1) << "\" text-anchor=\"end\">"
      << TickLabel(v) << "</text>";
  }
  std::vector<double> xt = spec.x_ticks;
  std::vector<std::string> xl = spec.x_tick_labels;
  if (xt.empty()) {
    if (spec.log_x) {
      for (double v = std::pow(10.0, std::ceil(std::log10(x0))); v <= x1 * 1.0001; v *= 10)
        xt.push_back(v);
    } else {
      xt = NiceTicks(x0, x1);
    }
  }
  for (size_t i = 0; i < xt.size(); ++i) {
    double v = xt[i];
    if (v < x0 || v > x1) continue;
    s << "<line x1=\"" << Fixed(fx(v), 1) << "\" x2=\"" << Fixed(fx(v), 1) << "\" y1=\"" << T
      << "\" y2=\"" << H - B << "\" stroke=\"#f0f0f0\"/>";
    s << "<text x=\"" << Fixed(fx(v), 1) << "\" y=\"" << H - B + 16 << "\" text-anchor=\"middle\">"
      << Escape(i < xl.size() ? xl[i] : TickLabel(v)) << "</text>";
  }
  s << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - Rm << "\" height=\""
    << H - T - B << "\" fill=\"none\" stroke=\"#888\"/>";
  s << "<text x=\"" << (L + W - Rm) / 2 << "\" y=\"" << H - 10 << "\" text-anchor=\"middle\">"
    << Escape(spec.x_label) << "</text>";
  s << "<text transform=\"translate(14," << (T + H - B) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << Escape(spec.y_label) << "</text>";
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const char* c = kColors[i % (sizeof kColors / sizeof *kColors)];
    s << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"1.6\""
      << (l.dashed ? " stroke-dasharray=\"5,3\"" : "") << " points=\"";
    for (auto [x, y] : l.points) {
      if (spec.log_x && x <= 0) continue;
      if (x < x0 || x > x1) continue;
      s << Fixed(fx(x), 1) << "," << Fixed(fy(std::clamp(y, y0, y1)), 1) << " ";
    }
    s << "\"/>";
    // Legend, top-left inside the plot.
    double ly = T + 14 + 15 * static_cast<double>(i);
    s << "<line x1=\"" << L + 10 << "\" x2=\"" << L + 30 << "\" y1=\"" << ly << "\" y2=\"" << ly
      << "\" stroke=\"" << c << "\" stroke-width=\"2\""
      << (l.dashed ? " stroke-dasharray=\"5,3\"" : "") << "/>";
    s << "<text x=\"" << L + 36 << "\" y=\"" << ly + 4 << "\">" << Escape(l.name) << "</text>";
  }
  s << "</svg>";
  return s.str();
}

// Horizontal bars: one group per category, one bar per series.
std::string BarChart(const std::string& title, const std::string& unit,
                     const std::vector<std::string>& categories,
                     const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  // The legend wraps: as many 130-px entries per row as the width holds.
  const double W = 640, L = 120, Rm = 60, bar = 9, gap = 8, entry = 130;
  const size_t per_row = static_cast<size_t>((W - 20) / entry);
  const double legend_rows = static_cast<double>((series.size() + per_row - 1) / per_row);
  const double T = 26 + 14 * std::max(1.0, legend_rows);
  const double group = bar * static_cast<double>(series.size()) + gap;
  const double H = T + group * static_cast<double>(categories.size()) + 20;
  double mx = 0;
  for (const auto& [n, v] : series)
    for (double x : v) mx = std::max(mx, x);
  if (mx <= 0) mx = 1;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << Fixed(H, 0)
    << "\" viewBox=\"0 0 " << W << " " << Fixed(H, 0)
    << "\" font-family=\"sans-serif\" font-size=\"11\">";
  s << "<text x=\"" << W / 2
    << "\" y=\"16\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" << Escape(title)
    << "</text>";
  for (size_t k = 0; k < series.size(); ++k) {
    double lx = 10 + entry * static_cast<double>(k % per_row);
    double ly = 24 + 14 * static_cast<double>(k / per_row);
    s << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"10\" height=\"10\" fill=\""
      << kColors[k % 8] << "\"/>";
    s << "<text x=\"" << lx + 14 << "\" y=\"" << ly + 9 << "\">" << Escape(series[k].first)
      << "</text>";
  }
  for (size_t c = 0; c < categories.size(); ++c) {
    double gy = T + group * static_cast<double>(c);
    s << "<text x=\"" << L - 6 << "\" y=\"" << Fixed(gy + group / 2, 1) << "\" text-anchor=\"end\">"
      << Escape(categories[c]) << "</text>";
    for (size_t k = 0; k < series.size(); ++k) {
      double v = c < series[k].second.size() ? series[k].second[c] : 0;
      double w = v / mx * (W - L - Rm);
      double y = gy + bar * static_cast<double>(k);
      s << "<rect x=\"" << L << "\" y=\"" << Fixed(y, 1) << "\" width=\"" << Fixed(w, 1)
        << "\" height=\"" << bar - 1 << "\" fill=\"" << kColors[k % 8] << "\"/>";
      s << "<text x=\"" << Fixed(L + w + 4, 1) << "\" y=\"" << Fixed(y + bar - 1, 1)
        << "\" font-size=\"9\">" << Fixed(v, 1) << unit << "</text>";
    }
  }
  s << "</svg>";
  return s.str();
}

const char* kStyle =
    "<style>body{font-family:sans-serif;max-width:1340px;margin:24px auto;color:#222}"
    "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px "
    "10px;text-align:right}"
    "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-"
    "wrap:wrap;gap:16px}"
    ".note{color:#666;font-size:13px}</style>";

std::string Duration(int64_t s) {
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return Fixed(static_cast<double>(s) / 60.0, 1) + " min";
  if (s < 172800) return Fixed(static_cast<double>(s) / 3600.0, 1) + " h";
  return Fixed(static_cast<double>(s) / 86400.0, 1) + " d";
}

Json CurveJson(const AllocCurve& c) {
  Json a = Json::array();
  for (const auto& v : c.allocated) a.push_back(v ? Json(R2(*v)) : Json(nullptr));
  return a;
}

Json Unalloc(const AllocCurve& c, int x) {
  auto u = c.UnallocatedAt(x);
  return u ? Json(R2(*u)) : Json(nullptr);
}

}  // namespace

AllocCurve MedianCurve(const std::vector<FgdSeedResult>& seeds) {
  AllocCurve m;
  if (seeds.empty()) return m;
  size_t n = seeds.front().run.curve.allocated.size();
  m.allocated.assign(n, std::nullopt);
  for (size_t x = 0; x < n; ++x) {
    std::vector<double> v;
    for (const auto& s : seeds)
      if (x < s.run.curve.allocated.size() && s.run.curve.allocated[x])
        v.push_back(*s.run.curve.allocated[x]);
    if (v.size() == seeds.size()) m.allocated[x] = RoundHalfEven(Median(v), 3);
  }
  return m;
}

Json FgdReportToJson(const FgdReport& r) {
  Json j = Json::object();
  j["protocol"] = "fgd";
  j["nodes"] = r.nodes_file;
  j["pods"] = r.pods_file;
  j["loadPercent"] = r.load_percent;
  j["exactOrder"] = r.exact_order;
  j["arrivalOrderFile"] = r.arrival_order_file.empty() ? Json(nullptr) : Json(r.arrival_order_file);
  j["nodeOrderFile"] = r.node_order_file.empty() ? Json(nullptr) : Json(r.node_order_file);
  j["totalGpus"] = r.total_gpus;
  j["metric"] =
      "unallocated GPU % = 100 - allocated GPU % at the given arrived GPU load (FGD-PROTOCOL.md "
      "s.5)";
  Json pols = Json::array();
  for (const FgdPolicyResult& p : r.policies) {
    Json pj = Json::object();
    pj["policy"] = p.policy;
    std::vector<double> at100;
    Json seeds = Json::array();
    for (const FgdSeedResult& s : p.seeds) {
      Json sj = Json::object();
      sj["seed"] = s.seed;
      sj["unallocatedAt100"] = Unalloc(s.run.curve, 100);
      sj["arrivedPods"] = s.run.arrived;
      sj["placedPods"] = s.run.placed;
      sj["failedPods"] = s.run.failed;
      sj["failedGpuMilli"] = s.run.failed_gpu_milli;
      sj["allocatedPercent"] = CurveJson(s.run.curve);
      seeds.push_back(sj);
      if (auto u = s.run.curve.UnallocatedAt(100)) at100.push_back(*u);
    }
    pj["medianUnallocatedAt100"] =
        at100.size() == p.seeds.size() && !at100.empty() ? Json(R2(Median(at100))) : Json(nullptr);
    pj["medianAllocatedPercent"] = CurveJson(p.median);
    pj["seeds"] = seeds;
    pols.push_back(pj);
  }
  j["policies"] = pols;
  return j;
}

std::string FgdReportCsv(const FgdReport& r) {
  std::ostringstream s;
  s << "policy,seed,arrived_percent,allocated_percent,unallocated_percent\n";
  for (const FgdPolicyResult& p : r.policies) {
    auto rows = [&](const std::string& seed, const AllocCurve& c) {
      for (size_t x = 0; x < c.allocated.size(); ++x) {
        if (!c.allocated[x]) continue;
        s << p.policy << "," << seed << "," << x << "," << Fixed(*c.allocated[x], 2) << ","
          << Fixed(100.0 - *c.allocated[x], 2) << "\n";
      }
    };
    for (const FgdSeedResult& sd : p.seeds) rows(std::to_string(sd.seed), sd.run.curve);
    if (p.seeds.size() > 1) rows("median", p.median);
  }
  return s.str();
}

std::string FgdReportHtml(const FgdReport& r) {
  std::ostringstream s;
  s << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tessera sim fgd</title>" << kStyle
    << "</head><body>";
  s << "<h1>FGD protocol: unallocated GPUs as load arrives</h1>";
  // What was run: each of the two random inputs (arrival order, node tie-break names) came
  // either from a file or from Tessera's seeded Rng; say which, by name.
  std::string seeds;
  if (!r.policies.empty())
    for (const FgdSeedResult& sd : r.policies.front().seeds)
      seeds += (seeds.empty() ? "" : ", ") + std::to_string(sd.seed);
  const std::string rng = "Tessera's seeded Rng (seed" +
                          std::string(seeds.find(',') == std::string::npos ? " " : "s ") + seeds +
                          "; not Go's math/rand)";
  s << "<p class=\"note\">nodes " << Escape(r.nodes_file) << " (" << r.total_gpus << " GPUs), pods "
    << Escape(r.pods_file) << ", arrival only, failed pods dropped. ";
  if (!r.arrival_order_file.empty())
    s << "Arrival order from " << Escape(r.arrival_order_file) << " (" << r.load_percent
      << " % of GPU capacity arrives).";
  else
    s << "Pods shuffled and cloned to " << r.load_percent << " % of GPU capacity by " << rng << ".";
  if (!r.node_order_file.empty())
    s << " Node tie-break names from " << Escape(r.node_order_file) << ".";
  else
    s << " Node tie-break names permuted by " << rng << ".";
  s << "</p>";
  s << "<table><tr><th>policy</th><th>seeds</th><th>unallocated GPU % at 100 % load (median)</th>"
       "<th>min</th><th>max</th><th>failed pods (median)</th></tr>";
  for (const FgdPolicyResult& p : r.policies) {
    std::vector<double> u, f;
    for (const auto& sd : p.seeds) {
      if (auto v = sd.run.curve.UnallocatedAt(100)) u.push_back(*v);
      f.push_back(static_cast<double>(sd.run.failed));
    }
    s << "<tr><td>" << Escape(p.policy) << "</td><td>" << p.seeds.size() << "</td><td><b>"
      << (u.empty() ? "-" : Fixed(Median(u), 2)) << "</b></td><td>"
      << (u.empty() ? "-" : Fixed(*std::min_element(u.begin(), u.end()), 2)) << "</td><td>"
      << (u.empty() ? "-" : Fixed(*std::max_element(u.begin(), u.end()), 2)) << "</td><td>"
      << Fixed(Median(f), 0) << "</td></tr>";
  }
  s << "</table><div class=\"charts\">";
  std::vector<Line> unalloc, alloc;
  for (const FgdPolicyResult& p : r.policies) {
    Line a{p.policy, {}, false}, u{p.policy, {}, false};
    for (size_t x = 0; x < p.median.allocated.size(); ++x)
      if (p.median.allocated[x]) {
        a.points.push_back({static_cast<double>(x), *p.median.allocated[x]});
        if (x >= 50) u.points.push_back({static_cast<double>(x), 100.0 - *p.median.allocated[x]});
      }
    alloc.push_back(a);
    unalloc.push_back(u);
  }
  ChartSpec cu = Spec("Unallocated GPU % (median over seeds)", "arrived GPU load (% of capacity)",
                      "unallocated GPU %");
  cu.x_min = 50;
  cu.x_max = static_cast<double>(r.load_percent);
  cu.y_min = 0;
  cu.y_max = 60;
  s << LineChart(cu, unalloc);
  ChartSpec ca = Spec("Allocated GPU % (median over seeds)", "arrived GPU load (% of capacity)",
                      "allocated GPU %");
  ca.x_min = 0;
  ca.x_max = static_cast<double>(r.load_percent);
  ca.y_min = 0;
  ca.y_max = 100;
  s << LineChart(ca, alloc);
  s << "</div></body></html>\n";
  return s.str();
}

Json ReplayReportToJson(const ReplayReport& r) {
  Json j = Json::object();
  j["trace"] = r.trace_file;
  j["cluster"] = r.cluster_file;
  j["jobs"] = r.jobs;
  j["restartCostSeconds"] = r.restart_cost_seconds;
  j["skippedRecords"] = Json::object();
  for (const auto& [why, n] : r.skipped_records) j["skippedRecords"][why] = n;
  Json runs = Json::array();
  for (const ReplayRun& run : r.runs) {
    const ReplaySummary& s = run.summary;
    Json x = Json::object();
    x["policy"] = run.policy;
    x["jobs"] = s.jobs;
    x["finished"] = s.finished;
    x["infeasible"] = s.infeasible;
    x["unfinished"] = s.unfinished;
    x["jctSeconds"] = {
        {"avg", R2(s.avg_jct)}, {"p50", s.p50_jct}, {"p95", s.p95_jct}, {"p99", s.p99_jct}};
    x["queueingDelaySeconds"] = {{"avg", R2(s.avg_wait)},
                                 {"p50", s.p50_wait},
                                 {"p95", s.p95_wait},
                                 {"p99", s.p99_wait},
                                 {"max", s.max_wait}};
    // The first wait hides a job preempted again and again; this is all its time pending.
    x["pendingSeconds"] = {{"p99", s.p99_pending}, {"max", s.max_pending}};
    x["makespanSeconds"] = s.makespan;
    x["preemptions"] = s.preemptions;
    x["restartGpuHours"] = R2(s.restart_gpu_hours);
    x["cycles"] = run.result.cycles;
    x["bindings"] = run.result.bindings;
    x["avgGpuAllocationPercent"] = R2(s.avg_gpu_utilisation_percent);
    x["totalGpus"] = run.result.total_gpu_milli / 1000;
    x["createdQueues"] = run.result.created_queues;
    x["staleEvictions"] = run.result.stale_evictions;
    Json queues = Json::array();
    const double span =
        static_cast<double>(s.makespan) * static_cast<double>(run.result.total_gpu_milli);
    int64_t demand_total = 0;
    for (const QueueRecord& q : run.result.queues) demand_total += q.demand_gpu_milli_seconds;
    for (const QueueRecord& q : run.result.queues) {
      if (q.jobs == 0 && q.guarantee_gpu_milli == 0) continue;
      queues.push_back(
          {{"queue", q.name},
           {"jobs", q.jobs},
           {"weight", q.weight},
           {"guaranteeGpus", R2(static_cast<double>(q.guarantee_gpu_milli) / 1000.0)},
           {"guaranteeSharePercent",
            R2(run.result.total_gpu_milli ? 100.0 * static_cast<double>(q.guarantee_gpu_milli) /
                                                static_cast<double>(run.result.total_gpu_milli)
                                          : 0)},
           {"usedSharePercent",
            R2(span > 0 ? 100.0 * static_cast<double>(q.used_gpu_milli_seconds) / span : 0)},
           {"demandSharePercent",
            R2(demand_total ? 100.0 * static_cast<double>(q.demand_gpu_milli_seconds) /
                                  static_cast<double>(demand_total)
                            : 0)},
           {"maxWaitSeconds", q.max_wait},
           {"maxPendingSeconds", q.max_pending}});
    }
    x["queues"] = queues;
    Json series = Json::array();
    for (const SeriesPoint& p : run.result.series)
      series.push_back(
          Json::array({p.time, p.allocated_gpu_milli, p.pending_jobs, p.running_jobs}));
    x["series"] = {
        {"columns", Json::array({"time", "allocatedGpuMilli", "pendingJobs", "runningJobs"})},
        {"rows", series}};
    runs.push_back(x);
  }
  j["runs"] = runs;
  return j;
}

std::string ReplaySummaryCsv(const ReplayReport& r) {
  std::ostringstream s;
  s << "policy,jobs,finished,infeasible,unfinished,avg_jct_s,p50_jct_s,p95_jct_s,p99_jct_s,avg_"
       "wait_s,p50_wait_s,"
       "p95_wait_s,p99_wait_s,max_wait_s,makespan_s,preemptions,avg_gpu_allocation_percent,"
       "restart_gpu_hours,p99_pending_s,max_pending_s\n";
  for (const ReplayRun& run : r.runs) {
    const ReplaySummary& x = run.summary;
    s << run.policy << "," << x.jobs << "," << x.finished << "," << x.infeasible << ","
      << x.unfinished << "," << Fixed(x.avg_jct, 2) << "," << x.p50_jct << "," << x.p95_jct << ","
      << x.p99_jct << "," << Fixed(x.avg_wait, 2) << "," << x.p50_wait << "," << x.p95_wait << ","
      << x.p99_wait << "," << x.max_wait << "," << x.makespan << "," << x.preemptions << ","
      << Fixed(x.avg_gpu_utilisation_percent, 2) << "," << Fixed(x.restart_gpu_hours, 2) << ","
      << x.p99_pending << "," << x.max_pending << "\n";
  }
  return s.str();
}

std::string GpuCount(int64_t milli) {
  std::string out = std::to_string(milli / 1000);
  int64_t frac = milli % 1000;
  if (frac == 0) return out;
  std::string digits = std::to_string(1000 + frac).substr(1);  // 500 -> "500", 5 -> "005"
  while (digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

std::string ReplayJobsCsv(const ReplayRun& run) {
  std::ostringstream s;
  s << "job,queue,gpus,submit,start,finish,duration,wait,jct,preemptions,outcome,pending,why\n";
  for (const JobRecord& j : run.result.jobs) {
    s << j.id << "," << j.queue << "," << GpuCount(j.gpu_milli) << "," << j.submit << "," << j.start
      << "," << j.finish << "," << j.duration << "," << (j.start >= 0 ? j.start - j.submit : -1)
      << "," << (j.finish >= 0 ? j.finish - j.submit : -1) << "," << j.preemptions << ","
      << j.outcome << "," << j.pending << ",";
    if (!j.why.empty()) {  // RFC 4180: quoted, inner quotes doubled (reasons hold commas)
      s << '"';
      for (char c : j.why) s << (c == '"' ? "\"\"" : std::string(1, c));
      s << '"';
    }
    s << "\n";
  }
  return s.str();
}

std::string ReplayReportHtml(const ReplayReport& r) {
  std::ostringstream s;
  s << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tessera sim replay</title>"
    << kStyle << "</head><body>";
  s << "<h1>Replay: " << Escape(r.trace_file) << "</h1>";
  s << "<p class=\"note\">" << r.jobs << " jobs";
  for (const auto& [why, n] : r.skipped_records)
    s << " (" << n << " trace records skipped: " << Escape(why) << ")";
  s << " on " << Escape(r.cluster_file);
  if (!r.runs.empty()) s << " (" << r.runs.front().result.total_gpu_milli / 1000 << " GPUs)";
  s << ". JCT = completion - submission; wait = first start - submission; pending = all the "
       "time a job waited, after preemptions too (JCT - time holding GPUs). Same engine, one "
       "configuration per row. A preempted job restarts from its checkpoint ";
  if (r.restart_cost_seconds > 0)
    s << "after " << r.restart_cost_seconds
      << " s of restart time, holding its GPUs without progress (the GPU time that costs is "
         "under 'restarting').</p>";
  else
    s << "at no cost (no restart time is modelled).</p>";
  s << "<table><tr><th>policy</th><th>avg JCT</th><th>p50 JCT</th><th>p95 JCT</th><th>p99 "
       "JCT</th><th>avg wait</th>"
       "<th>p99 wait</th><th>max wait</th><th>p99 pending</th><th>max pending</th>"
       "<th>makespan</th><th>preemptions</th><th>GPU alloc.</th><th>restarting</th>"
       "<th>finished</th>"
       "<th>infeasible</th></tr>";
  for (const ReplayRun& run : r.runs) {
    const ReplaySummary& x = run.summary;
    s << "<tr><td>" << Escape(run.policy) << "</td><td><b>"
      << Duration(static_cast<int64_t>(x.avg_jct)) << "</b></td><td>" << Duration(x.p50_jct)
      << "</td><td>" << Duration(x.p95_jct) << "</td><td>" << Duration(x.p99_jct) << "</td><td>"
      << Duration(static_cast<int64_t>(x.avg_wait)) << "</td><td>" << Duration(x.p99_wait)
      << "</td><td>" << Duration(x.max_wait) << "</td><td>" << Duration(x.p99_pending)
      << "</td><td>" << Duration(x.max_pending) << "</td><td>" << Duration(x.makespan)
      << "</td><td>" << x.preemptions << "</td><td>" << Fixed(x.avg_gpu_utilisation_percent, 1)
      << " %</td><td>" << Fixed(x.restart_gpu_hours, 1) << " GPU-h</td><td>" << x.finished
      << "</td><td>" << x.infeasible << "</td></tr>";
  }
  s << "</table><div class=\"charts\">";
  if (!r.runs.empty()) {
    const double t0 = r.runs.front().result.series.empty()
                          ? 0
                          : static_cast<double>(r.runs.front().result.series.front().time);
    std::vector<Line> alloc, pend, jct, wait;
    // The time axis in the unit of the span, as Duration() words a time: seconds under two
    // minutes, minutes under two hours, hours under two days, else days.
    double span = 0;
    for (const ReplayRun& run : r.runs)
      if (!run.result.series.empty())
        span = std::max(span, static_cast<double>(run.result.series.back().time) - t0);
    const auto [unit, unit_name] = span < 120      ? std::pair{1.0, "seconds"}
                                   : span < 7200   ? std::pair{60.0, "minutes"}
                                   : span < 172800 ? std::pair{3600.0, "hours"}
                                                   : std::pair{86400.0, "days"};
    const std::string time_label = std::string(unit_name) + " since the first submission";
    for (const ReplayRun& run : r.runs) {
      Line a{run.policy, {}, false}, p{run.policy, {}, false};
      const double cap = static_cast<double>(std::max<int64_t>(1, run.result.total_gpu_milli));
      for (const SeriesPoint& pt : run.result.series) {
        double d = (static_cast<double>(pt.time) - t0) / unit;
        a.points.push_back({d, 100.0 * static_cast<double>(pt.allocated_gpu_milli) / cap});
        p.points.push_back({d, static_cast<double>(pt.pending_jobs)});
      }
      alloc.push_back(a);
      pend.push_back(p);
      // CDFs over (at most) 400 quantiles.
      std::vector<int64_t> j, w;
      for (const JobRecord& jr : run.result.jobs) {
        if (jr.finish >= 0) j.push_back(std::max<int64_t>(1, jr.finish - jr.submit));
        if (jr.start >= 0) w.push_back(std::max<int64_t>(1, jr.start - jr.submit));
      }
      std::sort(j.begin(), j.end());
      std::sort(w.begin(), w.end());
      auto cdf = [](const std::vector<int64_t>& v, const std::string& name) {
        Line l{name, {}, false};
        if (v.empty()) return l;
        for (int q = 0; q <= 400; ++q) {
          size_t idx = std::min(v.size() - 1, v.size() * static_cast<size_t>(q) / 400);
          l.points.push_back({static_cast<double>(v[idx]), 100.0 * static_cast<double>(q) / 400.0});
        }
        return l;
      };
      jct.push_back(cdf(j, run.policy));
      wait.push_back(cdf(w, run.policy));
    }
    ChartSpec ca = Spec("GPU allocation over time", time_label, "allocated GPUs (% of cluster)");
    ca.x_min = 0;
    ca.x_max = std::max(span / unit, 1e-3);
    ca.y_min = 0;
    ca.y_max = 100;
    s << LineChart(ca, alloc);
    ChartSpec cp = Spec("Pending jobs over time", time_label, "jobs waiting");
    cp.x_min = 0;
    cp.x_max = ca.x_max;
    s << LineChart(cp, pend);
    std::vector<double> ticks = {1, 60, 3600, 86400, 604800, 2592000};
    std::vector<std::string> labels = {"1 s", "1 min", "1 h", "1 d", "1 wk", "30 d"};
    ChartSpec cj = Spec("Job completion time (CDF)", "JCT (log scale)", "% of finished jobs");
    cj.log_x = true;
    cj.x_min = 1;
    cj.x_max = 2592000 * 4.0;
    cj.y_min = 0;
    cj.y_max = 100;
    cj.x_ticks = ticks;
    cj.x_tick_labels = labels;
    s << LineChart(cj, jct);
    ChartSpec cw =
        Spec("Queueing delay (CDF, jobs that started)", "wait (log scale)", "% of started jobs");
    cw = cj;
    cw.title = "Queueing delay (CDF; a wait under 1 s counts as 1 s)";
    cw.x_label = "wait (log scale)";
    cw.y_label = "% of started jobs";
    s << LineChart(cw, wait);
    // Per-queue share vs guarantee, for the first run (the table below has every run).
    const ReplayRun& first = r.runs.front();
    std::vector<std::string> cats;
    std::vector<double> guar, demand;
    std::vector<std::pair<std::string, std::vector<double>>> bars;
    Json j = ReplayReportToJson(r);
    for (const auto& q : j["runs"][0]["queues"]) {
      cats.push_back(q["queue"].get<std::string>());
      guar.push_back(q["guaranteeSharePercent"].get<double>());
      demand.push_back(q["demandSharePercent"].get<double>());
    }
    bars.push_back({"guarantee", guar});
    bars.push_back({"demand", demand});
    for (size_t k = 0; k < r.runs.size(); ++k) {
      std::vector<double> used;
      for (const auto& q : j["runs"][k]["queues"])
        used.push_back(q["usedSharePercent"].get<double>());
      bars.push_back({"used: " + r.runs[k].policy, used});
    }
    if (!cats.empty() && cats.size() <= 40)
      s << BarChart("Per-queue share % (guarantee, used: of the cluster; demand: of all demand)",
                    "%", cats, bars);
    s << "</div><h2>Per-queue share and "
         "starvation</h2><table><tr><th>queue</th><th>jobs</th><th>guarantee</th>"
         "<th>demand share</th>";
    for (const ReplayRun& run : r.runs) s << "<th>used: " << Escape(run.policy) << "</th>";
    // Per run: max wait (first start), then max pending (every wait).
    const std::pair<const char*, const char*> waits[] = {{"max wait", "maxWaitSeconds"},
                                                         {"max pending", "maxPendingSeconds"}};
    for (const auto& [title, key] : waits)
      for (const ReplayRun& run : r.runs)
        s << "<th>" << title << ": " << Escape(run.policy) << "</th>";
    s << "</tr>";
    for (size_t qi = 0; qi < j["runs"][0]["queues"].size(); ++qi) {
      const auto& q = j["runs"][0]["queues"][qi];
      s << "<tr><td>" << Escape(q["queue"].get<std::string>()) << "</td><td>"
        << q["jobs"].get<int64_t>() << "</td><td>"
        << Fixed(q["guaranteeSharePercent"].get<double>(), 1) << " %</td><td>"
        << Fixed(q["demandSharePercent"].get<double>(), 1) << " %</td>";
      for (size_t k = 0; k < r.runs.size(); ++k)
        s << "<td>" << Fixed(j["runs"][k]["queues"][qi]["usedSharePercent"].get<double>(), 1)
          << " %</td>";
      for (const auto& [title, key] : waits)
        for (size_t k = 0; k < r.runs.size(); ++k)
          s << "<td>" << Duration(j["runs"][k]["queues"][qi][key].get<int64_t>()) << "</td>";
      s << "</tr>";
    }
    s << "</table>";
    (void)first;
  } else {
    s << "</div>";
  }
  s << "</body></html>\n";
  return s.str();
}

}  // namespace tessera::sim
