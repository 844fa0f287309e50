// Node-order scores: binpack (most allocated), spread (least allocated), preferred node
// affinity, and Volcano's composite `nodeorder`. Integer percentages, 0..100.
#include <algorithm>

#include "engine/plugins/builtin.h"
#include "engine/plugins/registry.h"

namespace tessera {

namespace {
int64_t GpuRequestMilli(const TaskRequest& r) {
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone:
      return 0;
    case GpuRequestKind::kWhole:
      return 1000LL * r.gpu.count;
    case GpuRequestKind::kFraction:
      return r.gpu.milli;
    case GpuRequestKind::kMig:
      return std::max(1, std::atoi(r.gpu.mig_profile.c_str())) * 1000LL / 7 * r.gpu.count;
  }
  return 0;
}
}  // namespace

int64_t UsedAfterPercent(const NodeState& n, const TaskRequest& r, int64_t w_cpu, int64_t w_mem,
                         int64_t w_gpu) {
  int64_t sum = 0, wsum = 0;
  auto add = [&](int64_t cap, int64_t free, int64_t req, int64_t w) {
    if (cap <= 0 || w <= 0) return;
    int64_t used = std::clamp<int64_t>(cap - free + req, 0, cap);
    sum += w * static_cast<int64_t>((static_cast<__int128>(used) * 100) / cap);
    wsum += w;
  };
  add(n.node->cpu_milli, n.free_cpu_milli, r.cpu_milli, w_cpu);
  add(n.node->memory_bytes, n.free_memory_bytes, r.memory_bytes, w_mem);
  int64_t gcap = 0, gfree = 0;
  for (size_t i = 0; i < n.devices.size(); ++i)
    if (n.node->devices[i].healthy) {
      gcap += 1000;
      gfree += std::max(0, n.devices[i].free_milli);
    }
  add(gcap, gfree, GpuRequestMilli(r), w_gpu);
  return wsum == 0 ? 0 : sum / wsum;
}

namespace {

struct Weights {
  int64_t cpu = 1, memory = 1, gpu = 4;
};

class Binpack : public ScorePlugin {
 public:
  Binpack(Weights w, bool most) : w_(w), most_(most) {}
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t used = UsedAfterPercent(n, *t.request, w_.cpu, w_.memory, w_.gpu);
    return most_ ? used : 100 - used;
  }

 private:
  Weights w_;
  bool most_;
};

class NodeAffinityScore : public ScorePlugin {
 public:
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t total = 0, hit = 0;
    for (const auto& p : t.placement().affinity.preferred) {
      total += p.weight;
      if (MatchesTerm(p.term, n.node->labels)) hit += p.weight;
    }
    return total == 0 ? 0 : hit * 100 / total;
  }
};

// Fewer untolerated PreferNoSchedule taints is better.
class TaintPreferScore : public ScorePlugin {
 public:
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t soft = 0, bad = 0;
    for (const auto& taint : n.node->taints) {
      if (taint.effect != TaintEffect::kPreferNoSchedule) continue;
      ++soft;
      bool ok = false;
      for (const auto& tol : t.placement().tolerations)
        ok |= (tol.op == Toleration::Op::kExists && (tol.key.empty() || tol.key == taint.key)) ||
              (tol.key == taint.key && tol.value == taint.value);
      bad += !ok;
    }
    return soft == 0 ? 100 : 100 - bad * 100 / soft;
  }
};

// Balanced use of CPU and memory after placement (kube's BalancedAllocation, integer form).
class BalancedScore : public ScorePlugin {
 public:
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t c = UsedAfterPercent(n, *t.request, 1, 0, 0),
            m = UsedAfterPercent(n, *t.request, 0, 1, 0);
    return 100 - std::abs(c - m);
  }
};

// Volcano's nodeorder: a weighted sum of sub-scores.
class NodeOrder : public ScorePlugin {
 public:
  std::vector<std::pair<std::shared_ptr<ScorePlugin>, int64_t>> parts;
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t s = 0;
    for (const auto& [p, w] : parts) s += w * p->Score(t, n);
    return s;
  }
};

Status ReadWeights(ObjectReader& r, const std::string& prefix, Weights& w) {
  auto key = [&](const char* k) { return prefix + k; };
  std::string kc = key("cpu"), km = key("memory"), kg = key("gpu"), kr = key("resources"),
              krg = key("resources.nvidia.com/gpu");
  TESSERA_RETURN_IF_ERROR(r.Int(kc.c_str(), w.cpu));
  TESSERA_RETURN_IF_ERROR(r.Int(km.c_str(), w.memory));
  TESSERA_RETURN_IF_ERROR(r.Int(kg.c_str(), w.gpu));
  TESSERA_RETURN_IF_ERROR(r.Int(krg.c_str(), w.gpu));
  std::string resources;
  TESSERA_RETURN_IF_ERROR(r.String(kr.c_str(), resources));
  if (!resources.empty() && resources != "nvidia.com/gpu")
    return InvalidArgument(r.Path(kr.c_str()) +
                           ": only nvidia.com/gpu is an extended resource here, got \"" +
                           resources + "\"");
  return Status::Ok();
}

StatusOr<PluginInstance> BinpackLike(const char* name, bool most, const Json& args,
                                     const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  PluginInstance p;
  p.name = name;
  Weights w;
  TESSERA_RETURN_IF_ERROR(r.Int("weight", p.score_weight));
  TESSERA_RETURN_IF_ERROR(ReadWeights(r, "", w));
  if (most) {  // Volcano's binpack plugin spells its arguments binpack.*
    TESSERA_RETURN_IF_ERROR(r.Int("binpack.weight", p.score_weight));
    TESSERA_RETURN_IF_ERROR(ReadWeights(r, "binpack.", w));
  }
  TESSERA_RETURN_IF_ERROR(r.Finish());
  p.score = std::make_shared<Binpack>(w, most);
  return p;
}

}  // namespace

StatusOr<PluginInstance> MakeBinpack(const Json& a, const std::string& p) {
  return BinpackLike("binpack", true, a, p);
}
StatusOr<PluginInstance> MakeSpread(const Json& a, const std::string& p) {
  return BinpackLike("spread", false, a, p);
}

StatusOr<PluginInstance> MakeNodeAffinity(const Json& args, const std::string& path) {
  PluginInstance p;
  p.name = "nodeaffinity";
  TESSERA_RETURN_IF_ERROR(ReadOnlyWeight(args, path, p.score_weight));
  p.score = std::make_shared<NodeAffinityScore>();
  return p;
}

StatusOr<PluginInstance> MakeNodeOrder(const Json& args, const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  PluginInstance p;
  p.name = "nodeorder";
  std::string policy;
  TESSERA_RETURN_IF_ERROR(r.String("orderPolicyName", policy));
  TESSERA_RETURN_IF_ERROR(r.String("nodeorder.orderPolicyName", policy));
  TESSERA_RETURN_IF_ERROR(r.Int("weight", p.score_weight));
  int64_t most = 0, least = 0, affinity = 1, taint = 1, balanced = 0;
  if (policy == "most_allocated" || policy == "binpack")
    most = 1;
  else if (policy == "least_allocated" || policy == "spread")
    least = 1;
  else if (policy.empty())
    least = 1;  // kube's and Volcano's default leastrequested
  else
    return InvalidArgument(r.Path("orderPolicyName") + ": unknown \"" + policy +
                           "\" (most_allocated, least_allocated)");
  TESSERA_RETURN_IF_ERROR(r.Int("mostrequested.weight", most));
  TESSERA_RETURN_IF_ERROR(r.Int("leastrequested.weight", least));
  TESSERA_RETURN_IF_ERROR(r.Int("nodeaffinity.weight", affinity));
  TESSERA_RETURN_IF_ERROR(r.Int("tainttoleration.weight", taint));
  TESSERA_RETURN_IF_ERROR(r.Int("balancedresource.weight", balanced));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  auto no = std::make_shared<NodeOrder>();
  if (most) no->parts.push_back({std::make_shared<Binpack>(Weights{}, true), most});
  if (least) no->parts.push_back({std::make_shared<Binpack>(Weights{}, false), least});
  if (affinity) no->parts.push_back({std::make_shared<NodeAffinityScore>(), affinity});
  if (taint) no->parts.push_back({std::make_shared<TaintPreferScore>(), taint});
  if (balanced) no->parts.push_back({std::make_shared<BalancedScore>(), balanced});
  p.score = no;
  return p;
}

}  // namespace tessera
