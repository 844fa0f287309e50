#include "model/run_as.h"

namespace tessera {
namespace {

// As Kubernetes validates a securityContext id: an integer in 0..2147483647.
StatusOr<int64_t> UnixId(const Json& v, const std::string& path) {
  if (!v.is_number_integer())
    return InvalidArgument(path + ": expected an integer, got " + std::string(v.type_name()));
  // (A value above int64 reads as unsigned: is_number_unsigned with a large value.)
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxUnixId))
    return InvalidArgument(path + ": must be between 0 and " + std::to_string(kMaxUnixId) +
                           ", inclusive, got " + v.dump());
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > kMaxUnixId)
    return InvalidArgument(path + ": must be between 0 and " + std::to_string(kMaxUnixId) +
                           ", inclusive, got " + std::to_string(id));
  return id;
}

}  // namespace

Json RunAsToJson(const RunAs& r) {
  Json j = Json::object();
  if (r.user) j["runAsUser"] = *r.user;
  if (r.group) j["runAsGroup"] = *r.group;
  if (r.non_root) j["runAsNonRoot"] = true;
  if (!r.supplemental_groups.empty()) j["supplementalGroups"] = r.supplemental_groups;
  return j;
}

StatusOr<RunAs> RunAsFromJson(const Json& v, const std::string& path) {
  RunAs r;
  ObjectReader o(v, path);
  for (auto [key, out] : {std::pair{"runAsUser", &r.user}, std::pair{"runAsGroup", &r.group}}) {
    if (const Json* x = o.Get(key)) {
      auto id = UnixId(*x, o.Path(key));
      if (!id.ok()) return id.status();
      *out = *id;
    }
  }
  TESSERA_RETURN_IF_ERROR(o.Bool("runAsNonRoot", r.non_root));
  if (const Json* g = o.Get("supplementalGroups")) {
    if (!g->is_array())
      return InvalidArgument(o.Path("supplementalGroups") + ": expected a list, got " +
                             std::string(g->type_name()));
    for (size_t i = 0; i < g->size(); ++i) {
      auto id = UnixId((*g)[i], o.Path("supplementalGroups") + "[" + std::to_string(i) + "]");
      if (!id.ok()) return id.status();
      r.supplemental_groups.push_back(*id);
    }
  }
  TESSERA_RETURN_IF_ERROR(o.Finish());
  // Kubernetes' kubelet refuses this pair when it starts the container; refused here when the
  // document is read, where the user still sees the field.
  if (r.non_root && r.user == 0)
    return InvalidArgument(o.Path("runAsNonRoot") + ": true, but " + o.Path("runAsUser") +
                           " is 0 (root): the task could never start");
  return r;
}

std::string DescribeRunAs(const RunAs& r) {
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (r.user) add("uid " + std::to_string(*r.user));
  if (r.group) add("gid " + std::to_string(*r.group));
  if (!r.supplemental_groups.empty()) {
    std::string g;
    for (int64_t id : r.supplemental_groups) g += (g.empty() ? "" : ",") + std::to_string(id);
    add("supplemental groups " + g);
  }
  if (r.non_root) add("runAsNonRoot");
  return s;
}

Json RanAsToJson(const RanAs& r) { return {{"uid", r.uid}, {"gid", r.gid}, {"user", r.user}}; }

RanAs RanAsFromJson(const Json& v) {
  if (!v.is_object()) return {};
  return {v.value("uid", int64_t{-1}), v.value("gid", int64_t{-1}), v.value("user", "")};
}

}  // namespace tessera
