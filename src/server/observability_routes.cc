#include "server/observability_routes.h"

#include <cctype>
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
  metrics::ClusterMetrics& m = ProcessMetrics();
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
    view.jobs.push_back(std::move(s));
  }
  m.Update(view);
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
