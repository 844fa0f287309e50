// Job-order plugins and the engine policies selected by name (gang, conformance, drf,
// proportion). Each Compare is a strict weak order; the engine ends every order in submit
// time and job id.
#include "engine/plugins/builtin.h"
#include "engine/plugins/registry.h"

namespace tessera {
namespace {

class PriorityOrder : public JobOrderPlugin {
 public:
  int Compare(const Job& a, const Job& b, const CycleContext&) const override {
    return a.priority == b.priority ? 0 : (a.priority > b.priority ? -1 : 1);
  }
};

class FifoOrder : public JobOrderPlugin {
 public:
  int Compare(const Job& a, const Job& b, const CycleContext&) const override {
    return a.submit_time == b.submit_time ? 0 : (a.submit_time < b.submit_time ? -1 : 1);
  }
};

// Shortest runtime estimate first; jobs without an estimate after all that have one.
class SjfOrder : public JobOrderPlugin {
 public:
  int Compare(const Job& a, const Job& b, const CycleContext&) const override {
    int64_t x = a.runtime_estimate_seconds.value_or(INT64_MAX);
    int64_t y = b.runtime_estimate_seconds.value_or(INT64_MAX);
    return x == y ? 0 : (x < y ? -1 : 1);
  }
};

// Least attained service first (Tiresias-like, no runtime knowledge needed).
class LasOrder : public JobOrderPlugin {
 public:
  int Compare(const Job& a, const Job& b, const CycleContext&) const override {
    int64_t x = a.attained_gpu_milli_seconds, y = b.attained_gpu_milli_seconds;
    return x == y ? 0 : (x < y ? -1 : 1);
  }
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
StatusOr<PluginInstance> MakeLas(const Json& a, const std::string& p) {
  return Order<LasOrder>("las", a, p);
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
