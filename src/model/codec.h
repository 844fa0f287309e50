// Codec: the snapshot and plan in Tessera's own JSON/YAML shape.
//
// Reading is strict: an unknown or invalid field is an error that names its path
// ("nodes[2].gpus.count: must be >= 0, got -1"). Writing is canonical: integers only, keys
// in a fixed order, so equal plans serialise to equal bytes. The document shape is
// described in docs/model.md. Stateless functions; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/snapshot.h"

namespace tessera {

using Json = nlohmann::ordered_json;

// YAML or JSON text (JSON is YAML) to JSON, keeping key order. Scalars stay strings unless
// they are plainly numbers or booleans.
StatusOr<Json> ParseYaml(const std::string& text);
StatusOr<Json> LoadYamlFile(const std::string& path);
// JSON text alone (faster than ParseYaml), with ParseYaml's rule that a key must not repeat
// within one object (the parser would keep the last silently).
StatusOr<Json> ParseJson(const std::string& text);

// A reader of one JSON object that rejects unknown keys and reports paths.
class ObjectReader {
 public:
  ObjectReader(const Json& obj, std::string path);
  const std::string& path() const { return path_; }
  bool Has(const char* key);         // marks key as known
  const Json* Get(const char* key);  // nullptr when absent; marks key as known
  std::string Path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  Status String(const char* key, std::string& out, bool required = false);
  Status Int(const char* key, int64_t& out, bool required = false, int64_t min = 0);
  Status Int32(const char* key, int32_t& out, bool required = false, int32_t min = 0);
  Status Bool(const char* key, bool& out);
  Status Milli(const char* key, int64_t& out, bool required = false);  // "500m", 4, "1.5"
  Status Bytes(const char* key, int64_t& out, bool required = false);  // "64Gi", 1024
  Status StringMap(const char* key, std::map<std::string, std::string>& out);
  Status StringList(const char* key, std::vector<std::string>& out);
  // Fails if the object had a key nobody asked about, or is not an object.
  Status Finish() const;

 private:
  const Json& obj_;
  std::string path_;
  std::vector<std::string> known_;
};

// Quantity helpers shared by every document reader (`cpu: 4`, `memory: "64Gi"`).
StatusOr<int64_t> JsonMilli(const Json& v, const std::string& path);
StatusOr<int64_t> JsonBytes(const Json& v, const std::string& path);

// Resources map as in Kubernetes `resources.limits`: cpu, memory, nvidia.com/gpu,
// nvidia.com/mig-<profile>, tessera.io/gpu-milli, tessera.io/gpu-memory.
Status ReadTaskResources(const Json& resources, const std::string& path, TaskRequest& out);
Json TaskResourcesToJson(const TaskRequest& r);
Status ReadResourceVector(const Json& v, const std::string& path, ResourceVector& out);
Json ResourceVectorToJson(const ResourceVector& r);

StatusOr<Snapshot> SnapshotFromJson(const Json& doc);
Json SnapshotToJson(const Snapshot& s);
Json PlanToJson(const Plan& plan);
StatusOr<Plan> PlanFromJson(const Json& doc);

// Parts, for documents that embed them (server specs, scenario files).
StatusOr<Node> NodeFromJson(const Json& v, const std::string& path);
StatusOr<Job> JobFromJson(const Json& v, const std::string& path);
StatusOr<Queue> QueueFromJson(const Json& v, const std::string& path);
StatusOr<PriorityClass> PriorityClassFromJson(const Json& v, const std::string& path);
// One of a task group's `topologySpreadConstraints` (maxSkew, topologyKey, whenUnsatisfiable,
// minDomains, nodeAffinityPolicy, nodeTaintsPolicy), checked as Kubernetes checks them.
StatusOr<TopologySpreadConstraint> SpreadConstraintFromJson(const Json& v, const std::string& path);
// "NoSchedule", "PreferNoSchedule", "NoExecute"; else an error after `path`.
StatusOr<TaintEffect> ParseTaintEffect(const std::string& s, const std::string& path);
Json NodeToJson(const Node& n);
Json JobToJson(const Job& j);
Json QueueToJson(const Queue& q);

}  // namespace tessera
