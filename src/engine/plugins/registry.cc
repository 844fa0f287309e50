// The one registry of engine plugins: one line per plugin, sorted by name at first use.
#include "engine/plugins/registry.h"

#include <algorithm>

#include "engine/plugins/builtin.h"
#include "engine/plugins/paper/paper_plugins.h"

namespace tessera {

const std::vector<PluginRegistration>& PluginRegistry() {
  static const std::vector<PluginRegistration>* registry = [] {
    auto* r = new std::vector<PluginRegistration>{
        // name, summary, factory
        {"binpack", "score: most allocated after placement (cpu, memory, gpu weights)",
         MakeBinpack},
        {"conformance",
         "policy: Volcano's conformance; accepted, no effect (no system-critical jobs)",
         MakeConformance},
        {"drf", "queues: weighted dominant resource share order", MakeDrf},
        {"fifo", "job order: earliest submit time first", MakeFifo},
        {"fragmentation",
         "score: FGD-style expected GPU fragmentation against the typical workload",
         MakeFragmentation},
        {"paper-bestfit", "score: FGD paper's BestFit (least cpu+gpu left, min-max normalised)",
         paper::MakeBestFitPlugin},
        {"paper-dotprod", "score: FGD paper's DotProd (free . request)", paper::MakeDotProdPlugin},
        {"paper-fgd", "score: FGD paper's fragmentation gradient descent, exact",
         paper::MakeFgdPlugin},
        {"paper-gpuclustering", "score: FGD paper's GpuClustering (same-shape tasks together)",
         paper::MakeGpuClusteringPlugin},
        {"paper-gpupacking", "score: FGD paper's GpuPacking (partly used GPUs first)",
         paper::MakeGpuPackingPlugin},
        {"paper-random", "score: FGD paper's Random (uniform feasible node, random device)",
         paper::MakeRandomPlugin},
        {"gang", "policy: all-or-nothing gang minimum (always on; accepted by name)", MakeGang},
        {"las", "job order: least attained GPU service first (Tiresias-like)", MakeLas},
        {"nodeaffinity", "score: preferred node affinity terms", MakeNodeAffinity},
        {"nodeorder",
         "score: Volcano's nodeorder (mostrequested, leastrequested, nodeaffinity, ...)",
         MakeNodeOrder},
        {"predicates", "filter: taints/tolerations, node selector, required node affinity",
         MakePredicates},
        {"priority", "job order: higher priority first", MakePriority},
        {"proportion", "queues: below-guarantee queues first, then weighted share", MakeProportion},
        {"sjf", "job order: shortest runtime estimate first", MakeSjf},
        {"spread", "score: least allocated after placement", MakeSpread},
        {"topology", "score: one interconnect domain per multi-GPU task; gangs kept together",
         MakeTopology},
        {"topologyspread",
         "score: ScheduleAnyway topology spread constraints (a service's tasks over nodes)",
         MakeTopologySpread},
    };
    std::sort(r->begin(), r->end(), [](const PluginRegistration& a, const PluginRegistration& b) {
      return std::string(a.name) < b.name;
    });
    return r;
  }();
  return *registry;
}

const PluginRegistration* FindPlugin(const std::string& name) {
  for (const auto& p : PluginRegistry())
    if (name == p.name) return &p;
  return nullptr;
}

StatusOr<PluginInstance> MakePlugin(const std::string& name, const Json& arguments,
                                    const std::string& path) {
  const PluginRegistration* reg = FindPlugin(name);
  if (reg == nullptr) {
    std::string known;
    for (const auto& p : PluginRegistry())
      known += (known.empty() ? "" : ", ") + std::string(p.name);
    return InvalidArgument(path + ".name: unknown plugin \"" + name + "\" (known: " + known + ")");
  }
  if (!arguments.is_null() && !arguments.is_object())
    return InvalidArgument(path + ".arguments: expected a map, got " +
                           std::string(arguments.type_name()));
  auto p = reg->factory(arguments.is_null() ? Json::object() : arguments, path + ".arguments");
  if (!p.ok()) return p.status();
  p->name = name;
  return p;
}

Status ReadOnlyWeight(const Json& arguments, const std::string& path, int64_t& weight) {
  const Json a = arguments.is_null() ? Json::object() : arguments;
  ObjectReader r(a, path);
  TESSERA_RETURN_IF_ERROR(r.Int("weight", weight));
  return r.Finish();
}

}  // namespace tessera
