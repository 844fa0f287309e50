#include "server/observability_routes.h"

#include <cctype>
#include <cstdio>
#include <filesystem>

#include <httplib.h>

namespace tessera::server {

metrics::ClusterMetrics& ProcessMetrics() {
  static metrics::ClusterMetrics* m = new metrics::ClusterMetrics();  // never destroyed: the
  return *m;  // scheduling thread may still report while static destructors run
}

void ObserveHttpRequestForMetrics(const std::string& route, const std::string& method, int code,
                                  double seconds) {
  ProcessMetrics().ObserveHttpRequest(route, method, code, seconds);
}

void ObserveStoreErrorForMetrics(const Status&, bool read_only) {
  ProcessMetrics().ObserveStoreFailure(read_only);
}

namespace {

Json AccrualToJson(const metrics::Accrual& a) {
  Json queues = Json::object();
  for (const auto& [name, q] : a.queues)
    queues[name] = {{"costMicros", q.cost_micros},
                    {"costCarry", q.cost_carry},
                    {"gpuSeconds", q.gpu_seconds},
                    {"gpuCarry", q.gpu_carry}};
  return {{"to", a.to}, {"queues", queues}};
}

StatusOr<metrics::Accrual> AccrualFromJson(const std::string& text) {
  try {
    const Json j = Json::parse(text);
    metrics::Accrual a;
    a.to = j.at("to").get<int64_t>();
    for (const auto& [name, q] : j.at("queues").items())
      a.queues[name] = {q.at("costMicros").get<int64_t>(), q.at("costCarry").get<int64_t>(),
                        q.at("gpuSeconds").get<int64_t>(), q.at("gpuCarry").get<int64_t>()};
    return a;
  } catch (const std::exception& e) {
    return Internal(std::string("store key ") + kCostAccrualKey + ": corrupt: " + e.what());
  }
}

// Every JobState's label, indexed by the state (kCancelled is the last); Prometheus label
// values are lower case: "pending".
const std::vector<std::string>& StateLabels() {
  static const std::vector<std::string> labels = [] {
    std::vector<std::string> v;
    for (int s = 0; s <= static_cast<int>(JobState::kCancelled); ++s) {
      std::string label = JobStateName(static_cast<JobState>(s));
      for (char& c : label) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      v.push_back(std::move(label));
    }
    return v;
  }();
  return labels;
}

}  // namespace

void ObserveCycleForMetrics(const Snapshot& snapshot, const Plan& plan,
                            const std::vector<JobSummary>& jobs, const std::vector<JobBound>& bound,
                            int64_t now, double seconds) {
  ObserveCycleInto(ProcessMetrics(), snapshot, plan, jobs, bound, now, seconds);
}

void ObserveCycleInto(metrics::ClusterMetrics& m, const Snapshot& snapshot, const Plan& plan,
                      const std::vector<JobSummary>& jobs, const std::vector<JobBound>& bound,
                      int64_t now, double seconds) {
  m.ObserveCycle(plan, seconds);
  // A requeued job's attempt waited from its requeue.
  for (const JobBound& b : bound) m.ObserveJobStart(b.queue, b.queued_at, b.bound_at);
  metrics::ClusterView view;
  view.now = now;
  view.snapshot = &snapshot;
  view.plan = &plan;
  view.job_states = StateLabels();
  view.jobs.reserve(jobs.size());
  for (const JobSummary& j : jobs) {
    metrics::JobStatus s;
    s.id = j.id;
    s.queue = j.queue;
    s.state = StateLabels()[static_cast<int>(j.state)];
    // A requeued job waits from its requeue.
    s.submit_time = j.created_at;
    s.pending_since = j.queued_at;
    s.pending_reason = j.pending_reason;
    s.service = j.service;
    s.service_replicas = j.service_replicas;
    s.service_running = j.service_running;
    view.jobs.push_back(std::move(s));
  }
  m.Update(view);
}

Status MakeCostAccrualDurable(metrics::ClusterMetrics& m, store::Store& store,
                              int64_t every_seconds, int64_t most_gap_seconds) {
  auto stored = store.Get(kCostAccrualKey);
  if (!stored.ok()) return stored.status();
  if (*stored) {
    // Only metrics: an unreadable value starts the counters afresh rather than the server
    // not at all (Prometheus reads it as a reset).
    auto a = AccrualFromJson((*stored)->value);
    if (a.ok())
      m.RestoreAccrual(*a, most_gap_seconds);
    else
      std::fprintf(stderr, "tessera server: warning: %s; the cost counters start from zero\n",
                   a.status().message().c_str());
  }
  // One small write every `every_seconds` at most: not worth failing a cycle for; the
  // counters wait for the next write that works (TesseraStoreFailing says why).
  m.PersistAccrualWith(
      [&store](const metrics::Accrual& a) {
        auto w = store.Write({store::Op::Put(kCostAccrualKey, AccrualToJson(a).dump())});
        if (!w.ok())
          std::fprintf(stderr, "tessera server: cost counters not stored: %s\n",
                       w.status().ToString().c_str());
        return w.ok();
      },
      every_seconds);
  return Status::Ok();
}

void FlushCostAccrual(metrics::ClusterMetrics& m) {
  (void)m.FlushAccrual();
  m.PersistAccrualWith(nullptr, 0);
}

std::string DashboardDir() {
  namespace fs = std::filesystem;
  std::error_code err;
  if (const char* env = std::getenv("TESSERA_WEB_DIR")) {
    return fs::is_directory(env, err) ? env : "";
  }
  if (fs::is_regular_file("web/dist/index.html", err)) return fs::absolute("web/dist").string();
#ifdef TESSERA_SOURCE_ROOT
  const std::string built = std::string(TESSERA_SOURCE_ROOT) + "/web/dist";
  if (fs::is_regular_file(built + "/index.html", err)) return built;
#endif
  return "";
}

void RegisterObservabilityRoutes(httplib::Server& http) {
  http.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(ProcessMetrics().RenderText(), metrics::kTextContentType);
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/"); });
  const std::string dir = DashboardDir();
  if (!dir.empty() && http.set_mount_point("/ui", dir)) return;
  http.Get(R"(/ui(/.*)?)", [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content(
        "<!doctype html><title>Tessera</title><p>The web dashboard is not built. Run "
        "<code>make web</code> (npm ci &amp;&amp; npm run build in web/), or point "
        "TESSERA_WEB_DIR at a built web/dist.</p>",
        "text/html; charset=utf-8");
  });
}

}  // namespace tessera::server
