// Observability routes of the server: GET /metrics (Prometheus text format 0.0.4, from
// src/metrics) and the web dashboard's static files under /ui/ (built from web/ into
// web/dist; / redirects there). Owned by the observability component (docs/observability.md).
//
// Metrics are refreshed after every scheduling cycle from the snapshot the engine saw and
// its plan (ObserveCycleForMetrics, installed as ControlPlaneOptions::on_cycle), so a scrape
// costs only the rendering. One ClusterMetrics per process. Thread-safe.
#pragma once

#include <string>

#include "metrics/cluster_metrics.h"
#include "model/snapshot.h"
#include "server/control_plane.h"

namespace httplib {
class Server;
}

namespace tessera::server {

metrics::ClusterMetrics& ProcessMetrics();
// The cost counters' durable record (docs/observability.md): what each queue has accrued,
// and up to when, as JSON under this key of the store.
inline constexpr char kCostAccrualKey[] = "usage/cost";
// Continues `m`'s cost counters from what `store` holds (nothing: from zero), the time since
// then included, and keeps them there: written at most every `every_seconds` of the server's
// clock, and by FlushCostAccrual, which must come before `store` closes.
// The gap is counted for at most `most_gap_seconds` per allocation (agents stop their tasks
// once their lease has run out without a server).
Status MakeCostAccrualDurable(metrics::ClusterMetrics& m, store::Store& store,
                              int64_t every_seconds, int64_t most_gap_seconds);
// Writes `m`'s cost counters now and stops writing them (the store is about to close).
void FlushCostAccrual(metrics::ClusterMetrics& m);
// `jobs`: every job the server keeps, so tessera_jobs counts finished states too (and every
// state of JobState, at 0 when no job is in it); `bound`: the attempts the cycle bound, each
// one queue-wait observation.
void ObserveCycleForMetrics(const Snapshot& snapshot, const Plan& plan,
                            const std::vector<JobSummary>& jobs, const std::vector<JobBound>& bound,
                            int64_t now, double seconds);
// The same, into `m` (a test's own).
void ObserveCycleInto(metrics::ClusterMetrics& m, const Snapshot& snapshot, const Plan& plan,
                      const std::vector<JobSummary>& jobs, const std::vector<JobBound>& bound,
                      int64_t now, double seconds);
// Counts a store commit that failed (ControlPlaneOptions::on_store_error):
// tessera_store_commit_failures_total.
void ObserveStoreErrorForMetrics(const Status& error, bool read_only);
// One API request answered (ApiServer's logger): tessera_http_requests_total and
// tessera_http_request_duration_seconds.
void ObserveHttpRequestForMetrics(const std::string& route, const std::string& method, int code,
                                  double seconds);
// The dashboard folder: $TESSERA_WEB_DIR, else web/dist under the working directory, else
// web/dist beside the source tree the binary was built in; "" when none exists.
std::string DashboardDir();
void RegisterObservabilityRoutes(httplib::Server& http);

}  // namespace tessera::server
