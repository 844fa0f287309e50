#include "sim/fgd.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "common/rng.h"
#include "engine/cluster_state.h"

namespace tessera::sim {
namespace {

FgdPod FromOpenb(const OpenbPod& p) {
  FgdPod f;
  f.name = p.name;
  f.cpu_milli = p.cpu_milli;
  f.memory_mib = p.memory_mib;
  f.num_gpu = p.num_gpu;
  f.gpu_milli = p.num_gpu == 0 ? 0 : p.num_gpu > 1 ? 1000 : p.gpu_milli;
  f.models = p.gpu_spec;
  return f;
}

// Splits "<original>-tuned-<i>" into the original name; returns false for originals.
bool CloneOf(const std::string& name, std::string& original) {
  size_t p = name.rfind("-tuned-");
  if (p == std::string::npos) return false;
  original = name.substr(0, p);
  return true;
}

}  // namespace

StatusOr<FgdWorkload> BuildFgdWorkload(const std::vector<OpenbNode>& nodes,
                                       const std::vector<OpenbPod>& pods,
                                       const FgdWorkloadOptions& options) {
  FgdWorkload w;
  Rng rng(options.seed);

  // Pods: name-sorted originals.
  for (const OpenbPod& p : pods) w.originals.push_back(FromOpenb(p));
  std::sort(w.originals.begin(), w.originals.end(),
            [](const FgdPod& a, const FgdPod& b) { return a.name < b.name; });
  for (size_t i = 1; i < w.originals.size(); ++i)
    if (w.originals[i].name == w.originals[i - 1].name)
      return InvalidArgument("pods: duplicate pod name \"" + w.originals[i].name + "\"");

  // Nodes: GPU nodes only, as the protocol's node list.
  std::vector<OpenbNode> sorted_nodes = nodes;
  std::sort(sorted_nodes.begin(), sorted_nodes.end(),
            [](const OpenbNode& a, const OpenbNode& b) { return a.name < b.name; });
  for (const OpenbNode& n : sorted_nodes) {
    w.total_gpus += n.gpus;
    w.total_gpu_milli += static_cast<int64_t>(n.gpus) * 1000;
  }
  if (w.total_gpus == 0) return InvalidArgument("nodes: the cluster has no GPUs");

  if (options.arrival_order) {
    std::map<std::string, const FgdPod*> by_name;
    for (const FgdPod& p : w.originals) by_name[p.name] = &p;
    for (size_t i = 0; i < options.arrival_order->size(); ++i) {
      const ArrivalOrderEntry& e = (*options.arrival_order)[i];
      const std::string where =
          e.where.empty() ? "arrival order[" + std::to_string(i) + "]" : e.where;
      std::string original = e.name;
      bool clone = CloneOf(e.name, original);
      auto it = by_name.find(original);
      if (it == by_name.end())
        return InvalidArgument(where + ": pod \"" + original + "\" is not in the pod list");
      FgdPod p = *it->second;
      // The requests come from the pod list (FGD-PROTOCOL.md, 1-2); the order file's copy
      // of them is a check that both describe the same pods.
      for (auto [col, given, listed] : {std::tuple{"cpu_milli", e.cpu_milli, p.cpu_milli},
                                        {"num_gpu", e.num_gpu, int64_t{p.num_gpu}},
                                        {"gpu_milli", e.gpu_milli, int64_t{p.gpu_milli}}})
        if (given && *given != listed)
          return InvalidArgument(where + ": " + col + ": pod \"" + e.name + "\" has " +
                                 std::to_string(*given) + " here but " + std::to_string(listed) +
                                 " in the pod list: the order was made for another pod list");
      if (clone) p.name = e.name;
      w.arrivals.push_back(std::move(p));
    }
  } else {
    // The protocol's order of draws, with Tessera's Rng in place of Go's math/rand.
    w.arrivals = w.originals;
    for (size_t i = w.arrivals.size(); i > 1; --i)
      std::swap(w.arrivals[i - 1], w.arrivals[rng.Below(i)]);
    const int64_t target = w.total_gpu_milli * options.load_percent / 100;
    int64_t cur = 0;
    for (const FgdPod& p : w.originals) cur += p.GpuMilli();
    if (w.originals.empty()) return InvalidArgument("pods: the pod list is empty");
    if (cur == 0)
      return InvalidArgument("pods: no pod requests a GPU (the protocol measures GPU packing)");
    if (cur > target) {
      // A load below the trace's own: the shuffled pods arrive until it is reached.
      int64_t sum = 0;
      size_t keep = 0;
      while (keep < w.arrivals.size() && sum + w.arrivals[keep].GpuMilli() <= target)
        sum += w.arrivals[keep++].GpuMilli();
      w.arrivals.resize(keep);
    } else {
      for (int64_t i = 0;; ++i) {
        const FgdPod& pick = w.originals[rng.Below(w.originals.size())];
        // As in the paper's code, the check uses the per-GPU milli, so the total may overshoot.
        if (cur + pick.gpu_milli > target) break;
        FgdPod clone = pick;
        clone.name = pick.name + "-tuned-" + std::to_string(i);
        cur += pick.GpuMilli();
        w.arrivals.push_back(std::move(clone));
      }
    }
  }

  int64_t arrived = 0;
  for (const FgdPod& p : w.arrivals) arrived += p.GpuMilli();
  w.arrived_percent = (arrived * 100 + w.total_gpu_milli - 1) / w.total_gpu_milli;

  // Node names: the permuted tie-break names.
  std::vector<int64_t> perm(sorted_nodes.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  if (!options.node_order)
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(i)]);
  for (size_t i = 0; i < sorted_nodes.size(); ++i) {
    const OpenbNode& o = sorted_nodes[i];
    Node n;
    if (options.node_order) {
      auto it = options.node_order->find(o.name);
      if (it == options.node_order->end())
        return InvalidArgument("node order: no entry for node \"" + o.name + "\"");
      n.name = it->second;
    } else {
      char prefix[16];
      std::snprintf(prefix, sizeof prefix, "%04lld-", static_cast<long long>(perm[i]));
      n.name = prefix + o.name;
    }
    w.trace_names[n.name] = o.name;
    n.cpu_milli = o.cpu_milli;
    n.memory_bytes = o.memory_mib * 1024 * 1024;
    for (int32_t d = 0; d < o.gpus; ++d) {
      Device dev;
      dev.index = d;
      dev.model = o.model;
      dev.uuid = "GPU-" + o.name + "-" + std::to_string(d);
      n.devices.push_back(std::move(dev));
    }
    w.nodes.push_back(std::move(n));
  }
  std::sort(w.nodes.begin(), w.nodes.end(),
            [](const Node& a, const Node& b) { return a.name < b.name; });
  return w;
}

StatusOr<FgdRun> RunFgd(const FgdWorkload& workload, FgdPlacer& placer, int max_percent) {
  FgdRun run;
  run.samples.reserve(workload.arrivals.size());
  int64_t arrived = 0;
  for (const FgdPod& pod : workload.arrivals) {
    auto placed = placer.Place(pod);
    if (!placed.ok()) return placed.status().WithContext("pod " + pod.name);
    arrived += pod.GpuMilli();
    ++run.arrived;
    if (*placed) {
      ++run.placed;
    } else {
      ++run.failed;
      run.failed_gpu_milli += pod.GpuMilli();
    }
    run.samples.push_back({arrived, placer.AllocatedGpuMilli()});
  }
  run.curve = DiscretiseAllocCurve(run.samples, workload.total_gpus, max_percent);
  return run;
}

namespace {

TaskRequest RequestOf(const FgdPod& p) {
  TaskRequest r;
  r.cpu_milli = p.cpu_milli;
  r.memory_bytes = p.memory_mib * 1024 * 1024;
  if (p.num_gpu == 1 && p.gpu_milli < 1000) {
    r.gpu.kind = GpuRequestKind::kFraction;
    r.gpu.count = 1;
    r.gpu.milli = p.gpu_milli;
  } else if (p.num_gpu > 0) {
    r.gpu.kind = GpuRequestKind::kWhole;
    r.gpu.count = p.num_gpu;
  }
  r.gpu.models = p.models;
  return r;
}

// The request histogram of the original pods, heaviest first (ties by request, descending).
std::vector<std::pair<FgdPod, int64_t>> Histogram(const FgdWorkload& w) {
  std::map<std::tuple<int64_t, int32_t, int32_t, std::vector<std::string>>,
           std::pair<FgdPod, int64_t>>
      h;
  for (const FgdPod& p : w.originals) {
    auto& e = h[{p.cpu_milli, p.gpu_milli, p.num_gpu, p.models}];
    if (e.second == 0) e.first = p;
    ++e.second;
  }
  std::vector<std::pair<FgdPod, int64_t>> out;
  for (auto& [k, v] : h) out.push_back(v);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace

std::vector<std::string> FgdPolicyNames() {
  return {"random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "tessera"};
}

void AddTypicalRequests(const FgdWorkload& workload, EngineConfig& config) {
  config.typical_requests.clear();
  for (const auto& [pod, count] : Histogram(workload)) {
    TaskRequest r = RequestOf(pod);
    r.memory_bytes = 0;  // a shape, not a reservation
    config.typical_requests.push_back({r, count});
  }
}

StatusOr<EngineConfig> FgdPolicyConfig(const std::string& policy, const FgdWorkload& workload) {
  if (policy == "tessera") {
    EngineConfig c = DefaultEngineConfig();
    AddTypicalRequests(workload, c);
    return c;
  }
  auto names = FgdPolicyNames();
  if (std::find(names.begin(), names.end(), policy) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("--policy: unknown \"" + policy + "\" (" + known + ")");
  }
  Json plugin = {{"name", "paper-" + policy}};
  if (policy == "fgd") {
    Json pods = Json::array();
    for (const auto& [p, count] : Histogram(workload)) {
      std::string type;
      for (size_t i = 0; i < p.models.size(); ++i) type += (i ? "|" : "") + p.models[i];
      pods.push_back({{"cpuMilli", p.cpu_milli},
                      {"gpuMilli", p.gpu_milli},
                      {"gpus", p.num_gpu},
                      {"gpuType", type},
                      {"count", count}});
    }
    plugin["arguments"] = {{"typicalPods", pods}};
  }
  // Arrival only, one pod per cycle: allocation is the only action; the default filters
  // (resources, GPU model) and exactly one score plugin, as in the paper's runs.
  Json doc = {
      {"actions", Json::array({"allocate"})},
      {"tiers",
       Json::array({Json{{"plugins", Json::array({Json{{"name", "predicates"}}, plugin})}}})}};
  auto c = ParseEngineConfig(doc);
  if (!c.ok()) return c.status().WithContext("policy " + policy);
  AddTypicalRequests(workload, *c);
  return c;
}

StatusOr<std::unique_ptr<EnginePlacer>> EnginePlacer::Create(const FgdWorkload& workload,
                                                             const EngineConfig& config,
                                                             uint64_t seed) {
  // The protocol places pods on arrival and never evicts or waits: of a configuration's
  // actions only enqueue and allocate can act (preempt and reclaim would evict placed pods,
  // backfill's reservation needs a clock and a next pod to hold back). The others are left
  // out rather than run to no effect.
  EngineConfig protocol = config;
  std::erase_if(protocol.actions,
                [](const std::string& a) { return a != "enqueue" && a != "allocate"; });
  if (std::find(protocol.actions.begin(), protocol.actions.end(), "allocate") ==
      protocol.actions.end())
    return InvalidArgument(
        "the FGD protocol places pods with the allocate action, which the "
        "configuration lacks");
  auto engine = Engine::Create(protocol);
  if (!engine.ok()) return engine.status();
  Snapshot s;
  s.nodes = workload.nodes;
  Queue q;
  q.name = "default";
  s.queues.push_back(q);
  auto state = ClusterState::FromSnapshot(s);
  if (!state.ok()) return state.status();
  return std::unique_ptr<EnginePlacer>(
      new EnginePlacer(std::move(*engine), std::move(*state), seed));
}

EnginePlacer::EnginePlacer(std::unique_ptr<Engine> engine, std::unique_ptr<ClusterState> state,
                           uint64_t seed)
    : engine_(std::move(engine)), state_(std::move(state)), rng_(seed) {}
EnginePlacer::~EnginePlacer() = default;

StatusOr<bool> EnginePlacer::Place(const FgdPod& pod) {
  Job job;
  job.id = pod.name;
  // The protocol has no clock: pods arrive one by one and never finish. Every cycle runs at
  // t=0 (orders by attained service see none).
  job.submit_time = 0;
  job.groups.push_back(TaskGroup{"pod", 1, RequestOf(pod), {}});
  job.allocations.resize(1);
  TESSERA_RETURN_IF_ERROR(state_->AddJob(job));
  Plan plan = engine_->Cycle(*state_, 0, rng_);
  ++now_;
  if (plan.bindings.empty()) {
    TESSERA_RETURN_IF_ERROR(state_->RemoveJob(job.id));  // failed pods are dropped, never retried
    return false;
  }
  TESSERA_RETURN_IF_ERROR(state_->ApplyPlan(plan));
  for (const Binding& b : plan.bindings) allocated_ += b.allocation.GpuMilli();
  return true;
}

}  // namespace tessera::sim
