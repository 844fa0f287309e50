// Job-order plugins and the engine policies selected by name (gang, conformance, drf,
// proportion). Each order is a key per job (lower first); the engine ends every order in
// submit time and job id.
#include <algorithm>
#include <climits>

#include "engine/plugins/builtin.h"
#include "engine/plugins/registry.h"

namespace tessera {
namespace {

class PriorityOrder : public JobOrderPlugin {
 public:
  int64_t Key(const Job& j, const JobProgress&, const CycleContext&) const override {
    return -int64_t{j.priority};
  }
};

class FifoOrder : public JobOrderPlugin {
 public:
  int64_t Key(const Job& j, const JobProgress&, const CycleContext&) const override {
    return j.submit_time;
  }
};

// Shortest runtime estimate first; jobs without an estimate after all that have one.
class SjfOrder : public JobOrderPlugin {
 public:
  int64_t Key(const Job& j, const JobProgress&, const CycleContext&) const override {
    return j.runtime_estimate_seconds.value_or(INT64_MAX);
  }
};

// Least attained service first (Tiresias-like, no runtime knowledge needed).
//
// Attained service is GPU-milli-seconds: the job's `attained_gpu_milli_seconds` (earlier
// runs, kept by the host) plus, while it runs, (now - start_time) x its allocated GPU milli.
// Without thresholds the order is plain LAS (least service first). With thresholds (in
// GPU-seconds, ascending) jobs fall into discrete levels, as Tiresias' 2D-LAS / MLFQ: level
// = the number of thresholds at or below the service; lower levels go first and, within a
// level, FIFO by submit time (the engine's tie-break). A job of a lower level may preempt
// running jobs of a higher level (`preempt`, default true).
//
// Starvation guard (`starvationFactor` K, 0 = off): a job whose time in the system spent not
// running (now - submit - service seconds) reaches K x its service seconds is promoted to
// level 0. A running job keeps the promotion while that wait is at least K/2 x its service,
// i.e. until its service has doubled since promotion: a promoted job gets a real quantum
// instead of bouncing back at once (Tiresias resets the service of a promoted job; a pure
// engine cannot, so the hysteresis plays that part). This bounds every job's wait to about
// K x its own service.
class LasOrder : public JobOrderPlugin {
 public:
  LasOrder(std::vector<int64_t> thresholds, int64_t starvation, bool preempt)
      : thresholds_(std::move(thresholds)), starvation_(starvation), preempt_(preempt) {}

  int64_t Key(const Job& j, const JobProgress& p, const CycleContext& ctx) const override {
    return thresholds_.empty() ? Attained(j, p, ctx.now) : Level(j, p, ctx.now);
  }

  std::optional<int64_t> PreemptionRank(const Job& job, const JobProgress& p,
                                        const CycleContext& ctx) const override {
    if (!preempt_ || thresholds_.empty()) return std::nullopt;
    return Level(job, p, ctx.now);
  }

  std::string OrderWords() const override { return "least attained GPU service first"; }
  // "service under 1 GPU-hour (level 0)", "service 1-10 GPU-hours (level 1)", ...
  std::string RankWords(int64_t level) const override {
    auto amount = [](int64_t s) {
      if (s % 3600 == 0) return std::to_string(s / 3600) + (s == 3600 ? " GPU-hour" : " GPU-hours");
      return std::to_string(s) + " GPU-seconds";
    };
    const std::string tag = " (level " + std::to_string(level) + ")";
    if (thresholds_.empty()) return "service level " + std::to_string(level);
    if (level <= 0)
      return "service under " + amount(thresholds_.front()) +
             (starvation_ > 0 ? " or promoted after a long wait" : "") + tag;
    if (level >= static_cast<int64_t>(thresholds_.size()))
      return "service of " + amount(thresholds_.back()) + " or more" + tag;
    return "service of " + amount(thresholds_[level - 1]) + " to " + amount(thresholds_[level]) +
           tag;
  }

  // MIG counts as its compute slices (RequestVector), not as no GPU: a MIG job's service
  // would be ~1000x its real one and the starvation guard would never promote it.
  static int64_t RequestedGpuMilli(const Job& j) {
    int64_t m = 0;
    for (const TaskGroup& g : j.groups) m += RequestVector(g.request).gpu_milli * g.replicas;
    return m;
  }

  static int64_t Attained(const Job& j, const JobProgress& p, int64_t now) {
    int64_t a = j.attained_gpu_milli_seconds;
    if (p.start_time >= 0 && now > p.start_time) a += (now - p.start_time) * p.gpu_milli;
    return a;
  }

  int64_t Level(const Job& j, const JobProgress& p, int64_t now) const {
    const int64_t attained = Attained(j, p, now);
    if (starvation_ > 0 && attained > 0) {
      // Service seconds: attained over the rate it accrues at, the GPU milli the job is
      // charged while it runs (an exclusive job: its nodes whole), else what it asks for.
      const int64_t rate =
          p.running_tasks > 0 && p.gpu_milli > 0 ? p.gpu_milli : RequestedGpuMilli(j);
      const int64_t service = attained / std::max<int64_t>(1, rate);
      const int64_t waited = now - j.submit_time - service;
      const bool running = p.running_tasks > 0;
      // Pending: promoted at K x service; running: kept while >= K/2 x service.
      if (service > 0 &&
          (running ? 2 * waited >= starvation_ * service : waited >= starvation_ * service))
        return 0;
    }
    int64_t level = 0;
    for (int64_t t : thresholds_)
      if (attained >= t * 1000) ++level;
    return level;
  }

 private:
  std::vector<int64_t> thresholds_;  // GPU-seconds
  int64_t starvation_ = 0;
  bool preempt_ = true;
};

Status NoArguments(const Json& args, const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  return r.Finish();
}

template <typename T>
StatusOr<PluginInstance> Order(const char* name, const Json& args, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(NoArguments(args, path));
  PluginInstance p;
  p.name = name;
  p.order = std::make_shared<T>();
  return p;
}

}  // namespace

StatusOr<PluginInstance> MakePriority(const Json& a, const std::string& p) {
  return Order<PriorityOrder>("priority", a, p);
}
StatusOr<PluginInstance> MakeFifo(const Json& a, const std::string& p) {
  return Order<FifoOrder>("fifo", a, p);
}
StatusOr<PluginInstance> MakeSjf(const Json& a, const std::string& p) {
  return Order<SjfOrder>("sjf", a, p);
}
// las arguments: {thresholds: [GPU-seconds, ...] ascending, starvationFactor: K, preempt: bool}
StatusOr<PluginInstance> MakeLas(const Json& a, const std::string& p) {
  const Json args = a.is_null() ? Json::object() : a;
  ObjectReader r(args, p);
  std::vector<int64_t> thresholds;
  if (const Json* t = r.Get("thresholds")) {
    if (!t->is_array())
      return InvalidArgument(r.Path("thresholds") + ": expected a list of GPU-seconds");
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string ip = r.Path("thresholds") + "[" + std::to_string(i) + "]";
      if (!(*t)[i].is_number_integer() || (*t)[i].get<int64_t>() <= 0)
        return InvalidArgument(ip + ": expected an integer number of GPU-seconds > 0");
      int64_t v = (*t)[i].get<int64_t>();
      if (v > INT64_MAX / 1000) return InvalidArgument(ip + ": too large");
      if (!thresholds.empty() && v <= thresholds.back())
        return InvalidArgument(ip + ": thresholds must be strictly ascending");
      thresholds.push_back(v);
    }
  }
  int64_t starvation = 0;
  TESSERA_RETURN_IF_ERROR(r.Int("starvationFactor", starvation));
  bool preempt = true;
  TESSERA_RETURN_IF_ERROR(r.Bool("preempt", preempt));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  PluginInstance x;
  x.name = "las";
  x.order = std::make_shared<LasOrder>(std::move(thresholds), starvation, preempt);
  return x;
}

StatusOr<PluginInstance> MakeGang(const Json& a, const std::string& p) {
  TESSERA_RETURN_IF_ERROR(NoArguments(a, p));
  PluginInstance x;
  x.name = "gang";
  x.gang = true;
  return x;
}

StatusOr<PluginInstance> MakeConformance(const Json& a, const std::string& p) {
  TESSERA_RETURN_IF_ERROR(NoArguments(a, p));
  PluginInstance x;
  x.name = "conformance";  // Volcano's: never evict system-critical pods; Tessera has none
  return x;
}

StatusOr<PluginInstance> MakeDrf(const Json& a, const std::string& p) {
  TESSERA_RETURN_IF_ERROR(NoArguments(a, p));
  PluginInstance x;
  x.name = "drf";
  x.queue_drf = true;
  return x;
}

StatusOr<PluginInstance> MakeProportion(const Json& a, const std::string& p) {
  TESSERA_RETURN_IF_ERROR(NoArguments(a, p));
  PluginInstance x;
  x.name = "proportion";
  x.queue_proportion = true;
  return x;
}

}  // namespace tessera
