#include "spec/spec.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <utility>

#include "common/hostlist.h"
#include "model/labels.h"

namespace tessera::spec {
namespace {

std::string Idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

Status TypeError(const std::string& path, const char* want, const Json& got) {
  return InvalidArgument(path + ": expected " + want + ", got " + std::string(got.type_name()));
}

// Marks fields that Kubernetes defines and that Tessera accepts but does not act on.
void Ignore(ObjectReader& r, std::initializer_list<const char*> keys) {
  for (const char* k : keys) r.Has(k);
}

Status Unsupported(const ObjectReader& r, const char* key, const char* why) {
  return InvalidArgument(r.Path(key) + ": not supported by Tessera (" + why + ")");
}

template <typename F>
Status ForEach(const Json* v, const std::string& path, F f) {
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return TypeError(path, "a list", *v);
  for (size_t i = 0; i < v->size(); ++i) TESSERA_RETURN_IF_ERROR(f((*v)[i], Idx(path, i)));
  return Status::Ok();
}

// Object names: DNS-label-like, as Kubernetes requires, so ids are safe in URLs and keys.
Status CheckName(const std::string& name, const std::string& path) {
  if (name.empty()) return InvalidArgument(path + ": required");
  if (name.size() > 253) return InvalidArgument(path + ": longer than 253 characters");
  // (As Kubernetes: in a URL or a path they would mean this folder or the one above.)
  if (name == "." || name == "..")
    return InvalidArgument(path + ": \"" + name + "\" is not a name");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_' || (c >= 'A' && c <= 'Z');
    if (!ok)
      return InvalidArgument(path + ": \"" + name +
                             "\" may contain only letters, digits, '-', '.' and '_'");
  }
  return Status::Ok();
}

struct Meta {
  std::string name;
  std::map<std::string, std::string> labels, annotations;
};

Status ReadMetadata(ObjectReader& top, Meta& m, bool name_required) {
  const Json* md = top.Get("metadata");
  if (md == nullptr) {
    if (name_required) return InvalidArgument(top.Path("metadata") + ".name: required");
    return Status::Ok();
  }
  ObjectReader r(*md, top.Path("metadata"));
  TESSERA_RETURN_IF_ERROR(r.String("name", m.name, name_required));
  if (!m.name.empty() || name_required) TESSERA_RETURN_IF_ERROR(CheckName(m.name, r.Path("name")));
  TESSERA_RETURN_IF_ERROR(r.StringMap("labels", m.labels));
  TESSERA_RETURN_IF_ERROR(r.StringMap("annotations", m.annotations));
  Ignore(r, {"namespace"});
  return r.Finish();
}

// The annotation `tessera.io/exclusive: "true"` on a Volcano or Kubernetes job: its nodes
// are its own (Job::exclusive; Tessera's own Job says `spec.exclusive`, sbatch --exclusive).
// Annotation values are strings: "true" or "false", anything else is refused.
Status ReadExclusiveAnnotation(const Meta& m, JobSpec& s) {
  constexpr char kKey[] = "tessera.io/exclusive";
  auto it = m.annotations.find(kKey);
  if (it == m.annotations.end()) return Status::Ok();
  if (it->second != "true" && it->second != "false")
    return InvalidArgument(std::string("metadata.annotations.") + kKey +
                           ": expected \"true\" or \"false\", got \"" + it->second + "\"");
  s.job.exclusive = it->second == "true";
  return Status::Ok();
}

// sbatch's dependency list, "afterok:12:prep,afterany:13": every item must hold. A job is
// named by its sbatch job id (digits: its slurmJobId) or its Tessera name; the server
// resolves both when the job is submitted.
StatusOr<std::vector<Dependency>> ParseDependencies(const std::string& text,
                                                    const std::string& path) {
  constexpr size_t kMaxDependencies = 100;
  if (text.find('?') != std::string::npos)
    return InvalidArgument(path +
                           ": \"?\" (any one of) is not supported: every dependency "
                           "listed must hold (separate them with \",\")");
  std::vector<Dependency> out;
  std::stringstream items(text + ",");  // (a trailing "," then reads as an empty item)
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::string at = path + ": \"" + item + "\"";
    // A bare job id is afterany on it, as sbatch reads `-d 12`.
    if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos)
      item = "afterany:" + item;
    const size_t colon = item.find(':');
    const std::string type = item.substr(0, colon);
    if (type == "singleton")
      return InvalidArgument(at +
                             ": singleton is not supported (Tessera job names are "
                             "unique: there is no other job of the same name to wait for)");
    if (type == "aftercorr" || type == "afterburstbuffer")
      return InvalidArgument(at + ": " + type +
                             " is not supported (after, afterany, afterok, "
                             "afternotok)");
    static constexpr std::pair<const char*, Dependency::Condition> kConditions[] = {
        {"after", Dependency::Condition::kAfter},
        {"afterany", Dependency::Condition::kAfterAny},
        {"afterok", Dependency::Condition::kAfterOk},
        {"afternotok", Dependency::Condition::kAfterNotOk}};
    const auto* c = std::find_if(std::begin(kConditions), std::end(kConditions),
                                 [&](const auto& k) { return type == k.first; });
    if (item.empty() || colon == std::string::npos || c == std::end(kConditions))
      return InvalidArgument(at +
                             ": expected CONDITION:JOB[:JOB...] with CONDITION one of "
                             "after, afterany, afterok, afternotok (e.g. afterok:prep)");
    std::stringstream jobs(item.substr(colon + 1) + ":");
    std::string job;
    while (std::getline(jobs, job, ':')) {
      if (job.find('+') != std::string::npos)
        return InvalidArgument(at + ": a delay (JOB+MINUTES) is not supported");
      if (job.empty())
        return InvalidArgument(at + ": a job name or id is missing (e.g. afterok:prep)");
      TESSERA_RETURN_IF_ERROR(CheckName(job, at));
      out.push_back({c->second, job, 0, false});
    }
    if (out.size() > kMaxDependencies)
      return InvalidArgument(path + ": more than " + std::to_string(kMaxDependencies) +
                             " dependencies");
  }
  return out;
}

// The annotation `tessera.io/dependency` on any YAML job: sbatch's --dependency syntax.
Status ReadDependencyAnnotation(const Meta& m, JobSpec& s) {
  auto it = m.annotations.find("tessera.io/dependency");
  if (it == m.annotations.end()) return Status::Ok();
  auto d = ParseDependencies(it->second, s.origin.dependency);
  if (!d.ok()) return d.status();
  s.dependencies = std::move(*d);
  return Status::Ok();
}

// ---- Kubernetes pod templates ----

struct PodInfo {
  TaskRequest request;
  TaskTemplate tmpl;
  // The containers' CPU and memory limits summed; a container without one leaves the pod
  // uncapped for that resource, as a pod's cgroup is in Kubernetes (-1).
  int64_t cpu_limit_milli = 0, memory_limit_bytes = 0;
  std::map<std::string, std::string> node_selector;
  NodeAffinity affinity;
  std::vector<Json> tolerations;  // passed through the model codec
  std::string priority_class;
  std::optional<int64_t> grace_period;
  std::optional<int64_t> active_deadline;
  std::string restart_policy = "Always";
  std::vector<TopologySpreadConstraint> spread;  // topologySpreadConstraints
  // securityContext of the pod and of its first container (the one the agent runs), merged
  // in ReadPodSpec; where each field was given, for the error of a merged conflict.
  struct Identity {
    RunAs run_as;
    std::string user_path, non_root_path;
  };
  Identity pod_identity;
  std::vector<Identity> container_identities;  // one per container
  struct SpreadSelector;
  std::vector<std::shared_ptr<const SpreadSelector>> spread_selectors;  // one per constraint
};

// A constraint's labelSelector (matchLabels, matchExpressions), as Kubernetes validates
// it. Tessera counts the constraint's own task group only, so the selector must select
// that group's pods (and, in a Volcano job, no other task's).
struct PodInfo::SpreadSelector {
  std::map<std::string, std::string> match_labels;
  struct Expression {
    std::string key, op;
    std::vector<std::string> values;
  };
  std::vector<Expression> expressions;
  bool Matches(const std::map<std::string, std::string>& labels) const {
    for (const auto& [k, v] : match_labels)
      if (auto it = labels.find(k); it == labels.end() || it->second != v) return false;
    for (const Expression& e : expressions) {
      auto it = labels.find(e.key);
      const bool has = it != labels.end();
      const bool in =
          has && std::find(e.values.begin(), e.values.end(), it->second) != e.values.end();
      if ((e.op == "In" && !in) || (e.op == "NotIn" && in) || (e.op == "Exists" && !has) ||
          (e.op == "DoesNotExist" && has))
        return false;
    }
    return true;
  }
};

Status AddRequests(TaskRequest& total, const TaskRequest& c, const std::string& path) {
  total.cpu_milli += c.cpu_milli;
  total.memory_bytes += c.memory_bytes;
  if (c.gpu.kind != GpuRequestKind::kNone) {
    if (total.gpu.kind != GpuRequestKind::kNone)
      return InvalidArgument(path + ": GPUs may be requested by one container of a pod only");
    total.gpu = c.gpu;
  }
  return Status::Ok();
}

// As Kubernetes: a request above its limit is an error (the scheduler would reserve what
// the task may never use), and extended resources (GPUs) must request exactly their limit.
Status CheckRequestsWithinLimits(const Json& requests, const Json& limits,
                                 const std::string& path) {
  for (const auto& [name, rv] : requests.items()) {
    if (!limits.contains(name)) continue;
    const Json& lv = limits[name];
    std::string p = path + "." + name;
    bool bytes = name == "memory" || name == "tessera.io/gpu-memory";
    auto r = bytes ? JsonBytes(rv, p) : JsonMilli(rv, p);
    auto l = bytes ? JsonBytes(lv, p) : JsonMilli(lv, p);
    if (!r.ok()) return r.status();
    if (!l.ok()) return l.status();
    if (name == "cpu" || name == "memory") {
      if (*r > *l)
        return InvalidArgument(p + ": " + rv.dump() + " is more than its limit " + lv.dump());
    } else if (*r != *l) {
      return InvalidArgument(p + ": " + rv.dump() + " must equal its limit " + lv.dump() +
                             " (GPUs cannot be overcommitted)");
    }
  }
  return Status::Ok();
}

// A Kubernetes securityContext: the identity fields read (RunAsFromJson checks them as
// Kubernetes does), the others accepted and ignored (the agent runs processes, not
// containers), anything else refused. supplementalGroups is the pod's alone, as in
// Kubernetes.
Status ReadSecurityContext(const Json& v, const std::string& path, bool pod,
                           PodInfo::Identity& out) {
  if (!v.is_object()) return TypeError(path, "an object", v);
  static const std::set<std::string> kPodIgnored = {"seLinuxOptions",
                                                    "windowsOptions",
                                                    "fsGroup",
                                                    "fsGroupChangePolicy",
                                                    "sysctls",
                                                    "seccompProfile",
                                                    "appArmorProfile",
                                                    "supplementalGroupsPolicy",
                                                    "seLinuxChangePolicy"};
  static const std::set<std::string> kContainerIgnored = {"capabilities",
                                                          "privileged",
                                                          "seLinuxOptions",
                                                          "windowsOptions",
                                                          "readOnlyRootFilesystem",
                                                          "allowPrivilegeEscalation",
                                                          "procMount",
                                                          "seccompProfile",
                                                          "appArmorProfile"};
  Json identity = Json::object();
  for (const auto& [k, x] : v.items()) {
    if (k == "runAsUser" || k == "runAsGroup" || k == "runAsNonRoot" ||
        (pod && k == "supplementalGroups")) {
      identity[k] = x;
    } else if (!(pod ? kPodIgnored : kContainerIgnored).count(k)) {
      return InvalidArgument(path + "." + k + ": unknown field" +
                             (k == "supplementalGroups"
                                  ? " (a pod's, as in Kubernetes: give it in the pod's "
                                    "spec.securityContext)"
                                  : ""));
    }
  }
  auto r = RunAsFromJson(identity, path);
  if (!r.ok()) return r.status();
  out.run_as = std::move(*r);
  if (out.run_as.user) out.user_path = path + ".runAsUser";
  if (out.run_as.non_root) out.non_root_path = path + ".runAsNonRoot";
  return Status::Ok();
}

// The identity the agent gets: the container's fields over the pod's, as Kubernetes merges
// a pod's and a container's securityContext.
StatusOr<RunAs> MergeIdentity(const PodInfo::Identity& pod, const PodInfo::Identity& container) {
  RunAs r = pod.run_as;
  const RunAs& c = container.run_as;
  if (c.user) r.user = c.user;
  if (c.group) r.group = c.group;
  r.non_root = r.non_root || c.non_root;
  if (r.non_root && r.user == 0) {
    const std::string& non_root =
        container.non_root_path.empty() ? pod.non_root_path : container.non_root_path;
    const std::string& user = c.user ? container.user_path : pod.user_path;
    return InvalidArgument(non_root + ": true, but " + user + " is 0 (root): the task could " +
                           "never start");
  }
  return r;
}

Status ReadContainer(const Json& c, const std::string& path, PodInfo& pod, TaskTemplate* tmpl) {
  TaskRequest& req = pod.request;
  int64_t cpu_limit = -1, memory_limit = -1;  // -1: this container gives none
  ObjectReader r(c, path);
  std::string name;
  TESSERA_RETURN_IF_ERROR(r.String("name", name));
  std::vector<std::string> command, args;
  TESSERA_RETURN_IF_ERROR(r.StringList("command", command));
  TESSERA_RETURN_IF_ERROR(r.StringList("args", args));
  std::string image, wd;
  TESSERA_RETURN_IF_ERROR(r.String("image", image));
  TESSERA_RETURN_IF_ERROR(r.String("workingDir", wd));
  std::map<std::string, std::string> env;
  std::vector<std::string> env_order;  // as declared: $(VAR) sees the ones before it
  TESSERA_RETURN_IF_ERROR(
      ForEach(r.Get("env"), r.Path("env"), [&](const Json& e, const std::string& p) -> Status {
        ObjectReader er(e, p);
        std::string n, v;
        TESSERA_RETURN_IF_ERROR(er.String("name", n, true));
        TESSERA_RETURN_IF_ERROR(er.String("value", v));
        if (er.Has("valueFrom"))
          return Unsupported(er, "valueFrom", "processes get literal values only");
        TESSERA_RETURN_IF_ERROR(er.Finish());
        if (!env.count(n)) env_order.push_back(n);
        env[n] = v;
        return Status::Ok();
      }));
  if (const Json* res = r.Get("resources")) {
    ObjectReader rr(*res, r.Path("resources"));
    // Scheduling uses requests where given (as Kubernetes does), limits otherwise; GPUs must
    // be in limits (extended resources), and requests may repeat them.
    Json merged = Json::object();
    if (const Json* l = rr.Get("limits")) {
      if (!l->is_object()) return TypeError(rr.Path("limits"), "a map of resource quantities", *l);
      for (const auto& [k, v] : l->items()) merged[k] = v;
    }
    if (const Json* q = rr.Get("requests")) {
      if (!q->is_object())
        return TypeError(rr.Path("requests"), "a map of resource quantities", *q);
      for (const auto& [k, v] : q->items()) merged[k] = v;
      // Validate requests on their own so the path names the right map.
      TaskRequest tmp;
      TESSERA_RETURN_IF_ERROR(ReadTaskResources(*q, rr.Path("requests"), tmp));
    }
    TESSERA_RETURN_IF_ERROR(rr.Finish());
    if (const Json* l = rr.Get("limits")) {
      TaskRequest tmp;
      TESSERA_RETURN_IF_ERROR(ReadTaskResources(*l, rr.Path("limits"), tmp));
      if (l->contains("cpu")) cpu_limit = tmp.cpu_milli;
      if (l->contains("memory")) memory_limit = tmp.memory_bytes;
      if (const Json* q = rr.Get("requests"))
        TESSERA_RETURN_IF_ERROR(CheckRequestsWithinLimits(*q, *l, rr.Path("requests")));
    }
    // As Kubernetes: an extended resource (a GPU, a MIG instance, a share of one) cannot be
    // overcommitted, so a request needs its limit ("Limit must be set for non overcommitable
    // resources").
    if (const Json* q = rr.Get("requests"); q != nullptr) {
      const Json* l = rr.Get("limits");
      for (const auto& [name, v] : q->items())
        if (name != "cpu" && name != "memory" && (l == nullptr || !l->contains(name)))
          return InvalidArgument(rr.Path("limits") + "." + name + ": required, equal to " +
                                 rr.Path("requests") + "." + name +
                                 " (as Kubernetes: a limit must be set for a resource that "
                                 "cannot be overcommitted)");
    }
    TaskRequest c;
    TESSERA_RETURN_IF_ERROR(ReadTaskResources(merged, r.Path("resources"), c));
    TESSERA_RETURN_IF_ERROR(AddRequests(req, c, path));
  }
  auto add_limit = [](int64_t& pod_total, int64_t mine) {
    pod_total = pod_total < 0 || mine < 0 ? -1 : pod_total + mine;
  };
  add_limit(pod.cpu_limit_milli, cpu_limit);
  add_limit(pod.memory_limit_bytes, memory_limit);
  PodInfo::Identity identity;
  if (const Json* sc = r.Get("securityContext"))
    TESSERA_RETURN_IF_ERROR(ReadSecurityContext(*sc, r.Path("securityContext"), false, identity));
  pod.container_identities.push_back(std::move(identity));
  Ignore(r, {"ports", "volumeMounts", "imagePullPolicy", "livenessProbe", "readinessProbe",
             "startupProbe", "terminationMessagePath", "terminationMessagePolicy", "stdin", "tty"});
  if (r.Has("envFrom")) return Unsupported(r, "envFrom", "processes get literal env values only");
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (tmpl != nullptr) {
    // args without a command are the arguments of the image's entrypoint, which is not run
    // here: left without a command, the task is refused naming it (ParseDocument), rather
    // than its first argument run as the program.
    if (!command.empty()) {
      tmpl->command = command;
      tmpl->command.insert(tmpl->command.end(), args.begin(), args.end());
    }
    tmpl->env = std::move(env);
    tmpl->env_order = std::move(env_order);
    tmpl->expand_references = true;
    tmpl->working_dir = wd;
    tmpl->image = image;
  }
  return Status::Ok();
}

// Kubernetes nodeAffinity -> the model's terms, via the model codec's own shape.
Status ReadAffinity(const Json& a, const std::string& path, NodeAffinity& out) {
  ObjectReader r(a, path);
  if (r.Has("podAffinity"))
    return Unsupported(r, "podAffinity", "use nodeAffinity or the gang's minAvailable");
  if (r.Has("podAntiAffinity")) return Unsupported(r, "podAntiAffinity", "use nodeAffinity");
  if (const Json* na = r.Get("nodeAffinity")) {
    ObjectReader nr(*na, r.Path("nodeAffinity"));
    Json model = Json::object();
    const std::string required = nr.Path("requiredDuringSchedulingIgnoredDuringExecution");
    const std::string preferred = nr.Path("preferredDuringSchedulingIgnoredDuringExecution");
    if (const Json* req = nr.Get("requiredDuringSchedulingIgnoredDuringExecution")) {
      ObjectReader qr(*req, required);
      const Json* terms = qr.Get("nodeSelectorTerms");
      if (terms == nullptr) return InvalidArgument(qr.Path("nodeSelectorTerms") + ": required");
      TESSERA_RETURN_IF_ERROR(qr.Finish());
      // As Kubernetes: at least one term, each an object (the model codec also takes a bare
      // list of requirements, which Kubernetes does not).
      if (terms->is_array() && terms->empty())
        return InvalidArgument(qr.Path("nodeSelectorTerms") +
                               ": must have at least one node selector term");
      TESSERA_RETURN_IF_ERROR(ForEach(
          terms, qr.Path("nodeSelectorTerms"), [](const Json& t, const std::string& p) -> Status {
            if (!t.is_object()) return TypeError(p, "an object with matchExpressions", t);
            if (t.contains("matchFields"))
              return InvalidArgument(p +
                                     ".matchFields: not supported (use matchExpressions on "
                                     "kubernetes.io/hostname, which every node carries)");
            return Status::Ok();
          }));
      model["required"] = *terms;
    }
    if (const Json* pref = nr.Get("preferredDuringSchedulingIgnoredDuringExecution")) {
      TESSERA_RETURN_IF_ERROR(
          ForEach(pref, preferred, [](const Json& t, const std::string& p) -> Status {
            if (t.is_object() && t.contains("preference") && !t["preference"].is_object())
              return TypeError(p + ".preference", "an object with matchExpressions",
                               t["preference"]);
            return Status::Ok();
          }));
      model["preferred"] = *pref;
    }
    TESSERA_RETURN_IF_ERROR(nr.Finish());
    // Parse through the model codec, then put its paths back onto the Kubernetes ones.
    Json job = {{"id", "x"}, {"affinity", model}, {"tasks", Json::array({Json::object()})}};
    auto j = JobFromJson(job, "\x01");
    if (!j.ok()) {
      std::string m = j.status().message();
      for (const auto& [from, to] : {std::pair<std::string, std::string>{
                                         "\x01.affinity.required", required + ".nodeSelectorTerms"},
                                     {"\x01.affinity.preferred", preferred},
                                     {"\x01.affinity", r.Path("nodeAffinity")},
                                     {"\x01", r.Path("nodeAffinity")}})
        for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at))
          m.replace(at, from.size(), to), at += to.size();
      return InvalidArgument(m);
    }
    out = j->placement.affinity;
  }
  return r.Finish();
}

// A Kubernetes toleration in the model codec's shape (which reads the rest and refuses
// unknown fields). tolerationSeconds is how long Kubernetes lets a pod stay on a node that
// gets a NoExecute taint, so it needs that effect, as Kubernetes says; Tessera does not
// evict for taints, and drops it. An empty operator is Equal, as in Kubernetes.
StatusOr<Json> KubeToleration(Json tol, const std::string& path) {
  if (!tol.is_object()) return tol;  // (the codec names what it is)
  if (tol.contains("tolerationSeconds")) {
    const Json& seconds = tol["tolerationSeconds"];
    if (!seconds.is_number_integer())
      return TypeError(path + ".tolerationSeconds", "an integer (seconds)", seconds);
    const Json effect = tol.value("effect", Json(""));
    if (effect != "NoExecute")
      return InvalidArgument(path + ".effect: must be NoExecute when tolerationSeconds is set (" +
                             "how long a NoExecute taint is tolerated), got " + effect.dump());
    tol.erase("tolerationSeconds");
  }
  if (tol.contains("operator") && tol["operator"] == "") tol.erase("operator");
  return tol;
}

Status LabelKeyError(const std::string& key, const std::string& at) {
  if (std::string why = LabelKeyProblem(key); !why.empty())
    return InvalidArgument(at + ": \"" + key + "\" is not a label key: " + why);
  return Status::Ok();
}

// A Kubernetes labelSelector (matchLabels, matchExpressions), checked as Kubernetes' API
// validation checks it.
Status ReadLabelSelector(const Json& ls, const std::string& path, PodInfo::SpreadSelector& out) {
  ObjectReader sr(ls, path);
  TESSERA_RETURN_IF_ERROR(sr.StringMap("matchLabels", out.match_labels));
  for (const auto& [k, v] : out.match_labels) {
    TESSERA_RETURN_IF_ERROR(LabelKeyError(k, sr.Path("matchLabels")));
    if (std::string why = LabelValueProblem(v); !why.empty())
      return InvalidArgument(sr.Path("matchLabels") + "." + k + ": \"" + v +
                             "\" is not a label value: " + why);
  }
  TESSERA_RETURN_IF_ERROR(ForEach(
      sr.Get("matchExpressions"), sr.Path("matchExpressions"),
      [&](const Json& e, const std::string& ep) -> Status {
        PodInfo::SpreadSelector::Expression x;
        ObjectReader er(e, ep);
        TESSERA_RETURN_IF_ERROR(er.String("key", x.key, true));
        TESSERA_RETURN_IF_ERROR(er.String("operator", x.op, true));
        TESSERA_RETURN_IF_ERROR(er.StringList("values", x.values));
        TESSERA_RETURN_IF_ERROR(er.Finish());
        TESSERA_RETURN_IF_ERROR(LabelKeyError(x.key, er.Path("key")));
        const bool set = x.op == "In" || x.op == "NotIn";
        if (!set && x.op != "Exists" && x.op != "DoesNotExist")
          return InvalidArgument(er.Path("operator") + ": unknown \"" + x.op +
                                 "\" (In, NotIn, Exists, DoesNotExist)");
        if (set && x.values.empty())
          return InvalidArgument(er.Path("values") + ": required when operator is In or NotIn");
        if (!set && !x.values.empty())
          return InvalidArgument(er.Path("values") +
                                 ": must be empty when operator is Exists or DoesNotExist");
        out.expressions.push_back(std::move(x));
        return Status::Ok();
      }));
  return sr.Finish();
}

// One of a pod template's topologySpreadConstraints: the selector and matchLabelKeys here,
// the rest through the model codec (which refuses unknown fields).
Status ReadSpreadConstraint(const Json& c, const std::string& p, PodInfo& out) {
  if (!c.is_object()) return TypeError(p, "an object", c);
  auto sel = std::make_shared<PodInfo::SpreadSelector>();
  Json rest = c;
  ObjectReader r(c, p);
  const Json* ls = r.Get("labelSelector");
  if (ls == nullptr)
    return InvalidArgument(r.Path("labelSelector") +
                           ": required here: without it Kubernetes counts no pod and the "
                           "constraint spreads nothing; select the template's own labels "
                           "(matchLabels: {app: web})");
  TESSERA_RETURN_IF_ERROR(ReadLabelSelector(*ls, r.Path("labelSelector"), *sel));
  std::vector<std::string> keys;
  TESSERA_RETURN_IF_ERROR(r.StringList("matchLabelKeys", keys));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string at = Idx(r.Path("matchLabelKeys"), i);
    TESSERA_RETURN_IF_ERROR(LabelKeyError(keys[i], at));
    const bool in_selector = sel->match_labels.count(keys[i]) > 0 ||
                             std::any_of(sel->expressions.begin(), sel->expressions.end(),
                                         [&](const auto& e) { return e.key == keys[i]; });
    if (in_selector)
      return InvalidArgument(at + ": \"" + keys[i] + "\" exists in both matchLabelKeys and " +
                             "labelSelector");
    if (std::find(keys.begin(), keys.begin() + i, keys[i]) != keys.begin() + i)
      return InvalidArgument(at + ": duplicate \"" + keys[i] + "\"");
  }
  // (matchLabelKeys narrow the selection to pods of the same revision: the group's own
  // tasks are one already.)
  rest.erase("labelSelector");
  rest.erase("matchLabelKeys");
  auto model = SpreadConstraintFromJson(rest, p);
  if (!model.ok()) return model.status();
  out.spread.push_back(*model);
  out.spread_selectors.push_back(std::move(sel));
  return Status::Ok();
}

// Each constraint must select its own pods (labelled `labels`): it counts them only.
Status CheckSpreadSelectsOwn(const PodInfo& pod, const std::map<std::string, std::string>& labels,
                             const std::string& path) {
  for (size_t i = 0; i < pod.spread_selectors.size(); ++i)
    if (!pod.spread_selectors[i]->Matches(labels))
      return InvalidArgument(Idx(path + ".topologySpreadConstraints", i) +
                             ".labelSelector: selects none of this template's own pods (labels " +
                             Json(labels).dump() +
                             "): a constraint spreads its own task's pods here, never other "
                             "jobs' pods");
  return Status::Ok();
}

Status ReadPodSpec(const Json& spec, const std::string& path, PodInfo& out) {
  ObjectReader r(spec, path);
  const Json* containers = r.Get("containers");
  if (containers == nullptr) return InvalidArgument(r.Path("containers") + ": required");
  if (!containers->is_array() || containers->empty())
    return InvalidArgument(r.Path("containers") + ": expected a non-empty list");
  for (size_t i = 0; i < containers->size(); ++i)
    TESSERA_RETURN_IF_ERROR(ReadContainer((*containers)[i], Idx(r.Path("containers"), i), out,
                                          i == 0 ? &out.tmpl : nullptr));
  out.tmpl.cpu_limit_milli = std::max<int64_t>(0, out.cpu_limit_milli);
  out.tmpl.memory_limit_bytes = std::max<int64_t>(0, out.memory_limit_bytes);
  if (r.Has("initContainers"))
    return Unsupported(r, "initContainers", "run setup in the task's command");
  TESSERA_RETURN_IF_ERROR(r.StringMap("nodeSelector", out.node_selector));
  if (const Json* a = r.Get("affinity"))
    TESSERA_RETURN_IF_ERROR(ReadAffinity(*a, r.Path("affinity"), out.affinity));
  TESSERA_RETURN_IF_ERROR(ForEach(r.Get("tolerations"), r.Path("tolerations"),
                                  [&](const Json& t, const std::string& p) -> Status {
                                    auto tol = KubeToleration(t, p);
                                    if (!tol.ok()) return tol.status();
                                    out.tolerations.push_back(std::move(*tol));
                                    return Status::Ok();
                                  }));
  TESSERA_RETURN_IF_ERROR(r.String("priorityClassName", out.priority_class));
  if (r.Has("terminationGracePeriodSeconds")) {
    int64_t g = 0;
    TESSERA_RETURN_IF_ERROR(r.Int("terminationGracePeriodSeconds", g));
    out.grace_period = g;
  }
  if (r.Has("activeDeadlineSeconds")) {
    int64_t d = 0;
    TESSERA_RETURN_IF_ERROR(r.Int("activeDeadlineSeconds", d, false, 1));
    out.active_deadline = d;
  }
  TESSERA_RETURN_IF_ERROR(r.String("restartPolicy", out.restart_policy));
  if (out.restart_policy != "Always" && out.restart_policy != "OnFailure" &&
      out.restart_policy != "Never")
    return InvalidArgument(r.Path("restartPolicy") + ": unknown \"" + out.restart_policy +
                           "\" (Always, OnFailure, Never)");
  TESSERA_RETURN_IF_ERROR(ForEach(r.Get("topologySpreadConstraints"),
                                  r.Path("topologySpreadConstraints"),
                                  [&](const Json& c, const std::string& p) -> Status {
                                    return ReadSpreadConstraint(c, p, out);
                                  }));
  for (size_t i = 0; i < out.spread.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (out.spread[k].topology_key == out.spread[i].topology_key &&
          out.spread[k].schedule_anyway == out.spread[i].schedule_anyway)
        return InvalidArgument(Idx(r.Path("topologySpreadConstraints"), i) +
                               ": duplicate {topologyKey, whenUnsatisfiable} of [" +
                               std::to_string(k) + "]");
  std::string scheduler;
  TESSERA_RETURN_IF_ERROR(r.String("schedulerName", scheduler));
  if (const Json* sc = r.Get("securityContext"))
    TESSERA_RETURN_IF_ERROR(
        ReadSecurityContext(*sc, r.Path("securityContext"), true, out.pod_identity));
  // Every container's is checked, as Kubernetes would refuse to start any of them; the
  // first container's is the one that runs.
  for (size_t i = 0; i < out.container_identities.size(); ++i) {
    auto run_as = MergeIdentity(out.pod_identity, out.container_identities[i]);
    if (!run_as.ok()) return run_as.status();
    if (i == 0) out.tmpl.run_as = std::move(*run_as);
  }
  Ignore(r,
         {"volumes", "serviceAccountName", "serviceAccount", "hostNetwork", "hostIPC", "dnsPolicy",
          "imagePullSecrets", "shmSize", "enableServiceLinks", "subdomain", "hostname"});
  return r.Finish();
}

struct Template {
  PodInfo pod;
  std::map<std::string, std::string> labels;
};

Status ReadPodTemplate(const Json* t, const std::string& path, Template& out) {
  if (t == nullptr) return InvalidArgument(path + ": required");
  ObjectReader r(*t, path);
  if (const Json* md = r.Get("metadata")) {
    ObjectReader mr(*md, r.Path("metadata"));
    TESSERA_RETURN_IF_ERROR(mr.StringMap("labels", out.labels));
    std::map<std::string, std::string> ann;
    TESSERA_RETURN_IF_ERROR(mr.StringMap("annotations", ann));
    Ignore(mr, {"name", "namespace"});
    TESSERA_RETURN_IF_ERROR(mr.Finish());
  }
  const Json* spec = r.Get("spec");
  if (spec == nullptr) return InvalidArgument(r.Path("spec") + ": required");
  TESSERA_RETURN_IF_ERROR(ReadPodSpec(*spec, r.Path("spec"), out.pod));
  TESSERA_RETURN_IF_ERROR(CheckSpreadSelectsOwn(out.pod, out.labels, r.Path("spec")));
  return r.Finish();
}

// ---- placement checks ----
// What Kubernetes' API validation refuses in a node selector, a node affinity and
// tolerations, checked on the parsed values so that every shape carrying them (pod
// templates, Tessera's own Job) is held to the same rules. Not in the model codec, which
// also reads what a server stored before these checks existed.

// Where a placement's parts are, in the document's own shape.
struct PlacementPaths {
  std::string node_selector, tolerations, required_terms, preferred;
};

PlacementPaths KubePlacementPaths(const std::string& pod_spec) {
  const std::string node_affinity = pod_spec + ".affinity.nodeAffinity.";
  return {pod_spec + ".nodeSelector", pod_spec + ".tolerations",
          node_affinity + "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
          node_affinity + "preferredDuringSchedulingIgnoredDuringExecution"};
}

PlacementPaths TesseraPlacementPaths(const std::string& at) {
  return {at + ".nodeSelector", at + ".tolerations", at + ".affinity.required",
          at + ".affinity.preferred"};
}

Status CheckLabelKey(const std::string& key, const std::string& path) {
  if (std::string why = LabelKeyProblem(key); !why.empty())
    return InvalidArgument(path + ": \"" + key + "\" is not a label key: " + why);
  return Status::Ok();
}

Status CheckLabelValue(const std::string& value, const std::string& path) {
  if (std::string why = LabelValueProblem(value); !why.empty())
    return InvalidArgument(path + ": \"" + value + "\" is not a label value: " + why);
  return Status::Ok();
}

// Kubernetes reads Gt and Lt values as 64-bit integers, as Go's ParseInt: an optional sign
// (from_chars takes '-' only), then digits.
bool IsInt64(const std::string& v) {
  const bool plus = !v.empty() && v[0] == '+';
  const char* begin = v.data() + (plus ? 1 : 0);
  const char* end = v.data() + v.size();
  int64_t x = 0;
  auto [at, ec] = std::from_chars(begin, end, x);
  return ec == std::errc() && at == end && !(plus && *begin == '-');
}

// The values each operator takes, as Kubernetes' ValidateNodeSelectorRequirement says.
Status CheckRequirement(const NodeSelectorRequirement& e, const std::string& path) {
  using Op = NodeSelectorRequirement::Op;
  TESSERA_RETURN_IF_ERROR(CheckLabelKey(e.key, path + ".key"));
  const std::string values = path + ".values";
  switch (e.op) {
    case Op::kIn:
    case Op::kNotIn:
      if (e.values.empty())
        return InvalidArgument(values + ": required when operator is In or NotIn");
      return Status::Ok();
    case Op::kExists:
    case Op::kDoesNotExist:
      if (!e.values.empty())
        return InvalidArgument(values + ": must be empty when operator is Exists or DoesNotExist" +
                               " (they test the key alone), got " + Json(e.values).dump());
      return Status::Ok();
    case Op::kGt:
    case Op::kLt:
      if (e.values.size() != 1)
        return InvalidArgument(values + ": must be a single integer when operator is Gt or Lt, " +
                               "got " + Json(e.values).dump());
      if (!IsInt64(e.values[0]))
        return InvalidArgument(Idx(values, 0) + ": \"" + e.values[0] +
                               "\" is not an integer (Gt and Lt compare the label's value as a "
                               "number)");
      return Status::Ok();
  }
  return Status::Ok();
}

Status CheckTerm(const NodeSelectorTerm& t, const std::string& path) {
  const std::string list = path + ".matchExpressions";
  // (Kubernetes matches no node with an empty term; the engine would match every one.)
  if (t.match_expressions.empty())
    return InvalidArgument(list + ": must have at least one node selector requirement");
  for (size_t i = 0; i < t.match_expressions.size(); ++i)
    TESSERA_RETURN_IF_ERROR(CheckRequirement(t.match_expressions[i], Idx(list, i)));
  return Status::Ok();
}

// As Kubernetes' ValidateTolerations.
Status CheckToleration(const Toleration& t, const std::string& path) {
  if (!t.key.empty()) TESSERA_RETURN_IF_ERROR(CheckLabelKey(t.key, path + ".key"));
  if (t.op == Toleration::Op::kExists) {
    if (!t.value.empty())
      return InvalidArgument(path + ".value: must be empty when operator is Exists (it " +
                             "tolerates every value of the key), got \"" + t.value + "\"");
    return Status::Ok();
  }
  if (t.key.empty())
    return InvalidArgument(path +
                           ".operator: must be Exists when key is empty (which tolerates "
                           "every taint), got Equal");
  return CheckLabelValue(t.value, path + ".value");
}

Status CheckPlacement(const Placement& place, const PlacementPaths& at) {
  for (const auto& [key, value] : place.node_selector) {
    TESSERA_RETURN_IF_ERROR(CheckLabelKey(key, at.node_selector));
    TESSERA_RETURN_IF_ERROR(CheckLabelValue(value, at.node_selector + "." + key));
  }
  for (size_t i = 0; i < place.tolerations.size(); ++i)
    TESSERA_RETURN_IF_ERROR(CheckToleration(place.tolerations[i], Idx(at.tolerations, i)));
  for (size_t i = 0; i < place.affinity.required.size(); ++i)
    TESSERA_RETURN_IF_ERROR(CheckTerm(place.affinity.required[i], Idx(at.required_terms, i)));
  for (size_t i = 0; i < place.affinity.preferred.size(); ++i) {
    const PreferredTerm& p = place.affinity.preferred[i];
    const std::string path = Idx(at.preferred, i);
    if (p.weight > 100)
      return InvalidArgument(path + ".weight: must be in the range 1-100, got " +
                             std::to_string(p.weight));
    TESSERA_RETURN_IF_ERROR(CheckTerm(p.term, path + ".preference"));
  }
  return Status::Ok();
}

// Applies the placement and stopping fields that a pod template carries to its task group
// `g` and the job. The first task's placement is the job's; a later task's that differs is
// its group's own (Volcano places each task by its own template). The stopping fields are
// the job's: a task whose differ from the first task's is refused.
Status MergePodIntoJob(const PodInfo& pod, const std::string& path, bool first, JobSpec& spec,
                       TaskGroup& g) {
  Job& j = spec.job;
  Json tol_doc = {
      {"id", "x"}, {"tolerations", pod.tolerations}, {"tasks", Json::array({Json::object()})}};
  auto parsed = JobFromJson(tol_doc, path);
  if (!parsed.ok()) return parsed.status();
  Placement place{pod.node_selector, pod.affinity, parsed->placement.tolerations};
  TESSERA_RETURN_IF_ERROR(CheckPlacement(place, KubePlacementPaths(path)));
  if (first) {
    j.placement = std::move(place);
    if (pod.grace_period) j.grace_period_seconds = *pod.grace_period;
    if (pod.active_deadline && spec.time_limit_whole_job) {
      // A batch/v1 Job's own activeDeadlineSeconds is the whole job's limit, which stays.
      // A pod's own counts from that pod's start, so one at least as long never ends a pod
      // before the job's does; a shorter one would need a second limit, per pod, which a
      // job here does not have: refused rather than dropped or put in the job's place.
      if (*pod.active_deadline < *spec.time_limit_seconds)
        return InvalidArgument(
            path + ".activeDeadlineSeconds: " + std::to_string(*pod.active_deadline) +
            " is less than the Job's spec.activeDeadlineSeconds " +
            std::to_string(*spec.time_limit_seconds) +
            ": a job has one time limit here (the Job's, through its retries); leave the "
            "pod's out, or make it at least the Job's");
    } else if (pod.active_deadline) {
      j.runtime_estimate_seconds = spec.time_limit_seconds = pod.active_deadline;
    }
  } else {
    auto differs = [&](const std::string& field) {
      return InvalidArgument(path + "." + field + ": every task of a job must use the same " +
                             field + " (one per job here; give each task the first's)");
    };
    if (!(place == j.placement)) g.placement = std::move(place);
    if (pod.grace_period.value_or(Job{}.grace_period_seconds) != j.grace_period_seconds)
      return differs("terminationGracePeriodSeconds");
    if (pod.active_deadline != spec.time_limit_seconds) return differs("activeDeadlineSeconds");
  }
  if (!pod.priority_class.empty()) {
    if (!j.priority_class.empty() && j.priority_class != pod.priority_class)
      return InvalidArgument(path + ".priorityClassName: \"" + pod.priority_class +
                             "\" differs from the job's \"" + j.priority_class + "\"");
    // The first place that named it (a Volcano Job's own spec.priorityClassName, else
    // this pod template).
    if (j.priority_class.empty()) spec.origin.priority_class = path + ".priorityClassName";
    j.priority_class = pod.priority_class;
  }
  return Status::Ok();
}

StatusOr<FailureAction> VolcanoAction(const std::string& action, const std::string& path) {
  if (action == "RestartJob") return FailureAction::kRestartJob;
  if (action == "RestartTask" || action == "RestartPod") return FailureAction::kRestartTask;
  if (action == "AbortJob" || action == "TerminateJob") return FailureAction::kFailJob;
  // (TaskCompleted's CompleteJob is read by the caller; for any other event it is an error.)
  if (action == "CompleteJob")
    return InvalidArgument(path + ": CompleteJob needs event TaskCompleted");
  return InvalidArgument(
      path + ": unknown action \"" + action +
      "\" (RestartJob, RestartTask, RestartPod, AbortJob, TerminateJob, CompleteJob)");
}

// `names_failure`, when given, is set once a policy says what a failed pod does (an exit
// code, or PodFailed, TaskFailed or "*").
Status ReadVolcanoPolicies(const Json* v, const std::string& path, RestartPolicy& rp,
                           bool* names_failure = nullptr) {
  return ForEach(v, path, [&](const Json& p, const std::string& pp) -> Status {
    ObjectReader r(p, pp);
    std::string event, action;
    std::vector<std::string> events;
    TESSERA_RETURN_IF_ERROR(r.String("event", event));
    TESSERA_RETURN_IF_ERROR(r.StringList("events", events));
    TESSERA_RETURN_IF_ERROR(r.String("action", action, true));
    if (r.Has("timeout")) {
      std::string ignored;
      TESSERA_RETURN_IF_ERROR(r.String("timeout", ignored));
    }
    if (r.Has("exitCode")) {
      // As Volcano: a policy names an event or an exit code, and 0 is no failure.
      int32_t code = 0;
      TESSERA_RETURN_IF_ERROR(r.Int32("exitCode", code, false, INT32_MIN));
      if (code == 0) return InvalidArgument(r.Path("exitCode") + ": 0 is not a failure");
      if (!event.empty() || !events.empty())
        return InvalidArgument(r.Path("exitCode") + ": give either exitCode or event(s)");
      TESSERA_RETURN_IF_ERROR(r.Finish());
      auto a = VolcanoAction(action, pp + ".action");
      if (!a.ok()) return a.status();
      rp.on_exit_code[code] = *a;
      if (names_failure) *names_failure = true;
      return Status::Ok();
    }
    TESSERA_RETURN_IF_ERROR(r.Finish());
    if (events.empty() && event.empty())
      return InvalidArgument(pp + ".event: required (or events, or exitCode)");
    // Each event with where it was given, for its errors.
    std::vector<std::pair<std::string, std::string>> given;
    for (size_t i = 0; i < events.size(); ++i)
      given.emplace_back(events[i], Idx(pp + ".events", i));
    if (!event.empty()) given.emplace_back(event, pp + ".event");
    for (const auto& [e, at] : given) {
      if (e == "TaskCompleted") {
        if (action != "CompleteJob")
          return InvalidArgument(pp + ".action: TaskCompleted supports CompleteJob only, got \"" +
                                 action + "\"");
        rp.complete_on_task_completed = true;
        continue;
      }
      auto a = VolcanoAction(action, pp + ".action");
      if (!a.ok()) return a.status();
      // An eviction takes the whole job here (preemption evicts jobs; a drained or lost node
      // its jobs): RestartTask on one is stored as what happens, RestartJob, so that describe
      // says so (docs/lifecycle.md).
      const FailureAction on_eviction =
          *a == FailureAction::kRestartTask ? FailureAction::kRestartJob : *a;
      if (e == "PodEvicted" || e == "Unknown" || e == "OutOfSync") {
        rp.on_eviction = on_eviction;
      } else if (e == "PodFailed" || e == "TaskFailed" || e == "*") {
        rp.on_failure = *a;
        if (e == "*") rp.on_eviction = on_eviction;
        if (names_failure) *names_failure = true;
      } else if (e == "JobUnknown" || e == "PodPending" || e == "CommandIssued") {
        // Events Tessera takes no action on (PodPending: a policy for a pod that waits too
        // long, with its timeout; JobUnknown and CommandIssued: the controller's own, which
        // Volcano's admission refuses): accepted, the policy would be dropped unseen.
        return InvalidArgument(at + ": \"" + e +
                               "\" is not supported in a policy (PodEvicted, PodFailed, "
                               "TaskCompleted, TaskFailed, Unknown, *)");
      } else {
        return InvalidArgument(at + ": unknown \"" + e +
                               "\" (PodEvicted, PodFailed, TaskCompleted, TaskFailed, Unknown, *)");
      }
    }
    return Status::Ok();
  });
}

// `ttlSecondsAfterFinished` (Volcano, batch/v1 and Tessera jobs): how long the finished
// job is kept before it is deleted; 0 deletes it at once.
Status ReadTtl(ObjectReader& r, JobSpec& s) {
  if (!r.Has("ttlSecondsAfterFinished")) return Status::Ok();
  int64_t ttl = 0;
  TESSERA_RETURN_IF_ERROR(r.Int("ttlSecondsAfterFinished", ttl, false, 0));
  s.ttl_seconds_after_finished = ttl;
  return Status::Ok();
}

// A job's `activeDeadlineSeconds` (batch/v1, Tessera): a time limit from its first start,
// through its retries.
Status ReadJobDeadline(ObjectReader& r, JobSpec& s) {
  if (!r.Has("activeDeadlineSeconds")) return Status::Ok();
  int64_t d = 0;
  TESSERA_RETURN_IF_ERROR(r.Int("activeDeadlineSeconds", d, false, 1));
  s.time_limit_seconds = d;
  s.time_limit_whole_job = true;
  return Status::Ok();
}

// `suspend: true` (batch/v1, Tessera jobs): submitted held, as a suspended Kubernetes Job
// creates no pods until it is resumed (here: `tessera release`).
Status ReadSuspend(ObjectReader& r, JobSpec& s) { return r.Bool("suspend", s.held); }

// Volcano's per-task minAvailable as the job's gang minimum. The engine starts a gang with
// its first minAvailable tasks in task order, which is "each task group's minimum" only when
// every group but the last is wholly required; otherwise refused rather than bent. Without
// spec.minAvailable the gang needs the tasks' minimums together, as Volcano's default.
Status VolcanoTaskMinimums(const std::vector<int32_t>& mins, bool any, Job& job) {
  if (!any) return Status::Ok();
  int32_t sum = 0;
  for (int32_t m : mins) sum += m;
  if (job.min_available == 0) job.min_available = sum;
  if (job.min_available < sum)
    return InvalidArgument("spec.minAvailable: " + std::to_string(job.min_available) +
                           " is less than the tasks' minAvailable together (" +
                           std::to_string(sum) + ")");
  for (size_t g = 0; g + 1 < mins.size(); ++g)
    if (mins[g] < job.groups[g].replicas)
      return InvalidArgument(
          "spec.tasks[" + std::to_string(g) + "].minAvailable: " + std::to_string(mins[g]) +
          " of " + std::to_string(job.groups[g].replicas) +
          " replicas: only the last task may start with part of its replicas (a gang starts "
          "with its first tasks in task order); put this task last");
  return Status::Ok();
}

StatusOr<JobSpec> VolcanoJob(const Json& doc, ObjectReader& top, const Meta& meta) {
  JobSpec s;
  s.source = "batch.volcano.sh/v1alpha1 Job";
  s.job.id = meta.name;
  s.labels = meta.labels;
  s.annotations = meta.annotations;
  TESSERA_RETURN_IF_ERROR(ReadExclusiveAnnotation(meta, s));
  s.restart.max_retries = 3;  // Volcano's default maxRetry
  const Json* spec = top.Get("spec");
  if (spec == nullptr) return InvalidArgument("spec: required");
  ObjectReader r(*spec, "spec");
  TESSERA_RETURN_IF_ERROR(r.Int32("minAvailable", s.job.min_available));
  TESSERA_RETURN_IF_ERROR(r.String("queue", s.job.queue));
  TESSERA_RETURN_IF_ERROR(r.String("priorityClassName", s.job.priority_class));
  TESSERA_RETURN_IF_ERROR(r.Int32("maxRetry", s.restart.max_retries));
  std::string scheduler;
  TESSERA_RETURN_IF_ERROR(r.String("schedulerName", scheduler));
  bool job_names_failure = false;
  TESSERA_RETURN_IF_ERROR(
      ReadVolcanoPolicies(r.Get("policies"), r.Path("policies"), s.restart, &job_names_failure));
  if (const Json* plugins = r.Get("plugins")) {
    // ssh/svc/env/pytorch set up pod networking in Kubernetes; the agent passes
    // MASTER_ADDR/RANK/WORLD_SIZE itself, so these are accepted and need nothing more.
    if (!plugins->is_object()) return TypeError(r.Path("plugins"), "a map", *plugins);
    for (const auto& [k, v] : plugins->items())
      if (k != "ssh" && k != "svc" && k != "env" && k != "pytorch" && k != "mpi" &&
          k != "tensorflow")
        return InvalidArgument(r.Path("plugins") + "." + k +
                               ": unknown plugin (ssh, svc, env, pytorch, mpi, tensorflow)");
  }
  TESSERA_RETURN_IF_ERROR(ReadTtl(r, s));
  Ignore(r, {"volumes", "minSuccess", "runningEstimate"});
  const Json* tasks = r.Get("tasks");
  if (tasks == nullptr) return InvalidArgument(r.Path("tasks") + ": required");
  bool first = true;
  std::vector<int32_t> task_mins;  // per task group: its minAvailable, else its replicas
  bool any_task_min = false;
  struct SpreadCheck {
    std::vector<std::shared_ptr<const PodInfo::SpreadSelector>> selectors;
    std::map<std::string, std::string> labels;
    std::string path;
  };
  std::vector<SpreadCheck> spread_checks;  // per task
  TESSERA_RETURN_IF_ERROR(
      ForEach(tasks, r.Path("tasks"), [&](const Json& t, const std::string& p) -> Status {
        ObjectReader tr(t, p);
        TaskGroup g;
        TESSERA_RETURN_IF_ERROR(tr.String("name", g.name));
        TESSERA_RETURN_IF_ERROR(tr.Int32("replicas", g.replicas, false, 1));
        int32_t task_min = g.replicas, task_retry = s.restart.max_retries;
        any_task_min |= tr.Has("minAvailable");
        TESSERA_RETURN_IF_ERROR(tr.Int32("minAvailable", task_min));
        TESSERA_RETURN_IF_ERROR(tr.Int32("maxRetry", task_retry));
        if (task_min > g.replicas)
          return InvalidArgument(tr.Path("minAvailable") + ": " + std::to_string(task_min) +
                                 " is more than replicas " + std::to_string(g.replicas));
        task_mins.push_back(task_min);
        if (task_retry != s.restart.max_retries)
          return InvalidArgument(tr.Path("maxRetry") + ": " + std::to_string(task_retry) +
                                 " differs from the job's " +
                                 std::to_string(s.restart.max_retries) +
                                 ": retries are counted per job here; set spec.maxRetry");
        // The task's own policies start from the job's and override them for its tasks.
        std::optional<RestartPolicy> own;
        bool names_failure = job_names_failure;
        if (tr.Has("policies")) {
          own = s.restart;
          TESSERA_RETURN_IF_ERROR(
              ReadVolcanoPolicies(tr.Get("policies"), tr.Path("policies"), *own, &names_failure));
        }
        s.group_restart.push_back(std::move(own));
        if (tr.Has("dependsOn"))
          return Unsupported(tr, "dependsOn", "submit dependent work as separate jobs");
        Template tmpl;
        TESSERA_RETURN_IF_ERROR(ReadPodTemplate(tr.Get("template"), tr.Path("template"), tmpl));
        TESSERA_RETURN_IF_ERROR(tr.Finish());
        // restartPolicy: OnFailure has the kubelet restart a failed container in place: the
        // task alone restarts (counted against maxRetry here), unless a policy says what a
        // failed pod does.
        if (tmpl.pod.restart_policy == "OnFailure" && !names_failure) {
          if (!s.group_restart.back()) s.group_restart.back() = s.restart;
          s.group_restart.back()->on_failure = FailureAction::kRestartTask;
        }
        g.request = tmpl.pod.request;
        g.spread = tmpl.pod.spread;
        spread_checks.push_back({tmpl.pod.spread_selectors, tmpl.labels, tr.Path("template")});
        TESSERA_RETURN_IF_ERROR(
            MergePodIntoJob(tmpl.pod, tr.Path("template") + ".spec", first, s, g));
        first = false;
        s.job.groups.push_back(g);
        s.templates.push_back(tmpl.pod.tmpl);
        return Status::Ok();
      }));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (s.job.groups.empty()) return InvalidArgument("spec.tasks: a job needs at least one task");
  // A constraint counts its own task's pods only: one whose selector takes in another
  // task's pods too (Kubernetes would count them) is refused rather than read narrower.
  for (size_t t = 0; t < spread_checks.size(); ++t)
    for (size_t i = 0; i < spread_checks[t].selectors.size(); ++i)
      for (size_t o = 0; o < spread_checks.size(); ++o)
        if (o != t && spread_checks[t].selectors[i]->Matches(spread_checks[o].labels))
          return InvalidArgument(
              Idx(spread_checks[t].path + ".spec.topologySpreadConstraints", i) +
              ".labelSelector: also selects the pods of " + spread_checks[o].path +
              ": a constraint spreads its own task's pods only here; give each task a label "
              "of its own to select");
  if (std::none_of(s.group_restart.begin(), s.group_restart.end(),
                   [](const auto& g) { return g.has_value(); }))
    s.group_restart.clear();
  TESSERA_RETURN_IF_ERROR(VolcanoTaskMinimums(task_mins, any_task_min, s.job));
  if (s.job.min_available > s.job.TaskCount())
    return InvalidArgument("spec.minAvailable: " + std::to_string(s.job.min_available) +
                           " is more than the job's " + std::to_string(s.job.TaskCount()) +
                           " tasks");
  return s;
}

// Deployment, batch/v1 Job and Pod: one task group from one pod template.
StatusOr<JobSpec> KubeWorkload(const std::string& kind, ObjectReader& top, const Meta& meta) {
  JobSpec s;
  s.job.id = meta.name;
  s.labels = meta.labels;
  s.annotations = meta.annotations;
  TESSERA_RETURN_IF_ERROR(ReadExclusiveAnnotation(meta, s));
  s.job.queue = "default";
  // Volcano's convention for plain Kubernetes objects: the queue is an annotation.
  s.origin.queue =
      "metadata.annotations.scheduling.volcano.sh/queue-name (not given: the "
      "default queue)";
  for (const char* key : {"scheduling.volcano.sh/queue-name", "tessera.io/queue"}) {
    auto it = meta.annotations.find(key);
    if (it == meta.annotations.end()) continue;
    s.job.queue = it->second;
    s.origin.queue = std::string("metadata.annotations.") + key;
  }
  const Json* spec = top.Get("spec");
  if (spec == nullptr) return InvalidArgument("spec: required");
  ObjectReader r(*spec, "spec");
  TaskGroup g;
  g.name = kind == "Deployment" ? "replica" : kind == "Job" ? "worker" : "main";
  Template tmpl;
  if (kind == "Pod") {
    s.source = "v1 Pod";
    // The pod spec is `spec` itself; re-read it with the pod reader for strict paths.
    TESSERA_RETURN_IF_ERROR(ReadPodSpec(*spec, "spec", tmpl.pod));
    TESSERA_RETURN_IF_ERROR(CheckSpreadSelectsOwn(tmpl.pod, meta.labels, "spec"));
    s.job.min_available = 1;
    if (tmpl.pod.restart_policy == "Never") {
      s.restart.on_failure = FailureAction::kFailJob;
    } else {
      s.restart.on_failure = FailureAction::kRestartJob;
      s.restart.max_retries = tmpl.pod.restart_policy == "Always" ? -1 : 6;
      // As the kubelet: a container of an Always pod is restarted whenever it exits, with
      // code 0 too; the pod never completes (until deleted).
      s.service = tmpl.pod.restart_policy == "Always";
    }
  } else if (kind == "Deployment") {
    s.source = "apps/v1 Deployment";
    s.service = true;
    TESSERA_RETURN_IF_ERROR(r.Int32("replicas", g.replicas, false, 1));
    // A Deployment created paused starts no pods until it is resumed (its controller makes
    // no ReplicaSet for it): submitted held, until `tessera release`.
    TESSERA_RETURN_IF_ERROR(r.Bool("paused", s.held));
    std::optional<PodInfo::SpreadSelector> selector;
    if (const Json* sel = r.Get("selector"))
      TESSERA_RETURN_IF_ERROR(ReadLabelSelector(*sel, "spec.selector", selector.emplace()));
    Ignore(r, {"strategy", "revisionHistoryLimit", "minReadySeconds", "progressDeadlineSeconds"});
    TESSERA_RETURN_IF_ERROR(ReadPodTemplate(r.Get("template"), "spec.template", tmpl));
    // As Kubernetes' validation: the selector must select the template's pods, and an empty
    // one (every pod) is invalid. (Tessera keeps a job's tasks its own either way.)
    if (selector && selector->match_labels.empty() && selector->expressions.empty())
      return InvalidArgument(
          "spec.selector: empty (it would select every pod); select the "
          "template's labels (matchLabels: {app: web})");
    if (selector && !selector->Matches(tmpl.labels))
      return InvalidArgument("spec.selector: does not match the template's labels (" +
                             Json(tmpl.labels).dump() +
                             " at spec.template.metadata.labels), as Kubernetes requires");
    if (tmpl.pod.restart_policy != "Always")  // as Kubernetes: a service always restarts
      return InvalidArgument("spec.template.spec.restartPolicy: a Deployment needs Always, got \"" +
                             tmpl.pod.restart_policy + "\"");
    // Replicas serve independently: any one of them is useful (no gang), one that fails
    // is restarted alone while the others keep serving (as a ReplicaSet replaces one pod),
    // and a service restarts for ever.
    s.job.min_available = 1;
    s.restart.on_failure = FailureAction::kRestartTask;
    s.restart.max_retries = -1;
    TESSERA_RETURN_IF_ERROR(r.Finish());
  } else {
    s.source = "batch/v1 Job";
    int32_t parallelism = 1, completions = 0, backoff = 6;
    TESSERA_RETURN_IF_ERROR(r.Int32("parallelism", parallelism, false, 1));
    TESSERA_RETURN_IF_ERROR(r.Int32("completions", completions, false, 1));
    TESSERA_RETURN_IF_ERROR(r.Int32("backoffLimit", backoff));
    if (completions != 0 && completions != parallelism)
      return InvalidArgument("spec.completions: must equal spec.parallelism (" +
                             std::to_string(parallelism) +
                             "): Tessera runs each of a Job's pods once");
    TESSERA_RETURN_IF_ERROR(ReadSuspend(r, s));
    TESSERA_RETURN_IF_ERROR(ReadJobDeadline(r, s));
    if (s.time_limit_seconds) s.job.runtime_estimate_seconds = s.time_limit_seconds;
    TESSERA_RETURN_IF_ERROR(ReadTtl(r, s));
    std::string mode = "NonIndexed";
    TESSERA_RETURN_IF_ERROR(r.String("completionMode", mode));
    if (mode != "NonIndexed" && mode != "Indexed")
      return InvalidArgument("spec.completionMode: \"" + mode + "\" (NonIndexed, Indexed)");
    s.indexed = mode == "Indexed";
    Ignore(r, {"selector", "manualSelector"});
    TESSERA_RETURN_IF_ERROR(ReadPodTemplate(r.Get("template"), "spec.template", tmpl));
    TESSERA_RETURN_IF_ERROR(r.Finish());
    if (tmpl.pod.restart_policy == "Always")
      return InvalidArgument(
          "spec.template.spec.restartPolicy: a batch/v1 Job needs Never or OnFailure");
    g.replicas = parallelism;
    s.job.min_available = 1;
    // As the Job controller: a failed pod is replaced alone, each failure counting against
    // backoffLimit (once another pod has succeeded, the whole attempt restarts: see
    // docs/lifecycle.md).
    s.restart.on_failure = FailureAction::kRestartTask;
    s.restart.max_retries = backoff;
  }
  g.request = tmpl.pod.request;
  g.spread = tmpl.pod.spread;
  TESSERA_RETURN_IF_ERROR(
      MergePodIntoJob(tmpl.pod, kind == "Pod" ? "spec" : "spec.template.spec", true, s, g));
  // A bare pod's activeDeadlineSeconds counts from the pod's start, through the kubelet's
  // restarts of its container in place; a restart here is a new attempt, so the limit counts
  // from the job's first start. (A template's, in a workload whose controller replaces the
  // pod, is per attempt.)
  if (kind == "Pod" && s.time_limit_seconds) s.time_limit_whole_job = true;
  s.job.service = s.service;  // spread by default (model/job.h)
  s.job.groups.push_back(g);
  s.templates.push_back(tmpl.pod.tmpl);
  return s;
}

// No guarantee `g` (given at `guarantee_path`) above `limit`, where the limit caps that
// resource (0: uncapped).
Status CheckWithinLimit(const ResourceVector& g, const std::optional<ResourceVector>& limit,
                        const std::string& guarantee_path, const std::string& limit_path) {
  if (!limit) return Status::Ok();
  auto check = [&](const char* name, int64_t want, int64_t l, bool bytes) -> Status {
    if (l == 0 || want <= l) return Status::Ok();
    auto f = bytes ? FormatBytes : FormatMilli;
    return InvalidArgument(guarantee_path + "." + name + ": " + f(want) + " is more than " +
                           limit_path + "." + name + " " + f(l) +
                           " (a queue cannot be guaranteed more than it may use)");
  };
  TESSERA_RETURN_IF_ERROR(check("cpu", g.cpu_milli, limit->cpu_milli, false));
  TESSERA_RETURN_IF_ERROR(check("memory", g.memory_bytes, limit->memory_bytes, true));
  return check("nvidia.com/gpu", g.gpu_milli, limit->gpu_milli, false);
}

StatusOr<Queue> VolcanoQueue(ObjectReader& top, const Meta& meta) {
  Queue q;
  q.name = meta.name;
  if (const Json* spec = top.Get("spec")) {
    ObjectReader r(*spec, "spec");
    TESSERA_RETURN_IF_ERROR(r.Int32("weight", q.weight, false, 1));
    TESSERA_RETURN_IF_ERROR(r.Bool("reclaimable", q.reclaimable));
    TESSERA_RETURN_IF_ERROR(r.String("parent", q.parent));
    if (q.parent == "root") q.parent.clear();
    if (const Json* cap = r.Get("capability")) {
      q.limit.emplace();
      TESSERA_RETURN_IF_ERROR(ReadResourceVector(*cap, "spec.capability", *q.limit));
      // Volcano reads a CPU or memory capability of 0 as uncapped, as Tessera does, but a GPU
      // capability of 0 as "no GPUs", which a Tessera limit cannot say (0 is uncapped): refused
      // rather than read as its opposite.
      if (cap->is_object() && cap->contains("nvidia.com/gpu") && q.limit->gpu_milli == 0)
        return InvalidArgument(
            "spec.capability.nvidia.com/gpu: 0 (no GPUs, in Volcano) is not supported: a limit "
            "component of 0 means uncapped here; leave it out, or give the most GPUs the queue "
            "may use");
    }
    if (const Json* g = r.Get("guarantee")) {
      ObjectReader gr(*g, "spec.guarantee");
      if (const Json* res = gr.Get("resource"))
        TESSERA_RETURN_IF_ERROR(ReadResourceVector(*res, "spec.guarantee.resource", q.guarantee));
      TESSERA_RETURN_IF_ERROR(gr.Finish());
      TESSERA_RETURN_IF_ERROR(
          CheckWithinLimit(q.guarantee, q.limit, "spec.guarantee.resource", "spec.capability"));
    }
    if (const Json* d = r.Get("deserved")) {
      // Volcano's capacity plugin: deserved is the share the queue reclaims back to, its
      // guarantee a floor below it (kept from others). Tessera's guarantee is what reclaim
      // restores, lent while unused: deserved, component by component the larger of the two.
      ResourceVector deserved;
      TESSERA_RETURN_IF_ERROR(ReadResourceVector(*d, "spec.deserved", deserved));
      // (Checked before the merge, so that the error names the field the value came from.)
      TESSERA_RETURN_IF_ERROR(
          CheckWithinLimit(deserved, q.limit, "spec.deserved", "spec.capability"));
      q.guarantee.cpu_milli = std::max(q.guarantee.cpu_milli, deserved.cpu_milli);
      q.guarantee.memory_bytes = std::max(q.guarantee.memory_bytes, deserved.memory_bytes);
      q.guarantee.gpu_milli = std::max(q.guarantee.gpu_milli, deserved.gpu_milli);
    }
    Ignore(r, {"affinity", "type", "extendClusters"});
    TESSERA_RETURN_IF_ERROR(r.Finish());
  }
  // Volcano's Queue has no field for it: an annotation, "p2-debug, p3-batch".
  if (auto a = meta.annotations.find("tessera.io/priority-classes"); a != meta.annotations.end()) {
    std::stringstream in(a->second);
    for (std::string name; std::getline(in, name, ',');) {
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (name.empty())
        return InvalidArgument("metadata.annotations.tessera.io/priority-classes: \"" + a->second +
                               "\": an empty name (a list like \"p2-debug, p3-batch\")");
      q.priority_classes.push_back(name);
    }
  }
  return q;
}

StatusOr<PriorityClass> KubePriorityClass(ObjectReader& top, const Meta& meta) {
  Json pc = Json::object();
  pc["name"] = meta.name;
  const Json* value = top.Get("value");
  if (value == nullptr) return InvalidArgument("value: required");
  pc["value"] = *value;
  if (const Json* g = top.Get("globalDefault")) pc["globalDefault"] = *g;
  if (const Json* p = top.Get("preemptionPolicy")) pc["preemptionPolicy"] = *p;
  Ignore(top, {"description"});
  auto out = PriorityClassFromJson(pc, "");
  if (!out.ok()) return out.status();
  if (out->value > 1000000000)
    return InvalidArgument("value: user priority classes must be <= 1000000000, got " +
                           std::to_string(out->value));
  return out;
}

// Tessera's own Job: the model's job shape plus per-group process fields and a restart policy.
StatusOr<JobSpec> TesseraJob(ObjectReader& top, const Meta& meta) {
  JobSpec s;
  s.source = "tessera.io/v1 Job";
  s.origin.priority_class = "spec.priorityClass";  // model/codec.h's name, not Volcano's
  s.labels = meta.labels;
  s.annotations = meta.annotations;
  const Json* spec = top.Get("spec");
  if (spec == nullptr) return InvalidArgument("spec: required");
  if (!spec->is_object()) return TypeError("spec", "an object", *spec);
  Json model = *spec;
  for (const char* k : {"id", "running", "startTime", "submitTime", "submitSeq",
                        "attainedGpuMilliSeconds", "priority", "terminating"})
    if (model.contains(k))
      return InvalidArgument(std::string("spec.") + k + ": set by the server, not by users");
  if (model.contains("restartPolicy")) {
    ObjectReader r(model["restartPolicy"], "spec.restartPolicy");
    std::string on_failure = "FailJob", on_eviction = "RestartJob";
    TESSERA_RETURN_IF_ERROR(r.String("onFailure", on_failure));
    TESSERA_RETURN_IF_ERROR(r.String("onEviction", on_eviction));
    TESSERA_RETURN_IF_ERROR(r.Int32("maxRetries", s.restart.max_retries, false, -1));
    TESSERA_RETURN_IF_ERROR(r.Finish());
    for (auto [name, out, key] : {std::tuple{on_failure, &s.restart.on_failure, "onFailure"},
                                  std::tuple{on_eviction, &s.restart.on_eviction, "onEviction"}}) {
      if (name == "FailJob")
        *out = FailureAction::kFailJob;
      else if (name == "RestartJob")
        *out = FailureAction::kRestartJob;
      else if (name == "RestartTask" && out == &s.restart.on_failure)
        *out = FailureAction::kRestartTask;
      else if (name == "RestartTask")  // (the engine and the node events evict whole jobs)
        return InvalidArgument(
            "spec.restartPolicy.onEviction: RestartTask is not supported: an eviction restarts "
            "the whole job (RestartJob) or fails it (FailJob)");
      else
        return InvalidArgument(std::string("spec.restartPolicy.") + key + ": unknown \"" + name +
                               "\" (FailJob, RestartJob, RestartTask)");
    }
    model.erase("restartPolicy");
  }
  // Job-level keys read as batch/v1 reads them, then taken out of the model's shape.
  for (auto [key, read] :
       {std::pair{"ttlSecondsAfterFinished", &ReadTtl},
        std::pair{"activeDeadlineSeconds", &ReadJobDeadline}, std::pair{"suspend", &ReadSuspend}}) {
    if (!model.contains(key)) continue;
    ObjectReader r(model, "spec");
    TESSERA_RETURN_IF_ERROR(read(r, s));
    model.erase(key);
  }
  if (model.contains("service")) {
    if (!model["service"].is_boolean())
      return TypeError("spec.service", "true or false", model["service"]);
    s.service = model["service"].get<bool>();
    model.erase("service");
  }
  if (model.contains("tasks") && model["tasks"].is_array()) {
    for (size_t i = 0; i < model["tasks"].size(); ++i) {
      Json& t = model["tasks"][i];
      TaskTemplate tt;
      if (t.is_object()) {
        std::string p = Idx("spec.tasks", i);
        if (t.contains("restartPolicy"))
          return InvalidArgument(p +
                                 ".restartPolicy: one per job here: give it as "
                                 "spec.restartPolicy");
        Json proc = Json::object();
        for (const char* k : {"command", "env", "workingDir", "securityContext"})
          if (t.contains(k)) {
            proc[k] = t[k];
            t.erase(k);
          }
        ObjectReader pr(proc, p);
        TESSERA_RETURN_IF_ERROR(pr.StringList("command", tt.command));
        TESSERA_RETURN_IF_ERROR(pr.StringMap("env", tt.env));
        TESSERA_RETURN_IF_ERROR(pr.String("workingDir", tt.working_dir));
        if (const Json* sc = pr.Get("securityContext")) {
          auto run_as = RunAsFromJson(*sc, pr.Path("securityContext"));
          if (!run_as.ok()) return run_as.status();
          tt.run_as = std::move(*run_as);
        }
      }
      s.templates.push_back(tt);
    }
  }
  model["id"] = meta.name.empty() ? "unnamed" : meta.name;
  auto j = JobFromJson(model, "spec");
  if (!j.ok()) return j.status();
  s.job = std::move(*j);
  s.job.id = meta.name;
  s.job.service = s.service;
  TESSERA_RETURN_IF_ERROR(CheckPlacement(s.job.placement, TesseraPlacementPaths("spec")));
  for (size_t i = 0; i < s.job.groups.size(); ++i)
    if (const auto& place = s.job.groups[i].placement)
      TESSERA_RETURN_IF_ERROR(CheckPlacement(*place, TesseraPlacementPaths(Idx("spec.tasks", i))));
  return s;
}

// Nesting by brackets, `- ` sequence markers and indentation, without parsing.
size_t EstimateNesting(const std::string& text) {
  size_t best = 0, flow = 0;
  bool in_single = false, in_double = false;
  size_t line_start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      // Block nesting of this line: leading spaces plus `- ` markers.
      size_t j = line_start, depth = 0;
      while (j < i && (text[j] == ' ' || text[j] == '\t')) ++j, ++depth;
      while (j + 1 < i && text[j] == '-' && (text[j + 1] == ' ' || text[j + 1] == '\t')) {
        depth += 2;
        j += 2;
        while (j < i && text[j] == ' ') ++j;
      }
      // Indentation of n spaces is at most n levels; dividing keeps ordinary 2-space YAML far from
      // the limit.
      best = std::max(best, (depth + 1) / 2);
      line_start = i + 1;
      in_single = in_double = false;  // flow scalars rarely span lines; be conservative
      continue;
    }
    char c = text[i];
    if (in_double) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_double = false;
      continue;
    }
    if (in_single) {
      if (c == '\'') in_single = false;
      continue;
    }
    if (c == '"')
      in_double = true;
    else if (c == '\'')
      in_single = true;
    else if (c == '[' || c == '{')
      best = std::max(best, ++flow);
    else if ((c == ']' || c == '}') && flow > 0)
      --flow;
  }
  return best;
}

}  // namespace

std::string ExpandKubeReferences(
    const std::string& in, const std::function<const std::string*(const std::string&)>& lookup) {
  // Kubernetes' third_party/forked/golang/expansion, step for step.
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$' || i + 1 == in.size()) {
      out += in[i];
      continue;
    }
    const char next = in[i + 1];
    if (next == '$') {  // escaped: one '$'
      out += '$';
      ++i;
    } else if (next == '(') {
      const size_t close = in.find(')', i + 2);
      if (close == std::string::npos) {  // incomplete: as written
        out += "$(";
        ++i;
        continue;
      }
      const std::string name = in.substr(i + 2, close - i - 2);
      const std::string* value = lookup(name);
      out += value != nullptr ? *value : "$(" + name + ")";
      i = close;
    } else {  // not a reference: the '$' and what follows, as written
      out += '$';
      out += next;
      ++i;
    }
  }
  return out;
}

std::map<std::string, std::string> TaskEnvironment(const TaskTemplate& t,
                                                   std::map<std::string, std::string> server,
                                                   std::vector<std::string>* command) {
  std::map<std::string, std::string> env = std::move(server);
  if (!t.expand_references) {
    for (const auto& [k, v] : t.env) env.emplace(k, v);  // the server's win
    return env;
  }
  // Each value sees those declared before it (as expanded), then the server's.
  std::map<std::string, std::string> declared;
  auto lookup = [&](const std::string& name) -> const std::string* {
    if (auto d = declared.find(name); d != declared.end()) return &d->second;
    if (auto e = env.find(name); e != env.end()) return &e->second;
    return nullptr;
  };
  std::vector<std::string> order = t.env_order;
  for (const auto& [k, v] : t.env)  // (a name missing from the order, last)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  for (const std::string& name : order) {
    auto v = t.env.find(name);
    if (v != t.env.end()) declared[name] = ExpandKubeReferences(v->second, lookup);
  }
  for (auto& [k, v] : declared) env.emplace(k, std::move(v));  // the server's win
  if (command != nullptr) {
    auto final_lookup = [&](const std::string& name) -> const std::string* {
      auto e = env.find(name);
      return e == env.end() ? nullptr : &e->second;
    };
    for (std::string& word : *command) word = ExpandKubeReferences(word, final_lookup);
  }
  return env;
}

const char* FailureActionName(FailureAction a) {
  return a == FailureAction::kFailJob      ? "FailJob"
         : a == FailureAction::kRestartJob ? "RestartJob"
                                           : "RestartTask";
}

Status CheckText(const std::string& text) {
  // UTF-8 validity (no overlongs, no surrogates, <= U+10FFFF), reported with a byte offset.
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (s[i + k] & 0xC0) == 0x80;
    if (ok && len == 2) ok = c >= 0xC2;
    if (ok && len == 3) {
      uint32_t cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (ok && len == 4) {
      uint32_t cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
                    (s[i + 3] & 0x3F);
      ok = cp >= 0x10000 && cp <= 0x10FFFF;
    }
    if (!ok) return InvalidArgument("body is not valid UTF-8 (at byte " + std::to_string(i) + ")");
    if (c == 0)
      return InvalidArgument("body contains a NUL byte (at byte " + std::to_string(i) + ")");
    i += len;
  }
  size_t depth = EstimateNesting(text);
  if (depth > kMaxNesting)
    return InvalidArgument("document nests deeper than " + std::to_string(kMaxNesting) + " levels");
  return Status::Ok();
}

namespace {

// Checks of a whole document, made here and not in the model codec, which also reads what
// the server stored before a check existed (a server must start on its old records).

// Task group names must be unique, as Volcano requires: groups are told apart by name.
Status CheckUniqueGroupNames(const std::vector<TaskGroup>& groups) {
  for (size_t i = 0; i < groups.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (!groups[i].name.empty() && groups[i].name == groups[k].name)
        return InvalidArgument(Idx("spec.tasks", i) + ".name: \"" + groups[i].name +
                               "\" is also the name of task group " + std::to_string(k) +
                               " (task names must be unique in a job)");
  return Status::Ok();
}

// A bound on a job's tasks: each task is state the server keeps and places, so a typo in
// `replicas` must not be accepted and then exhaust the server's memory (at start too).
Status CheckTaskCount(const JobSpec& s) {
  int64_t total = 0;
  size_t largest = 0;
  for (size_t i = 0; i < s.job.groups.size(); ++i) {
    total += s.job.groups[i].replicas;
    if (s.job.groups[i].replicas > s.job.groups[largest].replicas) largest = i;
  }
  if (total <= kMaxTasksPerJob) return Status::Ok();
  const std::string path = s.source == "apps/v1 Deployment" ? "spec.replicas"
                           : s.source == "batch/v1 Job"     ? "spec.parallelism"
                           : s.source == "sbatch"           ? "--nodes"
                                                  : Idx("spec.tasks", largest) + ".replicas";
  return InvalidArgument(path + ": the job would have " + std::to_string(total) +
                         " tasks; at most " + std::to_string(kMaxTasksPerJob) + " per job");
}

// No guarantee above the limit, where the limit caps that resource (0: uncapped).
Status CheckGuaranteeWithinLimit(const Queue& q, const std::string& guarantee_path,
                                 const std::string& limit_path) {
  return CheckWithinLimit(q.guarantee, q.limit, guarantee_path, limit_path);
}

}  // namespace

StatusOr<Document> ParseDocument(const Json& doc) {
  if (!doc.is_object()) return TypeError("document", "an object with apiVersion and kind", doc);
  ObjectReader top(doc, "");
  std::string api, kind;
  TESSERA_RETURN_IF_ERROR(top.String("apiVersion", api, true));
  TESSERA_RETURN_IF_ERROR(top.String("kind", kind, true));
  Document out;
  bool is_job = (api == "tessera.io/v1" && kind == "Job") ||
                (api == "batch.volcano.sh/v1alpha1" && kind == "Job") ||
                (api == "apps/v1" && kind == "Deployment") ||
                (api == "batch/v1" && kind == "Job") || (api == "v1" && kind == "Pod");
  Meta meta;
  TESSERA_RETURN_IF_ERROR(ReadMetadata(top, meta, !is_job));
  if (api == "tessera.io/v1" && kind == "Job") {
    auto s = TesseraJob(top, meta);
    if (!s.ok()) return s.status();
    out.job = std::move(*s);
  } else if (api == "batch.volcano.sh/v1alpha1" && kind == "Job") {
    auto s = VolcanoJob(doc, top, meta);
    if (!s.ok()) return s.status();
    out.job = std::move(*s);
  } else if (is_job) {
    auto s = KubeWorkload(kind, top, meta);
    if (!s.ok()) return s.status();
    out.job = std::move(*s);
  } else if ((api == "scheduling.volcano.sh/v1beta1" || api == "tessera.io/v1") &&
             kind == "Queue") {
    out.kind = Document::Kind::kQueue;
    if (api == "tessera.io/v1") {
      const Json* spec = top.Get("spec");
      Json q = spec ? *spec : Json::object();
      if (!q.is_object()) return TypeError("spec", "an object", q);
      if (q.contains("name")) return InvalidArgument("spec.name: the name is metadata.name");
      q["name"] = meta.name;
      auto parsed = QueueFromJson(q, "spec");
      if (!parsed.ok()) return parsed.status();
      out.queue = *parsed;
    } else {
      auto q = VolcanoQueue(top, meta);
      if (!q.ok()) return q.status();
      out.queue = *q;
    }
    bool volcano = api != "tessera.io/v1";
    TESSERA_RETURN_IF_ERROR(
        CheckGuaranteeWithinLimit(out.queue, volcano ? "spec.guarantee.resource" : "spec.guarantee",
                                  volcano ? "spec.capability" : "spec.limit"));
  } else if ((api == "scheduling.k8s.io/v1" || api == "tessera.io/v1") && kind == "PriorityClass") {
    out.kind = Document::Kind::kPriorityClass;
    auto pc = KubePriorityClass(top, meta);
    if (!pc.ok()) return pc.status();
    out.priority_class = *pc;
  } else {
    return InvalidArgument(
        "kind: unsupported \"" + api + " " + kind +
        "\" (tessera.io/v1 Job|Queue|PriorityClass, batch.volcano.sh/v1alpha1 Job, "
        "scheduling.volcano.sh/v1beta1 Queue, scheduling.k8s.io/v1 PriorityClass, "
        "apps/v1 Deployment, batch/v1 Job, v1 Pod, or an #SBATCH script)");
  }
  if (out.kind == Document::Kind::kJob) {
    // Tessera's own shape allows a missing name (the server generates one); Kubernetes's does not.
    if (api != "tessera.io/v1" && meta.name.empty())
      return InvalidArgument("metadata.name: required");
    TESSERA_RETURN_IF_ERROR(ReadDependencyAnnotation(meta, out.job));
    TESSERA_RETURN_IF_ERROR(CheckName(out.job.job.queue, out.job.origin.queue));
    TESSERA_RETURN_IF_ERROR(CheckUniqueGroupNames(out.job.job.groups));
    TESSERA_RETURN_IF_ERROR(CheckTaskCount(out.job));
    out.job.job.allocations.assign(out.job.job.TaskCount(), std::nullopt);
    while (out.job.templates.size() < out.job.job.groups.size()) out.job.templates.emplace_back();
  }
  TESSERA_RETURN_IF_ERROR(top.Finish());
  // Last, so that what else is wrong is named first. Accepted without a command, a task
  // could only fail where it lands.
  for (size_t i = 0; out.kind == Document::Kind::kJob && i < out.job.templates.size(); ++i) {
    if (!out.job.templates[i].command.empty()) continue;
    const std::string container = "template.spec.containers[0].command";
    const std::string path = api == "tessera.io/v1" ? Idx("spec.tasks", i) + ".command"
                             : kind == "Pod"        ? "spec.containers[0].command"
                             : api.starts_with("batch.volcano")
                                 ? Idx("spec.tasks", i) + "." + container
                                 : "spec." + container;
    return InvalidArgument(path + ": required (" +
                           (api == "tessera.io/v1"
                                ? "the program and its arguments"
                                : "Tessera runs the first container's command and args as a "
                                  "process; an image's entrypoint is not run") +
                           ")");
  }
  return out;
}

StatusOr<std::vector<Document>> ParseDocuments(const std::string& text) {
  TESSERA_RETURN_IF_ERROR(CheckText(text));
  std::vector<Document> out;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument("body: empty document");
  if (text.compare(first, 2, "#!") == 0 || text.compare(first, 7, "#SBATCH") == 0) {
    auto s = ParseSbatchScript(text);
    if (!s.ok()) return s.status();
    TESSERA_RETURN_IF_ERROR(CheckTaskCount(*s));
    Document d;
    d.job = std::move(*s);
    out.push_back(std::move(d));
    return out;
  }
  if (text[first] == '{') {
    // JSON fast path (one document): nlohmann's parser is several times faster than YAML's.
    auto json = ParseJson(text);
    if (!json.ok()) return json.status();
    auto d = ParseDocument(*json);
    if (!d.ok()) return d.status();
    out.push_back(std::move(*d));
    return out;
  }
  // Split on `---` lines (YAML document markers).
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = line;
    while (!t.empty() && (t.back() == ' ' || t.back() == '\r' || t.back() == '\t')) t.pop_back();
    if (t == "---" || t.rfind("--- ", 0) == 0) {
      parts.push_back(cur);
      cur.clear();
      continue;
    }
    cur += line;
    cur += '\n';
  }
  parts.push_back(cur);
  std::vector<std::string> docs;
  for (auto& p : parts)
    if (p.find_first_not_of(" \t\r\n") != std::string::npos) {
      // A part with only comments is empty too.
      bool content = false;
      std::istringstream pin(p);
      while (std::getline(pin, line)) {
        size_t k = line.find_first_not_of(" \t\r");
        if (k != std::string::npos && line[k] != '#') content = true;
      }
      if (content) docs.push_back(p);
    }
  if (docs.empty()) return InvalidArgument("body: empty document");
  if (docs.size() > 1000) return InvalidArgument("body: more than 1000 documents");
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string ctx = docs.size() > 1 ? "document[" + std::to_string(i) + "]" : "";
    auto json = ParseYaml(docs[i]);
    if (!json.ok()) return ctx.empty() ? json.status() : json.status().WithContext(ctx);
    auto d = ParseDocument(*json);
    if (!d.ok()) return ctx.empty() ? d.status() : d.status().WithContext(ctx);
    out.push_back(std::move(*d));
  }
  return out;
}

// ---- sbatch ----

namespace {

StatusOr<int64_t> SlurmTime(const std::string& v, const std::string& path) {
  // minutes | minutes:seconds | hours:minutes:seconds | days-hours[:minutes[:seconds]]
  int64_t days = 0;
  std::string rest = v;
  auto dash = v.find('-');
  std::vector<int64_t> parts;
  auto num = [&](const std::string& s) -> std::optional<int64_t> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoll(s);
  };
  // No limit, as Slurm reads them (0 here: none).
  std::string up = v;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up == "UNLIMITED" || up == "INFINITE" || v == "-1") return int64_t{0};
  if (dash != std::string::npos) {
    auto d = num(v.substr(0, dash));
    if (!d) return InvalidArgument(path + ": bad time \"" + v + "\"");
    days = *d;
    rest = v.substr(dash + 1);
  }
  std::stringstream ss(rest);
  std::string p;
  while (std::getline(ss, p, ':')) {
    auto x = num(p);
    if (!x)
      return InvalidArgument(path + ": bad time \"" + v +
                             "\" (minutes, MM:SS, HH:MM:SS or D-HH:MM:SS)");
    parts.push_back(*x);
  }
  if (parts.empty() || parts.size() > 3) return InvalidArgument(path + ": bad time \"" + v + "\"");
  int64_t secs = 0;
  if (dash != std::string::npos) {
    // days-hours[:minutes[:seconds]]
    static const int64_t mult[] = {3600, 60, 1};
    for (size_t i = 0; i < parts.size(); ++i) secs += parts[i] * mult[i];
  } else if (parts.size() == 1) {
    secs = parts[0] * 60;
  } else if (parts.size() == 2) {
    secs = parts[0] * 60 + parts[1];
  } else {
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  // As sbatch: "Time resolution is one minute and second values are rounded up to the next
  // minute."
  secs = (secs + 59) / 60 * 60;
  return days * 86400 + secs;
}

}  // namespace

StatusOr<std::vector<std::string>> SbatchLineWords(const std::string& text,
                                                   const std::string& path) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(std::exchange(word, {}));
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;  // trailing comment
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0)
    return InvalidArgument(path + ": unterminated " + (quote == '"' ? "double" : "single") +
                           " quote");
  if (in_word) out.push_back(word);
  return out;
}

namespace {

StatusOr<int32_t> PositiveInt(const std::string& v, const std::string& path) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument(path + ": expected a positive integer, got \"" + v + "\"");
  if (v.size() > 9) return InvalidArgument(path + ": " + v + " is too large");
  int32_t x = static_cast<int32_t>(std::stol(v));
  if (x < 1) return InvalidArgument(path + ": must be >= 1, got " + v);
  return x;
}

// A count an #SBATCH line gave, and where, as written ("line 3: -n 4"); `at` is empty when
// the script does not give it.
struct GivenCount {
  int32_t value = 0;
  std::string at;
  bool given() const { return !at.empty(); }
};

// Slurm tasks as Tessera runs them: the same number on each of `nodes` distinct nodes.
struct TaskLayout {
  int32_t nodes = 1, per_node = 1;
};

// -N, -n and --ntasks-per-node combined as sbatch and Slurm 22.05 do: --ntasks-per-node
// with -N and no -n is N x per-node tasks; with -n and no -N, n / per-node nodes. Slurm
// allocates nodes x per-node tasks whatever -n says and runs -n of them, so -n must fill
// the nodes exactly here: Tessera runs the same number of tasks on every node. (Slurm
// itself refuses more tasks than nodes x per-node; with -n 5 --ntasks-per-node=2 it takes
// 3 nodes and runs 2, 2 and 1.) Without --ntasks-per-node, -n tasks spread evenly over -N
// nodes (one by default).
StatusOr<TaskLayout> ResolveTaskLayout(const GivenCount& nodes, const GivenCount& ntasks,
                                       const GivenCount& per_node) {
  TaskLayout l;
  int64_t n = ntasks.value;
  if (per_node.given()) {
    const int64_t p = per_node.value;
    l.per_node = per_node.value;
    if (ntasks.given() && !nodes.given()) {
      if (n % p != 0)
        return InvalidArgument(ntasks.at + " with " + per_node.at + ": Slurm would take " +
                               std::to_string((n + p - 1) / p) + " nodes of " + std::to_string(p) +
                               " tasks and run " + std::to_string(n) +
                               ", the last node short; Tessera runs the " +
                               "same number of tasks on every node: ask for a multiple of " +
                               std::to_string(p) + " tasks, or give -N and leave out -n");
      l.nodes = static_cast<int32_t>(n / p);
    } else {
      l.nodes = nodes.given() ? nodes.value : 1;
      const int64_t room = int64_t{l.nodes} * p;
      if (ntasks.given() && n != room)
        return InvalidArgument(
            ntasks.at + " with " + per_node.at + " and " + nodes.at + ": " +
            std::to_string(l.nodes) + " nodes of " + std::to_string(p) + " tasks hold " +
            std::to_string(room) + ", " +
            (n > room ? "fewer than asked (Slurm refuses this too)"
                      : "more than asked (Slurm would run " + std::to_string(n) +
                            " of them, some nodes short; Tessera runs the same number of "
                            "tasks on every node)") +
            ": make -n " + std::to_string(room) + ", or leave -n out");
    }
  } else {
    l.nodes = nodes.given() ? nodes.value : 1;
    if (!ntasks.given()) n = l.nodes;
    if (n % l.nodes != 0)
      return InvalidArgument(ntasks.at + ": " + std::to_string(n) +
                             " tasks do not divide evenly over " + std::to_string(l.nodes) +
                             " nodes (" + nodes.at + ")");
    l.per_node = static_cast<int32_t>(n / l.nodes);
  }
  // Checked before the job's per-node state is sized (CheckTaskCount comes later).
  if (l.nodes > kMaxTasksPerJob)
    return InvalidArgument((nodes.given() ? nodes.at : ntasks.at + " with " + per_node.at) +
                           ": the job would have " + std::to_string(l.nodes) +
                           " nodes (one task each); at most " + std::to_string(kMaxTasksPerJob) +
                           " per job");
  return l;
}

// A GPU option of an #SBATCH line, [type:]N, and the line as written ("line 3: --gpus=8");
// `at` is empty when the script does not give it.
struct GpuAsk {
  int64_t count = 0;
  std::string type, at;
  bool given() const { return !at.empty(); }
};

// The job's GPUs per node from --gres and --gpus-per-node (per node), -G/--gpus (the job's
// in all) and --gpus-per-task (each of a node's tasks), on the layout `l`. Tessera gives
// every node of a job the same, so a total it cannot split evenly is refused rather than
// guessed (Slurm may spread it unevenly, or over more nodes than -N). Slurm refuses a typed
// and an untyped GPU request together ("Invalid GRES specification") and, given two counts,
// keeps one of them: options that do not agree are refused, naming both lines.
StatusOr<GpuAsk> GpusPerNode(const GpuAsk& gres, const GpuAsk& per_node, const GpuAsk& total,
                             const GpuAsk& per_task, const TaskLayout& l) {
  std::vector<GpuAsk> asks;  // each as GPUs per node
  for (const GpuAsk* a : {&gres, &per_node})
    if (a->given()) asks.push_back(*a);
  if (total.given()) {
    if (total.count % l.nodes != 0)
      return InvalidArgument(total.at + ": " + std::to_string(total.count) +
                             " GPUs over the job's " + std::to_string(l.nodes) +
                             " nodes is not the same number on each (Slurm may spread them "
                             "unevenly): ask per node with --gpus-per-node");
    asks.push_back({total.count / l.nodes, total.type, total.at});
  }
  if (per_task.given()) {
    const std::string at = per_task.at + " x " + std::to_string(l.per_node) + " tasks per node";
    const int64_t count = per_task.count * l.per_node;
    if (count > 999999999)
      return InvalidArgument(at + " = " + std::to_string(count) + " GPUs per node: too large");
    asks.push_back({count, per_task.type, at});
  }
  auto described = [](const GpuAsk& a) {
    return std::to_string(a.count) + (a.type.empty() ? "" : " " + a.type);
  };
  for (const GpuAsk& a : asks)
    if (a.count != asks[0].count || a.type != asks[0].type)
      return InvalidArgument(asks[0].at + " and " + a.at + ": two different GPU requests (" +
                             described(asks[0]) + " and " + described(a) +
                             " per node); give one of them");
  return asks.empty() ? GpuAsk{} : asks[0];
}

// The nodes an #SBATCH -w/--nodelist or -x/--exclude line names, and the line as written.
struct GivenNodes {
  std::vector<std::string> names;
  std::string at;
  bool given() const { return !at.empty(); }
};

constexpr size_t kMaxSbatchNodeNames = 4096;

// A Slurm hostlist ("gpu-node-[1-3],login1") as node names, each once.
StatusOr<std::vector<std::string>> SbatchNodeNames(const std::string& val, const std::string& at) {
  if (val.find('/') != std::string::npos)
    return InvalidArgument(at + ": a file of node names is not supported: name the nodes (e.g. " +
                           "gpu-node-[1-3],gpu-node-7)");
  // Bounded: the names are kept in the job and matched in every cycle (a 50-byte line must
  // not become 100,000 of them).
  auto names = ExpandHostlist(val, kMaxSbatchNodeNames);
  if (!names.ok()) return InvalidArgument(at + ": " + names.status().message());
  if (names->empty()) return InvalidArgument(at + ": names no node");
  std::set<std::string> seen;
  for (const std::string& n : *names)
    if (!seen.insert(n).second) return InvalidArgument(at + ": node " + n + " is named twice");
  return names;
}

}  // namespace

namespace {

// One walk for checking and expanding sbatch's filename patterns; `for_slurm`: only what
// Slurm would get wrong (%x, and %A and %a of an array element), everything else copied as
// written for Slurm to expand.
StatusOr<std::string> SlurmFilename(const std::string& pattern, const SlurmFilenameFields& f,
                                    bool for_slurm = false) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    size_t at = i++;
    size_t width = 0;
    while (i < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[i])))
      width = std::min<size_t>(width * 10 + static_cast<size_t>(pattern[i++] - '0'), 10);
    if (i >= pattern.size()) return InvalidArgument("\"" + pattern + "\" ends in an unfinished %");
    if (for_slurm && pattern[i] != 'x' && (!f.array || (pattern[i] != 'A' && pattern[i] != 'a'))) {
      out += pattern.substr(at, i + 1 - at);
      continue;
    }
    std::string v;
    switch (pattern[i]) {
      case '%':
        v = "%";
        break;
      case 'j':
        v = std::to_string(f.job_id);
        break;
      case 'x':
        v = f.job_name;
        break;
      case 'N':
        v = f.node;
        break;
      case 'n':
        v = std::to_string(f.node_index);
        break;
      case 't':
        v = std::to_string(f.task);
        break;
      case 'u':
        v = f.user;
        break;
      case 'A':
        v = std::to_string(f.array ? f.array->job_id : f.job_id);
        break;
      case 'a':
        v = f.array ? std::to_string(f.array->index) : "4294967294";  // Slurm's NO_VAL - 1
        break;
      default:
        return InvalidArgument("\"" + pattern.substr(at, i + 1 - at) +
                               "\" is not supported (supported: %j, %x, %N, %n, %t, %u, %A, %a, "
                               "%%)");
    }
    if (v.size() < width && pattern[i] != 'x' && pattern[i] != 'N' && pattern[i] != 'u')
      v.insert(0, width - v.size(), '0');
    out += v;
  }
  return out;
}

// sbatch --array=LIST[%N]: LIST is indices and ranges a-b[:step], comma-separated; %N runs at
// most N elements at once. Refused: what Slurm refuses, and duplicates (Slurm merges them
// silently, which hides a typo).
struct ArrayIndices {
  std::vector<int32_t> indices;  // ascending
  int32_t throttle = 0;
};
StatusOr<ArrayIndices> ParseArrayIndices(const std::string& v, const std::string& at) {
  ArrayIndices out;
  std::string list = v;
  if (auto pct = v.find('%'); pct != std::string::npos) {
    list = v.substr(0, pct);
    const std::string t = v.substr(pct + 1);
    if (t == "0") return InvalidArgument(at + ": throttle %0: at least 1 element must run");
    auto n = PositiveInt(t, at + ": throttle %" + t);
    if (!n.ok()) return n.status();
    out.throttle = *n;
  }
  auto number = [&](const std::string& x, const std::string& item) -> StatusOr<int32_t> {
    if (x.starts_with("-") || (x.empty() && item.starts_with("-")))
      return InvalidArgument(at + ": \"" + item + "\": indices are not negative");
    if (x.empty())
      return InvalidArgument(at + ": \"" + item + "\": a range needs two numbers (a-b)");
    if (x.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument(at + ": \"" + item + "\": \"" + x + "\" is not a number");
    if (x.size() > 9 || std::stol(x) > kMaxArrayIndex)
      return InvalidArgument(at + ": index " + x + " is above " + std::to_string(kMaxArrayIndex) +
                             " (indices go from 0 to " + std::to_string(kMaxArrayIndex) +
                             ", Slurm's default MaxArraySize 1001)");
    return static_cast<int32_t>(std::stol(x));
  };
  std::set<int32_t> seen;
  std::stringstream ss(list);
  std::string item;
  size_t items = 0;
  while (std::getline(ss, item, ',')) {
    ++items;
    if (item.empty())
      return InvalidArgument(at + ": an empty index between commas in \"" + list + "\"");
    std::string range = item;
    int32_t step = 1;
    if (auto colon = item.find(':'); colon != std::string::npos) {
      range = item.substr(0, colon);
      const std::string st = item.substr(colon + 1);
      if (st == "0") return InvalidArgument(at + ": \"" + item + "\": step 0: must be at least 1");
      auto n = PositiveInt(st, at + ": \"" + item + "\": step");
      if (!n.ok()) return n.status();
      step = *n;
    }
    const size_t dash = range.find('-');
    auto first = number(range.substr(0, dash), item);
    if (!first.ok()) return first.status();
    int32_t last = *first;
    if (dash != std::string::npos) {
      auto l = number(range.substr(dash + 1), item);
      if (!l.ok()) return l.status();
      last = *l;
      if (last < *first)
        return InvalidArgument(at + ": \"" + item + "\": the range ends before it starts");
    } else if (range.size() != item.size()) {
      return InvalidArgument(at + ": \"" + item + "\": a step needs a range (a-b:step)");
    }
    for (int32_t i = *first; i <= last; i += step)
      if (!seen.insert(i).second)
        return InvalidArgument(at + ": index " + std::to_string(i) + " is given twice");
  }
  if (items == 0)
    return InvalidArgument(at + ": no indices (e.g. --array=0-15, 1,3,5-7, 0-15:4, 0-99%8)");
  if (list.back() == ',')
    return InvalidArgument(at + ": an empty index after the last comma in \"" + list + "\"");
  out.indices.assign(seen.begin(), seen.end());
  return out;
}

}  // namespace

Status CheckSlurmFilename(const std::string& pattern, const std::string& path) {
  if (pattern.empty()) return InvalidArgument(path + ": needs a file name");
  auto r = SlurmFilename(pattern, {});
  return r.ok() ? Status::Ok() : InvalidArgument(path + ": " + r.status().message());
}

std::string ExpandSlurmFilename(const std::string& pattern, const SlurmFilenameFields& f) {
  auto r = SlurmFilename(pattern, f);
  return r.ok() ? *r : pattern;  // checked when the script was parsed
}

std::string ExpandForSlurm(const std::string& pattern, const std::string& job_name,
                           const std::optional<ArrayElement>& array) {
  SlurmFilenameFields f;
  f.job_name = job_name;
  f.array = array;
  auto r = SlurmFilename(pattern, f, true);
  return r.ok() ? *r : pattern;
}

StatusOr<std::vector<JobSpec>> ArrayElements(const JobSpec& s, const std::string& name,
                                             int64_t job_id) {
  std::vector<JobSpec> out;
  out.reserve(s.array_indices.size());
  for (int32_t index : s.array_indices) {
    JobSpec e = s;
    e.array_indices.clear();
    e.array->name = name;
    e.array->job_id = job_id;
    e.array->index = index;
    e.job.id = name + "_" + std::to_string(index);
    TESSERA_RETURN_IF_ERROR(CheckName(e.job.id, s.origin.name + " (with " + s.origin.array + ")"));
    std::map<std::string, std::string>& env = e.templates[0].env;
    env["SLURM_ARRAY_JOB_ID"] = std::to_string(job_id);
    env["SLURM_ARRAY_TASK_ID"] = std::to_string(index);
    env["SLURM_ARRAY_TASK_COUNT"] = std::to_string(e.array->count);
    env["SLURM_ARRAY_TASK_MIN"] = std::to_string(e.array->min);
    env["SLURM_ARRAY_TASK_MAX"] = std::to_string(e.array->max);
    env["SLURM_ARRAY_TASK_STEP"] = std::to_string(e.array->step);
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<JobSpec> ParseSbatchScript(const std::string& text) {
  // The node executes the script as a file, so the kernel reads this line (sbatch refuses a
  // script without it too).
  if (!text.starts_with("#!/"))
    return InvalidArgument(
        "line 1: a batch script must start with #! and the absolute path of its interpreter "
        "(for instance #!/bin/bash), as sbatch requires");
  JobSpec s;
  s.source = "sbatch";
  s.job.queue = "default";
  s.origin.name = "#SBATCH -J (not given: a generated name)";
  s.origin.queue = "#SBATCH -p (not given: the default queue)";
  s.origin.priority_class = "#SBATCH -q";
  s.restart.on_failure = FailureAction::kFailJob;
  s.restart.on_eviction = FailureAction::kRestartJob;  // Slurm's --requeue, unless --no-requeue
  GivenCount nodes, ntasks, per_node;
  int32_t cpus_per_task = 1;
  std::string cpus_at;  // the -c line, as written
  // As --gres and --gpus-per-node (per node), -G/--gpus (the job's in all) and
  // --gpus-per-task (per task) said them: a repeated option, its last value, as sbatch.
  GpuAsk gres, gpus_per_node, gpus_total, gpus_per_task;
  std::string stdout_file, stderr_file;
  GivenNodes nodelist, excluded;  // -w, -x
  int64_t mem = 0;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // As sbatch: directives end at the first command (a later #SBATCH, in a heredoc or a
    // comment further down, is the script's business).
    const size_t text_at = line.find_first_not_of(" \t");
    if (text_at == std::string::npos) continue;
    if (line[text_at] != '#') break;
    if (line.rfind("#SBATCH", 0) != 0) continue;
    std::string path = "line " + std::to_string(lineno);
    auto words = SbatchLineWords(line.substr(7), path);
    if (!words.ok()) return words.status();
    const std::vector<std::string>& args = *words;
    for (size_t i = 0; i < args.size(); ++i) {
      std::string opt = args[i], val;
      if (opt.empty() || opt[0] != '-')
        return InvalidArgument(path + ": \"" + opt +
                               "\" is not an option (options start with -; a value with spaces "
                               "is quoted, as in -J \"my job\")");
      auto eq = opt.find('=');
      bool long_opt = opt.rfind("--", 0) == 0;
      if (long_opt && eq != std::string::npos) {
        val = opt.substr(eq + 1);
        opt = opt.substr(0, eq);
      } else if (!long_opt && opt.size() > 2 && opt[0] == '-') {
        val = opt.substr(2);  // -N2
        opt = opt.substr(0, 2);
      }
      // Slurm's options that take no value: those Tessera honours, those that change only
      // what sbatch prints (accepted), and the rest (refused below as unsupported, not as
      // "needs a value", nor taking the next option as their value).
      static const char* kNoValue[] = {"--exclusive", "--requeue",  "--no-requeue", "--hold",
                                       "-H",          "--parsable", "-Q",           "--quiet",
                                       "-v",          "--verbose",  "--ignore-pbs"};
      static const char* kUnsupportedFlag[] = {
          "-O",        "--overcommit",   "-s",           "--oversubscribe", "--spread-job", "-W",
          "--wait",    "--test-only",    "--contiguous", "--use-min-nodes", "--reboot",     "-k",
          "--no-kill", "--get-user-env", "-I",           "--immediate"};
      auto among = [&](const auto& list) {
        return std::find_if(std::begin(list), std::end(list),
                            [&](const char* f) { return opt == f; }) != std::end(list);
      };
      const bool unsupported_flag = among(kUnsupportedFlag);
      bool flag = unsupported_flag || among(kNoValue);
      if (flag && !unsupported_flag && !val.empty() &&
          opt != "--exclusive")  // (--exclusive=user: below)
        return InvalidArgument(path + ": " + opt + ": takes no value, got \"" + val + "\"");
      if (!flag && val.empty()) {
        if (i + 1 >= args.size()) return InvalidArgument(path + ": " + opt + ": needs a value");
        val = args[++i];
      }
      std::string p = path + ": " + opt;
      if (opt == "-J" || opt == "--job-name") {
        TESSERA_RETURN_IF_ERROR(CheckName(val, p));
        s.job.id = val;
        s.origin.name = p;
      } else if (opt == "-p" || opt == "--partition") {
        TESSERA_RETURN_IF_ERROR(CheckName(val, p));
        s.job.queue = val;
        s.origin.queue = p + " (partition: the queue)";
      } else if (opt == "-q" || opt == "--qos") {
        s.job.priority_class = val;
        s.origin.priority_class = p + " (QOS: the priority class)";
      } else if (opt == "-N" || opt == "--nodes" || opt == "-n" || opt == "--ntasks" ||
                 opt == "--ntasks-per-node") {
        auto x = PositiveInt(val, p);
        if (!x.ok()) return x.status();
        GivenCount& c = opt == "-N" || opt == "--nodes"    ? nodes
                        : opt == "-n" || opt == "--ntasks" ? ntasks
                                                           : per_node;
        c = {*x, p + (long_opt ? "=" : " ") + val};
      } else if (opt == "-c" || opt == "--cpus-per-task") {
        auto x = PositiveInt(val, p);
        if (!x.ok()) return x.status();
        cpus_per_task = *x;
        cpus_at = p + (long_opt ? "=" : " ") + val;
      } else if (opt == "--mem") {
        std::string q = val;
        // Slurm takes a whole number (of its unit): 1.5G or 1e3 is refused there too.
        const size_t digits = q.find_first_not_of("0123456789");
        if (q.empty() || digits == 0 || (digits != std::string::npos && digits + 1 != q.size()))
          return InvalidArgument(p + ": bad memory \"" + val +
                                 "\" (a whole number with an optional unit K, M, G or T, as "
                                 "Slurm takes it: e.g. 64G, 1536M)");
        if (!q.empty() && std::isalpha(static_cast<unsigned char>(q.back()))) {
          char u = static_cast<char>(std::toupper(static_cast<unsigned char>(q.back())));
          q.pop_back();
          q += u == 'K' ? "Ki" : u == 'M' ? "Mi" : u == 'G' ? "Gi" : u == 'T' ? "Ti" : "?";
        } else {
          q += "Mi";  // Slurm's default unit is megabytes
        }
        auto b = ParseByteQuantity(q);
        if (!b.ok()) return InvalidArgument(p + ": bad memory \"" + val + "\" (e.g. 64G, 512M)");
        // Slurm reads 0 as all of each node's memory, which a request by amount cannot say;
        // taken as "no memory" it would place the job where the memory is not free.
        if (*b == 0)
          return InvalidArgument(p + "=" + val +
                                 ": all of each node's memory (Slurm's meaning) is not "
                                 "supported: give the amount per node (e.g. --mem=500G), and "
                                 "--exclusive to keep other jobs off the nodes");
        mem = *b;
      } else if (opt == "-t" || opt == "--time") {
        auto t = SlurmTime(val, p);
        if (!t.ok()) return t.status();
        if (*t > 0) s.job.runtime_estimate_seconds = s.time_limit_seconds = *t;
      } else if (opt == "--gres" || opt == "--gpus-per-node" || opt == "-G" || opt == "--gpus" ||
                 opt == "--gpus-per-task") {
        // --gres=gpu[:type]:N ; --gpus-per-node, -G/--gpus, --gpus-per-task=[type:]N
        std::vector<std::string> f;
        std::stringstream ss(val);
        std::string x;
        while (std::getline(ss, x, ':')) f.push_back(x);
        if (opt == "--gres") {
          if (f.empty() || f[0] != "gpu")
            return InvalidArgument(p + ": only gpu resources are supported, got \"" + val + "\"");
          f.erase(f.begin());
          // name[[:type]:count]: Slurm's count defaults to 1 (gpu, gpu:a100; a type is a name).
          if (f.empty() ||
              (f.size() == 1 && !f[0].empty() && std::isalpha(static_cast<unsigned char>(f[0][0]))))
            f.push_back("1");
        }
        if (f.empty() || f.size() > 2)
          return InvalidArgument(p + ": expected " +
                                 (opt == "--gres" ? "gpu[:type]:N" : "[type:]N") + ", got \"" +
                                 val + "\"");
        auto n = PositiveInt(f.back(), p);
        if (!n.ok()) return n.status();
        GpuAsk& ask = opt == "--gres"            ? gres
                      : opt == "--gpus-per-node" ? gpus_per_node
                      : opt == "--gpus-per-task" ? gpus_per_task
                                                 : gpus_total;
        ask.count = *n;
        ask.type = f.size() == 2 ? f[0] : "";
        ask.at = p + (long_opt ? "=" : " ") + val;
      } else if (opt == "--requeue" || opt == "--no-requeue") {
        // Slurm requeues a job whose node fails or that is preempted unless --no-requeue.
        s.restart.on_eviction =
            opt == "--requeue" ? FailureAction::kRestartJob : FailureAction::kFailJob;
      } else if (opt == "-H" || opt == "--hold") {
        s.held = true;
      } else if (opt == "-d" || opt == "--dependency") {
        auto d = ParseDependencies(val, p);
        if (!d.ok()) return d.status();
        s.dependencies = std::move(*d);  // a repeated option: its last value, as sbatch
        s.origin.dependency = p + (long_opt ? "=" : " ") + val;
      } else if (opt == "--kill-on-invalid-dep") {
        if (val != "yes" && val != "no")
          return InvalidArgument(p + ": expected yes or no, got \"" + val + "\"");
        s.kill_on_invalid_dependency = val == "yes";
      } else if (opt == "--exclusive") {
        // Slurm's --exclusive=user|mcs|topo share nodes by owner, label or topology segment:
        // refused rather than read as plain --exclusive, which would keep out more than asked.
        if (!val.empty())
          return InvalidArgument(p + "=" + val +
                                 ": not supported (only plain --exclusive: no other job on the "
                                 "job's nodes; sharing by user, MCS label or topology segment "
                                 "is not)");
        s.job.exclusive = true;
      } else if (opt == "-w" || opt == "--nodelist" || opt == "-x" || opt == "--exclude") {
        // A repeated option: its last value, as sbatch.
        const std::string at = p + (long_opt ? "=" : " ") + val;
        auto names = SbatchNodeNames(val, at);
        if (!names.ok()) return names.status();
        (opt == "-w" || opt == "--nodelist" ? nodelist : excluded) = {std::move(*names), at};
      } else if (opt == "-o" || opt == "--output" || opt == "-e" || opt == "--error") {
        TESSERA_RETURN_IF_ERROR(CheckSlurmFilename(val, p));
        (opt == "-o" || opt == "--output" ? stdout_file : stderr_file) = val;
      } else if (opt == "-a" || opt == "--array") {
        auto a = ParseArrayIndices(val, p + (long_opt ? "=" : " ") + val);
        if (!a.ok()) return a.status();
        s.array_indices = a->indices;
        ArrayElement& e = s.array.emplace();
        e.count = static_cast<int32_t>(a->indices.size());
        e.min = a->indices.front();
        e.max = a->indices.back();
        e.throttle = a->throttle;
        // The common difference of the indices, as Slurm's SLURM_ARRAY_TASK_STEP; 1 without.
        e.step = e.count > 1 ? a->indices[1] - a->indices[0] : 1;
        for (size_t k = 1; k < a->indices.size(); ++k)
          if (a->indices[k] - a->indices[k - 1] != e.step) e.step = 1;
        s.origin.array = p + (long_opt ? "=" : " ") + val;
      } else if (opt == "--parsable" || opt == "-Q" || opt == "--quiet" || opt == "-v" ||
                 opt == "--verbose" || opt == "--ignore-pbs") {
        // accepted: they change only what sbatch itself prints
      } else if (opt == "-A" || opt == "--account" || opt == "--mail-type" ||
                 opt == "--mail-user" || opt == "-D" || opt == "--chdir") {
        if (opt == "-D" || opt == "--chdir")
          s.templates.resize(1), s.templates[0].working_dir = val;
        // accepted; not used by the scheduler
      } else {
        return InvalidArgument(
            p +
            ": unknown or unsupported directive (supported: -J, -p, -q, -N, -n, "
            "--ntasks-per-node, -c, --mem, -t, --gres=gpu[:type]:N, --gpus-per-node, -G/--gpus, "
            "--gpus-per-task, "
            "--exclusive, -w/--nodelist, -x/--exclude, --requeue, --no-requeue, -H, -d, "
            "--kill-on-invalid-dep, -a/--array, -o, -e, -A, -D)");
      }
    }
  }
  // --gpus-per-task needs a task count, as in Slurm (-n, or -G: G / per-task tasks, Slurm's
  // implicit count); --ntasks-per-node gives one here too.
  if (gpus_per_task.given() && !ntasks.given()) {
    if (gpus_total.given()) {
      if (gpus_total.count % gpus_per_task.count != 0)
        return InvalidArgument(gpus_total.at + " with " + gpus_per_task.at + ": " +
                               std::to_string(gpus_total.count) +
                               " GPUs are not a whole number of tasks of " +
                               std::to_string(gpus_per_task.count) + " GPUs each");
      ntasks = {static_cast<int32_t>(gpus_total.count / gpus_per_task.count),
                gpus_total.at + " with " + gpus_per_task.at};
    } else if (!per_node.given()) {
      return InvalidArgument(gpus_per_task.at +
                             ": needs a task count: give -n/--ntasks (or -G/--gpus, or "
                             "--ntasks-per-node), as Slurm requires -n or --gpus with it");
    }
  }
  // -w without -N: Slurm's node count is at least the list's (with -n and
  // --ntasks-per-node, those two say how many nodes; checked against the list below).
  const int32_t listed = static_cast<int32_t>(nodelist.names.size());
  if (nodelist.given() && !nodes.given() && !(ntasks.given() && per_node.given()))
    nodes = {listed, nodelist.at};
  auto layout = ResolveTaskLayout(nodes, ntasks, per_node);
  if (!layout.ok()) return layout.status();
  const int32_t n_nodes = layout->nodes, n_per_node = layout->per_node;
  auto gpus = GpusPerNode(gres, gpus_per_node, gpus_total, gpus_per_task, *layout);
  if (!gpus.ok()) return gpus.status();
  // -w: the job's nodes include every listed one; -x: none of those. Node affinity on
  // kubernetes.io/hostname holds for every node of the job, so -w can only be all of its
  // nodes: Slurm's "these and others of its choosing" has no affinity to say it.
  if (nodelist.given() && n_nodes != listed) {
    // (Not the list's own count: that one matches.) -N, or -n with --ntasks-per-node.
    const std::string count = nodes.given() ? nodes.at : ntasks.at + " with " + per_node.at;
    if (n_nodes < listed)
      return InvalidArgument(nodelist.at + ": names " + std::to_string(listed) +
                             " nodes, more than the job's " + std::to_string(n_nodes) + " (" +
                             count + "): every listed node must be one of the job's");
    return InvalidArgument(nodelist.at + ": names " + std::to_string(listed) +
                           " nodes and the job has " + std::to_string(n_nodes) + " (" + count +
                           "): Slurm would add " + std::to_string(n_nodes - listed) +
                           " node(s) of its choosing, which Tessera cannot express (a node "
                           "affinity holds for every node of a job): name all " +
                           std::to_string(n_nodes) + " nodes, or keep nodes out with -x instead");
  }
  for (const std::string& n : excluded.names) {
    if (std::find(nodelist.names.begin(), nodelist.names.end(), n) != nodelist.names.end())
      return InvalidArgument(excluded.at + ": node " + n + " is also in " + nodelist.at);
  }
  if (nodelist.given() || excluded.given()) {
    NodeSelectorTerm term;
    if (nodelist.given())
      term.match_expressions.push_back(
          {kHostnameLabel, NodeSelectorRequirement::Op::kIn, nodelist.names});
    if (excluded.given())
      term.match_expressions.push_back(
          {kHostnameLabel, NodeSelectorRequirement::Op::kNotIn, excluded.names});
    s.job.placement.affinity.required = {std::move(term)};
  }
  // One Tessera task per Slurm node, holding all of that node's Slurm tasks; the gang is every
  // node.
  // CPUs per node; each count alone may be near 10^9, and no node has a million CPUs.
  constexpr int64_t kMaxCpusPerNode = 1000000;
  const int64_t cpus = int64_t{cpus_per_task} * n_per_node;
  if (cpus > kMaxCpusPerNode)
    return InvalidArgument(
        (cpus_at.empty() ? "-c 1" : cpus_at) + " x " + std::to_string(n_per_node) +
        " tasks per node = " + std::to_string(cpus) + " CPUs per node, more than any node has (" +
        std::to_string(kMaxCpusPerNode) + " at most)");
  TaskGroup g;
  g.name = "node";
  g.replicas = n_nodes;
  g.request.cpu_milli = 1000 * cpus;
  g.request.memory_bytes = mem;
  if (gpus->count > 0) {
    g.request.gpu.kind = GpuRequestKind::kWhole;
    g.request.gpu.count = static_cast<int32_t>(gpus->count);
    if (!gpus->type.empty()) {
      // Slurm types are lower-case model families ("a100", "h100", "v100"): any model of the
      // family, A100-40GB and A100-80GB, H100-94GB (NVL), V100-SXM2-32GB, ignoring case
      // (GpuModelMatches); a Slurm pool's own devices are named by the type alone ("A100").
      std::string up = gpus->type;
      for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      g.request.gpu.models = {up, up + "-*"};
    }
  }
  s.job.groups.push_back(g);
  s.job.min_available = n_nodes;
  s.job.one_task_per_node = true;  // -N means distinct nodes
  s.job.allocations.assign(n_nodes, std::nullopt);
  s.templates.resize(1);
  s.templates[0].script = text;
  // As sbatch: stderr goes with stdout unless -e is given; stdout to slurm-%j.out unless -o
  // (slurm-%A_%a.out in an array). (Neither given: the agent's log files only, which
  // `tessera logs` reads.)
  if (!stdout_file.empty() || !stderr_file.empty()) {
    s.templates[0].stdout_file = !stdout_file.empty() ? stdout_file
                                 : s.array            ? "slurm-%A_%a.out"
                                                      : "slurm-%j.out";
    s.templates[0].stderr_file = stderr_file.empty() ? s.templates[0].stdout_file : stderr_file;
  }
  s.templates[0].env["SLURM_NTASKS"] = std::to_string(int64_t{n_nodes} * n_per_node);
  s.templates[0].env["SLURM_NNODES"] = std::to_string(n_nodes);
  return s;
}

// ---- storage shape ----

Json RestartPolicyToJson(const RestartPolicy& r) {
  Json j = Json::object();
  j["onFailure"] = FailureActionName(r.on_failure);
  j["onEviction"] = FailureActionName(r.on_eviction);
  j["maxRetries"] = r.max_retries;
  if (r.complete_on_task_completed) j["completeOnTaskCompleted"] = true;
  for (const auto& [code, action] : r.on_exit_code)
    j["onExitCode"][std::to_string(code)] = FailureActionName(action);
  return j;
}

namespace {

FailureAction ActionNamed(const std::string& name, FailureAction otherwise) {
  for (FailureAction a :
       {FailureAction::kFailJob, FailureAction::kRestartJob, FailureAction::kRestartTask})
    if (name == FailureActionName(a)) return a;
  return otherwise;
}

StatusOr<RestartPolicy> RestartPolicyFromJson(const Json& v, const std::string& path) {
  RestartPolicy rp;
  ObjectReader pr(v, path);
  std::string f, e;
  std::map<std::string, std::string> codes;
  TESSERA_RETURN_IF_ERROR(pr.String("onFailure", f));
  TESSERA_RETURN_IF_ERROR(pr.String("onEviction", e));
  TESSERA_RETURN_IF_ERROR(pr.Int32("maxRetries", rp.max_retries, false, -1));
  TESSERA_RETURN_IF_ERROR(pr.Bool("completeOnTaskCompleted", rp.complete_on_task_completed));
  TESSERA_RETURN_IF_ERROR(pr.StringMap("onExitCode", codes));
  TESSERA_RETURN_IF_ERROR(pr.Finish());
  rp.on_failure = ActionNamed(f, FailureAction::kFailJob);
  rp.on_eviction = ActionNamed(e, FailureAction::kRestartJob);
  for (const auto& [code, action] : codes)
    rp.on_exit_code[std::stoi(code)] = ActionNamed(action, FailureAction::kFailJob);
  return rp;
}

}  // namespace

FailureAction RestartPolicy::OnFailure(std::optional<int32_t> exit_code) const {
  if (exit_code) {
    auto it = on_exit_code.find(*exit_code);
    if (it != on_exit_code.end()) return it->second;
  }
  return on_failure;
}

const RestartPolicy& JobSpec::RestartFor(int32_t task) const {
  for (size_t g = 0, first = 0; g < group_restart.size() && g < job.groups.size(); ++g) {
    first += static_cast<size_t>(job.groups[g].replicas);
    if (task >= 0 && static_cast<size_t>(task) < first)
      return group_restart[g] ? *group_restart[g] : restart;
  }
  return restart;
}

const char* DependencyConditionName(Dependency::Condition c) {
  switch (c) {
    case Dependency::Condition::kAfter:
      return "after";
    case Dependency::Condition::kAfterAny:
      return "afterany";
    case Dependency::Condition::kAfterOk:
      return "afterok";
    case Dependency::Condition::kAfterNotOk:
      return "afternotok";
  }
  return "afterany";
}

Json JobSpecToJson(const JobSpec& s) {
  Json j = Json::object();
  Job bare = s.job;
  bare.allocations.assign(bare.TaskCount(), std::nullopt);
  bare.start_time = -1;
  j["job"] = JobToJson(bare);
  Json t = Json::array();
  for (const auto& tt : s.templates) {
    Json x = Json::object();
    x["command"] = tt.command;
    if (!tt.script.empty()) x["script"] = tt.script;
    if (!tt.env.empty()) x["env"] = tt.env;
    if (tt.expand_references) x["expandReferences"] = true;
    if (!tt.env_order.empty()) x["envOrder"] = tt.env_order;
    if (!tt.working_dir.empty()) x["workingDir"] = tt.working_dir;
    if (!tt.image.empty()) x["image"] = tt.image;
    if (!tt.stdout_file.empty()) x["stdoutFile"] = tt.stdout_file;
    if (!tt.stderr_file.empty()) x["stderrFile"] = tt.stderr_file;
    if (tt.cpu_limit_milli > 0) x["cpuLimit"] = FormatMilli(tt.cpu_limit_milli);
    if (tt.memory_limit_bytes > 0) x["memoryLimit"] = std::to_string(tt.memory_limit_bytes);
    if (!tt.run_as.empty()) x["securityContext"] = RunAsToJson(tt.run_as);
    t.push_back(x);
  }
  j["templates"] = t;
  j["restartPolicy"] = RestartPolicyToJson(s.restart);
  if (!s.group_restart.empty()) {
    Json groups = Json::array();
    for (const auto& g : s.group_restart) groups.push_back(g ? RestartPolicyToJson(*g) : Json());
    j["groupRestartPolicies"] = groups;
  }
  j["source"] = s.source;
  if (s.service) j["service"] = true;
  if (s.indexed) j["indexed"] = true;
  if (s.ttl_seconds_after_finished) j["ttlSecondsAfterFinished"] = *s.ttl_seconds_after_finished;
  if (s.time_limit_seconds) j["timeLimitSeconds"] = *s.time_limit_seconds;
  if (s.time_limit_whole_job) j["timeLimitWholeJob"] = true;
  if (s.kill_on_invalid_dependency) j["killOnInvalidDependency"] = true;
  if (!s.labels.empty()) j["labels"] = s.labels;
  if (!s.annotations.empty()) j["annotations"] = s.annotations;
  for (const Dependency& d : s.dependencies) {
    Json x = {{"condition", DependencyConditionName(d.condition)}, {"job", d.job}, {"seq", d.seq}};
    if (d.array) x["array"] = true;
    j["dependencies"].push_back(x);
  }
  if (s.array)
    j["array"] = {{"name", s.array->name},   {"jobId", s.array->job_id},
                  {"index", s.array->index}, {"count", s.array->count},
                  {"min", s.array->min},     {"max", s.array->max},
                  {"step", s.array->step},   {"throttle", s.array->throttle}};
  return j;
}

StatusOr<JobSpec> JobSpecFromJson(const Json& v, const std::string& path) {
  JobSpec s;
  ObjectReader r(v, path);
  const Json* job = r.Get("job");
  if (job == nullptr) return InvalidArgument(r.Path("job") + ": required");
  // A Deployment scaled to zero (`tessera scale --replicas 0`) keeps its one task group with
  // no replicas, which the model's job shape refuses (a job to place has tasks): read with
  // one, then none again.
  Json model = *job;
  const bool scaled_to_zero =
      v.is_object() && v.value("source", "") == "apps/v1 Deployment" && model.is_object() &&
      model.contains("tasks") && model["tasks"].is_array() && model["tasks"].size() == 1 &&
      model["tasks"][0].is_object() && model["tasks"][0].value("replicas", Json(1)) == Json(0);
  if (scaled_to_zero) model["tasks"][0]["replicas"] = 1;
  auto j = JobFromJson(model, r.Path("job"));
  if (!j.ok()) return j.status();
  s.job = std::move(*j);
  if (scaled_to_zero) {
    s.job.groups[0].replicas = 0;
    s.job.allocations.clear();
  }
  TESSERA_RETURN_IF_ERROR(
      ForEach(r.Get("templates"), r.Path("templates"), [&](const Json& t, const std::string& p) {
        TaskTemplate tt;
        ObjectReader tr(t, p);
        TESSERA_RETURN_IF_ERROR(tr.StringList("command", tt.command));
        TESSERA_RETURN_IF_ERROR(tr.String("script", tt.script));
        TESSERA_RETURN_IF_ERROR(tr.StringMap("env", tt.env));
        TESSERA_RETURN_IF_ERROR(tr.Bool("expandReferences", tt.expand_references));
        TESSERA_RETURN_IF_ERROR(tr.StringList("envOrder", tt.env_order));
        TESSERA_RETURN_IF_ERROR(tr.String("workingDir", tt.working_dir));
        TESSERA_RETURN_IF_ERROR(tr.String("image", tt.image));
        TESSERA_RETURN_IF_ERROR(tr.String("stdoutFile", tt.stdout_file));
        TESSERA_RETURN_IF_ERROR(tr.String("stderrFile", tt.stderr_file));
        TESSERA_RETURN_IF_ERROR(tr.Milli("cpuLimit", tt.cpu_limit_milli));
        TESSERA_RETURN_IF_ERROR(tr.Bytes("memoryLimit", tt.memory_limit_bytes));
        if (const Json* sc = tr.Get("securityContext")) {
          auto run_as = RunAsFromJson(*sc, tr.Path("securityContext"));
          if (!run_as.ok()) return run_as.status();
          tt.run_as = std::move(*run_as);
        }
        s.templates.push_back(std::move(tt));
        return tr.Finish();
      }));
  if (const Json* rp = r.Get("restartPolicy")) {
    auto p = RestartPolicyFromJson(*rp, r.Path("restartPolicy"));
    if (!p.ok()) return p.status();
    s.restart = std::move(*p);
  }
  TESSERA_RETURN_IF_ERROR(ForEach(r.Get("groupRestartPolicies"), r.Path("groupRestartPolicies"),
                                  [&](const Json& g, const std::string& p) -> Status {
                                    if (g.is_null()) {
                                      s.group_restart.emplace_back();
                                      return Status::Ok();
                                    }
                                    auto rp = RestartPolicyFromJson(g, p);
                                    if (!rp.ok()) return rp.status();
                                    s.group_restart.push_back(std::move(*rp));
                                    return Status::Ok();
                                  }));
  TESSERA_RETURN_IF_ERROR(r.String("source", s.source));
  TESSERA_RETURN_IF_ERROR(r.Bool("service", s.service));
  s.job.service |= s.service;  // (stored before the model said it)
  TESSERA_RETURN_IF_ERROR(r.Bool("indexed", s.indexed));
  TESSERA_RETURN_IF_ERROR(ReadTtl(r, s));
  if (r.Has("timeLimitSeconds")) {
    int64_t limit = 0;
    TESSERA_RETURN_IF_ERROR(r.Int("timeLimitSeconds", limit, false, 1));
    s.time_limit_seconds = limit;
  }
  TESSERA_RETURN_IF_ERROR(r.Bool("timeLimitWholeJob", s.time_limit_whole_job));
  TESSERA_RETURN_IF_ERROR(r.Bool("killOnInvalidDependency", s.kill_on_invalid_dependency));
  TESSERA_RETURN_IF_ERROR(r.StringMap("labels", s.labels));
  TESSERA_RETURN_IF_ERROR(r.StringMap("annotations", s.annotations));
  TESSERA_RETURN_IF_ERROR(ForEach(
      r.Get("dependencies"), r.Path("dependencies"), [&](const Json& d, const std::string& p) {
        ObjectReader dr(d, p);
        std::string condition, job;
        int64_t seq = 0;
        TESSERA_RETURN_IF_ERROR(dr.String("condition", condition, true));
        TESSERA_RETURN_IF_ERROR(dr.String("job", job, true));
        TESSERA_RETURN_IF_ERROR(dr.Int("seq", seq, false, 0));
        bool array = false;
        TESSERA_RETURN_IF_ERROR(dr.Bool("array", array));
        TESSERA_RETURN_IF_ERROR(dr.Finish());
        auto parsed = ParseDependencies(condition + ":" + job, p);
        if (!parsed.ok()) return parsed.status();
        s.dependencies.push_back({parsed->at(0).condition, job, seq, array});
        return Status::Ok();
      }));
  if (const Json* a = r.Get("array")) {
    ArrayElement& e = s.array.emplace();
    ObjectReader ar(*a, r.Path("array"));
    TESSERA_RETURN_IF_ERROR(ar.String("name", e.name, true));
    TESSERA_RETURN_IF_ERROR(ar.Int("jobId", e.job_id, true, 1));
    TESSERA_RETURN_IF_ERROR(ar.Int32("index", e.index, true, 0));
    TESSERA_RETURN_IF_ERROR(ar.Int32("count", e.count, true, 1));
    TESSERA_RETURN_IF_ERROR(ar.Int32("min", e.min, true, 0));
    TESSERA_RETURN_IF_ERROR(ar.Int32("max", e.max, true, 0));
    TESSERA_RETURN_IF_ERROR(ar.Int32("step", e.step, true, 1));
    TESSERA_RETURN_IF_ERROR(ar.Int32("throttle", e.throttle, false, 0));
    TESSERA_RETURN_IF_ERROR(ar.Finish());
  }
  TESSERA_RETURN_IF_ERROR(r.Finish());
  while (s.templates.size() < s.job.groups.size()) s.templates.emplace_back();
  return s;
}

}  // namespace tessera::spec
