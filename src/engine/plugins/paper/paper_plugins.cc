#include "engine/plugins/paper/paper_plugins.h"

#include "engine/plugins/registry.h"

namespace tessera::paper {

PodShape ShapeOf(const TaskRequest& request) {
  PodShape p;
  p.cpu_milli = request.cpu_milli;
  switch (request.gpu.kind) {
    case GpuRequestKind::kNone:
    case GpuRequestKind::kMig:  // the paper has no MIG; such tasks score as CPU-only
      break;
    case GpuRequestKind::kWhole:
      p.gpus = request.gpu.count;
      p.gpu_milli = 1000;
      break;
    case GpuRequestKind::kFraction:
      p.gpus = 1;
      p.gpu_milli = request.gpu.milli;
      break;
  }
  for (size_t i = 0; i < request.gpu.models.size(); ++i)
    p.gpu_type += (i ? "|" : "") + request.gpu.models[i];
  return p;
}

NodeFree FreeOf(const NodeState& node) {
  NodeFree f;
  f.cpu_left = node.free_cpu_milli;
  const auto& devs = node.node->devices;
  f.gpu_left.reserve(devs.size());
  for (size_t i = 0; i < devs.size(); ++i)
    f.gpu_left.push_back(devs[i].healthy && !devs[i].mig_enabled() ? node.devices[i].free_milli
                                                                   : 0);
  if (!devs.empty()) f.model = devs.front().model;
  return f;
}

namespace {

// The paper's Reserve step: whole GPUs first free by index; fractions on `device`.
bool Assign(const NodeState& node, const TaskRequest& req, const std::vector<int32_t>& devices,
            std::vector<DeviceAssignment>& out) {
  const PodShape p = ShapeOf(req);
  if (p.gpus == 0 || static_cast<int32_t>(devices.size()) != p.gpus) return false;
  out.clear();
  for (int32_t d : devices) {
    DeviceAssignment a;
    a.device = d;
    if (p.IsShared()) {
      a.milli = p.gpu_milli;
      a.memory_bytes = req.gpu.memory_bytes;
    } else {
      a.milli = 1000;
      a.memory_bytes = node.devices[d].free_memory_bytes;
    }
    out.push_back(a);
  }
  return true;
}

class PaperScore : public ScorePlugin {
 public:
  bool ChooseDevices(const TaskContext& task, const NodeState& node,
                     std::vector<DeviceAssignment>& out) const override {
    const NodeFree f = FreeOf(node);
    return Assign(node, *task.request, Devices(task, f), out);
  }

 protected:
  virtual std::vector<int32_t> Devices(const TaskContext& task, const NodeFree& node) const {
    return DevicesForPod(node, ShapeOf(*task.request));
  }
};

class RandomScore : public PaperScore {
 public:
  // A uniform, independent draw per feasible node: the argmax is a uniform pick among them.
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    return static_cast<int64_t>(task.cycle->rng->Below(1u << 30));
  }
  bool NodeSpecific(const TaskContext&) const override { return true; }

 protected:
  std::vector<int32_t> Devices(const TaskContext& task, const NodeFree& node) const override {
    const PodShape p = ShapeOf(*task.request);
    if (!p.IsShared()) return DevicesForPod(node, p);
    std::vector<int32_t> fitting;
    for (int32_t i = 0; i < static_cast<int32_t>(node.gpu_left.size()); ++i)
      if (node.gpu_left[i] >= p.gpu_milli) fitting.push_back(i);
    if (fitting.empty()) return {};
    return {fitting[task.cycle->rng->Below(fitting.size())]};
  }
};

class DotProdScore : public PaperScore {
 public:
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    return DotProductScore(FreeOf(node), ShapeOf(*task.request));
  }
};

class GpuClusteringScorePlugin : public PaperScore {
 public:
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    std::vector<std::string> tags;
    for (const auto& [shape, count] : node.gpu_task_shapes) {
      if (count <= 0 || shape < 0) continue;
      tags.push_back(shape == 0 ? "share-gpu" : std::to_string(shape) + "-gpu");
    }
    std::sort(tags.begin(), tags.end());
    tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
    return GpuClusteringScore(FreeOf(node), ShapeOf(*task.request), tags);
  }
};

class GpuPackingScorePlugin : public PaperScore {
 public:
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    return GpuPackingScore(FreeOf(node), ShapeOf(*task.request));
  }
};

class BestFitScore : public PaperScore {
 public:
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    return BestFitRawScore(FreeOf(node), ShapeOf(*task.request));
  }
  bool Normalizes() const override { return true; }
  void Normalize(const TaskContext& task, std::vector<int64_t>& scores) const override {
    NormalizeMinMax(scores);
  }
};

class FgdScorePlugin : public PaperScore {
 public:
  explicit FgdScorePlugin(std::vector<TypicalPod> typical, int percent)
      : typical_(std::move(typical)), percent_(percent) {}
  int64_t Score(const TaskContext& task, const NodeState& node) const override {
    return FgdScore(FreeOf(node), ShapeOf(*task.request), Typical(task)).score;
  }

 protected:
  std::vector<int32_t> Devices(const TaskContext& task, const NodeFree& node) const override {
    return FgdScore(node, ShapeOf(*task.request), Typical(task)).devices;
  }

 private:
  // Configured typical pods, else the cycle's (selected afresh: slower, same rule).
  std::vector<TypicalPod> Typical(const TaskContext& task) const {
    if (!typical_.empty() || task.cycle == nullptr || task.cycle->typical == nullptr)
      return typical_;
    std::vector<std::pair<PodShape, int64_t>> counts;
    for (const TypicalRequest& t : *task.cycle->typical)
      counts.push_back({ShapeOf(t.request), t.weight});
    return SelectTypicalPods(std::move(counts), percent_);
  }
  std::vector<TypicalPod> typical_;
  int percent_;
};

template <typename T>
StatusOr<PluginInstance> MakeSimple(const Json& arguments, const std::string& path,
                                    const char* name) {
  PluginInstance p;
  p.name = name;
  TESSERA_RETURN_IF_ERROR(ReadOnlyWeight(arguments, path, p.score_weight));
  p.score = std::make_shared<T>();
  return p;
}

}  // namespace

StatusOr<PluginInstance> MakeRandomPlugin(const Json& a, const std::string& path) {
  return MakeSimple<RandomScore>(a, path, "paper-random");
}
StatusOr<PluginInstance> MakeDotProdPlugin(const Json& a, const std::string& path) {
  return MakeSimple<DotProdScore>(a, path, "paper-dotprod");
}
StatusOr<PluginInstance> MakeGpuClusteringPlugin(const Json& a, const std::string& path) {
  return MakeSimple<GpuClusteringScorePlugin>(a, path, "paper-gpuclustering");
}
StatusOr<PluginInstance> MakeGpuPackingPlugin(const Json& a, const std::string& path) {
  return MakeSimple<GpuPackingScorePlugin>(a, path, "paper-gpupacking");
}
StatusOr<PluginInstance> MakeBestFitPlugin(const Json& a, const std::string& path) {
  return MakeSimple<BestFitScore>(a, path, "paper-bestfit");
}

StatusOr<PluginInstance> MakeFgdPlugin(const Json& arguments, const std::string& path) {
  PluginInstance p;
  p.name = "paper-fgd";
  const Json args = arguments.is_null() ? Json::object() : arguments;
  ObjectReader r(args, path);
  TESSERA_RETURN_IF_ERROR(r.Int("weight", p.score_weight));
  int32_t percent = 95;
  TESSERA_RETURN_IF_ERROR(r.Int32("percent", percent, false, 1));
  if (percent > 100)
    return InvalidArgument(r.Path("percent") + ": must be 1..100, got " + std::to_string(percent));
  std::vector<std::pair<PodShape, int64_t>> counts;
  if (const Json* list = r.Get("typicalPods")) {
    if (!list->is_array()) return InvalidArgument(r.Path("typicalPods") + ": expected a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string ip = r.Path("typicalPods") + "[" + std::to_string(i) + "]";
      ObjectReader tr((*list)[i], ip);
      PodShape s;
      int64_t count = 0;
      TESSERA_RETURN_IF_ERROR(tr.Int("cpuMilli", s.cpu_milli, true));
      TESSERA_RETURN_IF_ERROR(tr.Int32("gpuMilli", s.gpu_milli));
      TESSERA_RETURN_IF_ERROR(tr.Int32("gpus", s.gpus));
      TESSERA_RETURN_IF_ERROR(tr.String("gpuType", s.gpu_type));
      TESSERA_RETURN_IF_ERROR(tr.Int("count", count, true, 1));
      TESSERA_RETURN_IF_ERROR(tr.Finish());
      if (s.gpu_milli > 1000)
        return InvalidArgument(ip + ".gpuMilli: must be 0..1000, got " +
                               std::to_string(s.gpu_milli));
      if ((s.gpus == 0) != (s.gpu_milli == 0))
        return InvalidArgument(ip + ": gpus and gpuMilli must both be 0 (CPU-only) or both > 0");
      counts.push_back({s, count});
    }
  }
  TESSERA_RETURN_IF_ERROR(r.Finish());
  std::vector<TypicalPod> typical =
      counts.empty() ? std::vector<TypicalPod>{} : SelectTypicalPods(counts, percent);
  p.score = std::make_shared<FgdScorePlugin>(std::move(typical), percent);
  return p;
}

}  // namespace tessera::paper
