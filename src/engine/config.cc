// Scheduler configuration: Tessera's own YAML and Volcano's scheduler.conf shape.
#include <algorithm>
#include <map>
#include <sstream>
#include <string_view>

#include "engine/engine.h"
#include "engine/plugins/registry.h"

namespace tessera {
namespace {

const char* const kActions[] = {"enqueue", "allocate", "preempt", "reclaim", "backfill"};

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Status ReadActions(const Json& v, std::vector<std::string>& out) {
  std::vector<std::pair<std::string, std::string>> items;  // (name, path)
  if (v.is_string()) {
    std::stringstream ss(v.get<std::string>());
    std::string part;
    for (int i = 0; std::getline(ss, part, ','); ++i)
      items.push_back({Trim(part), "actions[" + std::to_string(i) + "]"});
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string())
        return InvalidArgument("actions[" + std::to_string(i) + "]: expected an action name");
      items.push_back({Trim(v[i].get<std::string>()), "actions[" + std::to_string(i) + "]"});
    }
  } else {
    return InvalidArgument("actions: expected \"enqueue, allocate, backfill\" or a list");
  }
  out.clear();
  for (const auto& [name, path] : items) {
    if (std::find(std::begin(kActions), std::end(kActions), name) == std::end(kActions))
      return InvalidArgument(path + ": unknown action \"" + name +
                             "\" (known: enqueue, allocate, preempt, reclaim, backfill)");
    if (std::find(out.begin(), out.end(), name) != out.end())
      return InvalidArgument(path + ": action \"" + name + "\" listed twice");
    out.push_back(name);
  }
  if (out.empty()) return InvalidArgument("actions: at least one action");
  return Status::Ok();
}

StatusOr<EngineConfig::PluginConfig> ReadPlugin(const Json& v, const std::string& path) {
  EngineConfig::PluginConfig pc;
  if (v.is_string()) {
    pc.name = v.get<std::string>();
  } else {
    if (!v.is_object())
      return InvalidArgument(path + ": expected a plugin name or {name, arguments}");
    for (const auto& [k, val] : v.items()) {
      std::string p = path + "." + k;
      if (k == "name") {
        if (!val.is_string()) return InvalidArgument(p + ": expected a string");
        pc.name = val.get<std::string>();
      } else if (k == "arguments") {
        if (!val.is_null() && !val.is_object()) return InvalidArgument(p + ": expected a map");
        pc.arguments = val.is_null() ? Json::object() : val;
      } else if (k == "weight") {
        // Tessera shorthand: {name: binpack, weight: 2} == arguments: {weight: 2}.
        if (!val.is_number_integer() || val.get<int64_t>() < 0)
          return InvalidArgument(p + ": expected an integer >= 0");
        pc.arguments["weight"] = val;
      } else if (k.rfind("enable", 0) == 0) {
        if (!val.is_boolean()) return InvalidArgument(p + ": expected true or false");
        std::string sw = k.substr(k.rfind("enabled", 0) == 0 ? 7 : 6);
        static const char* const kSwitches[] = {
            "JobOrder",    "NodeOrder",   "Predicate",     "QueueOrder",     "Preemptable",
            "Reclaimable", "JobReady",    "JobPipelined",  "TaskOrder",      "Hierarchy",
            "BestNode",    "JobEnqueued", "Victim",        "JobStarving",    "Overused",
            "Allocatable", "TargetJob",   "ReservedNodes", "NamespaceOrder", "ClusterOrder"};
        if (std::find_if(std::begin(kSwitches), std::end(kSwitches),
                         [&](const char* s) { return sw == s; }) == std::end(kSwitches))
          return InvalidArgument(p + ": unknown field");
        pc.switches[sw] = val.get<bool>();
      } else {
        return InvalidArgument(p + ": unknown field");
      }
    }
  }
  if (pc.name.empty()) return InvalidArgument(path + ".name: required");
  auto made = MakePlugin(pc.name, pc.arguments, path);  // validates name and arguments
  if (!made.ok()) return made.status();
  return pc;
}

Status ReadPluginList(const Json& v, const std::string& path,
                      std::vector<EngineConfig::PluginConfig>& out) {
  if (!v.is_array()) return InvalidArgument(path + ": expected a list of plugins");
  for (size_t i = 0; i < v.size(); ++i) {
    auto pc = ReadPlugin(v[i], path + "[" + std::to_string(i) + "]");
    if (!pc.ok()) return pc.status();
    out.push_back(std::move(*pc));
  }
  return Status::Ok();
}

// Tessera's own form lists plugins by role. Each role given replaces the default's plugins
// of that role and keeps the others, so `scores:` alone changes placement only.
constexpr const char* kRoles[] = {"order", "policies", "filters", "scores"};

bool HasRole(const PluginInstance& p, std::string_view role) {
  if (role == "order") return p.order != nullptr || p.gang;
  if (role == "policies") return p.queue_drf || p.queue_proportion || p.name == "conformance";
  if (role == "filters") return p.filter != nullptr;
  return p.score != nullptr;
}

std::string RolesOf(const PluginInstance& p) {
  std::string out;
  for (const char* role : kRoles)
    if (HasRole(p, role)) out += (out.empty() ? "" : ", ") + std::string(role);
  return out.empty() ? "none" : out;
}

Status ReadRoleList(const Json& v, const std::string& role,
                    std::vector<EngineConfig::PluginConfig>& out) {
  TESSERA_RETURN_IF_ERROR(ReadPluginList(v, role, out));
  for (size_t i = 0; i < out.size(); ++i) {
    std::string path = role + "[" + std::to_string(i) + "]";
    auto p = MakePlugin(out[i].name, out[i].arguments, path);
    if (!p.ok()) return p.status();
    if (!HasRole(*p, role))
      return InvalidArgument(path + ": \"" + out[i].name + "\" is not one of the " + role +
                             " (it belongs under: " + RolesOf(*p) + ")");
  }
  return Status::Ok();
}

}  // namespace

EngineConfig DefaultEngineConfig() {
  EngineConfig c;
  c.actions = {"enqueue", "allocate", "preempt", "reclaim", "backfill"};
  auto P = [](const char* n, int64_t w = -1) {
    EngineConfig::PluginConfig p;
    p.name = n;
    if (w >= 0) p.arguments["weight"] = w;
    return p;
  };
  // Job order: priority, then least attained GPU service in levels (Tiresias-like: below one
  // GPU-hour, below ten, above; FIFO within a level; a job of a lower level may preempt one
  // of a higher level in its queue; starvation guard K = 8). Needs no runtime hints.
  EngineConfig::PluginConfig las = P("las");
  las.arguments = Json{{"thresholds", Json::array({3600, 36000})}, {"starvationFactor", 8}};
  // Placement: fragmentation (which packs: its near-ties go to the lowest node), topology,
  // preferred affinity. No binpack: as a tie-breaker it prefers small nodes by percent
  // used, which in mixed-model pools are often the scarce models (docs/engine.md).
  // topologyspread (weight 100) spreads services and ScheduleAnyway constraints first; it
  // scores every other job 0.
  c.tiers = {{P("priority"), P("gang"), las},
             {P("drf"), P("proportion"), P("predicates"), P("fragmentation", 1), P("topology", 1),
              P("nodeaffinity", 1), P("topologyspread", 100)}};
  return c;
}

StatusOr<EngineConfig> ParseEngineConfig(const Json& doc) {
  if (doc.is_null()) return DefaultEngineConfig();
  if (!doc.is_object()) return InvalidArgument("scheduler configuration: expected a map");
  EngineConfig c = DefaultEngineConfig();
  bool tiers_given = false;
  // Tessera's own order/policies/filters/scores lists, by role.
  std::map<std::string, std::vector<EngineConfig::PluginConfig>> native;
  for (const auto& [k, v] : doc.items()) {
    if (k == "actions") {
      TESSERA_RETURN_IF_ERROR(ReadActions(v, c.actions));
    } else if (k == "tiers") {
      if (!v.is_array()) return InvalidArgument("tiers: expected a list of {plugins: [...]}");
      c.tiers.clear();
      tiers_given = true;
      for (size_t i = 0; i < v.size(); ++i) {
        std::string p = "tiers[" + std::to_string(i) + "]";
        ObjectReader r(v[i], p);
        const Json* plugins = r.Get("plugins");
        TESSERA_RETURN_IF_ERROR(r.Finish());
        std::vector<EngineConfig::PluginConfig> tier;
        if (plugins != nullptr)
          TESSERA_RETURN_IF_ERROR(ReadPluginList(*plugins, r.Path("plugins"), tier));
        c.tiers.push_back(std::move(tier));
      }
    } else if (k == "order" || k == "filters" || k == "scores" || k == "policies") {
      TESSERA_RETURN_IF_ERROR(ReadRoleList(v, k, native[k]));
    } else if (k == "typicalRequests") {
      if (!v.is_array())
        return InvalidArgument("typicalRequests: expected a list of {resources, weight}");
      for (size_t i = 0; i < v.size(); ++i) {
        std::string p = "typicalRequests[" + std::to_string(i) + "]";
        ObjectReader r(v[i], p);
        TypicalRequest t;
        TESSERA_RETURN_IF_ERROR(r.Int("weight", t.weight, false, 1));
        const Json* res = r.Get("resources");
        if (res == nullptr) return InvalidArgument(p + ".resources: required");
        TESSERA_RETURN_IF_ERROR(ReadTaskResources(*res, r.Path("resources"), t.request));
        TESSERA_RETURN_IF_ERROR(r.Finish());
        c.typical_requests.push_back(std::move(t));
      }
    } else if (k == "preemptExemptSeconds") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return InvalidArgument("preemptExemptSeconds: expected an integer >= 0, got " + v.dump());
      c.preempt_exempt_seconds = v.get<int64_t>();
    } else {
      return InvalidArgument(
          k +
          ": unknown field (known: actions, tiers, order, filters, scores, policies, "
          "typicalRequests, preemptExemptSeconds)");
    }
  }
  if (!native.empty()) {
    if (tiers_given)
      return InvalidArgument("tiers: use either tiers or order/policies/filters/scores, not both");
    std::vector<EngineConfig::PluginConfig> defaults, tier;
    for (auto& t : c.tiers) defaults.insert(defaults.end(), t.begin(), t.end());
    for (const char* role : kRoles) {
      if (auto it = native.find(role); it != native.end()) {
        tier.insert(tier.end(), it->second.begin(), it->second.end());
        continue;
      }
      for (const auto& pc : defaults) {  // (each default plugin has one role)
        auto p = MakePlugin(pc.name, pc.arguments, "default");
        if (p.ok() && HasRole(*p, role)) tier.push_back(pc);
      }
    }
    c.tiers = {std::move(tier)};
  }
  return c;
}

StatusOr<EngineConfig> LoadEngineConfig(const std::string& path) {
  auto doc = LoadYamlFile(path);
  if (!doc.ok()) return doc.status();
  auto c = ParseEngineConfig(*doc);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

}  // namespace tessera
