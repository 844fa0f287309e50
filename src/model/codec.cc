#include "model/codec.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include <yaml-cpp/yaml.h>

#include "model/labels.h"

namespace tessera {
namespace {

std::string Idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

Status TypeError(const std::string& path, const char* want, const Json& got) {
  return InvalidArgument(path + ": expected " + want + ", got " + std::string(got.type_name()));
}

Json YamlNodeToJson(const YAML::Node& n, int depth) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: always a string
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      if (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-')) {
        bool integral = s.find_first_not_of("-0123456789", 1) == std::string::npos &&
                        std::isdigit(static_cast<unsigned char>(s.back()));
        if (integral && s.size() < 19) return std::stoll(s);
      }
      return s;
    }
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      for (const auto& item : n) arr.push_back(YamlNodeToJson(item, depth + 1));
      return arr;
    }
    case YAML::NodeType::Map: {
      // yaml-cpp keeps the last of repeated keys; a repeated key is almost always a paste
      // error that would silently drop the first block, so it is refused (as kubectl does).
      Json obj = Json::object();
      std::map<std::string, int> first_line;
      for (const auto& kv : n) {
        std::string key = kv.first.as<std::string>();
        const int line = kv.first.Mark().line + 1;
        if (auto [it, fresh] = first_line.emplace(key, line); !fresh)
          throw YAML::ParserException(
              kv.first.Mark(),
              "key \"" + key + "\" repeats the one at line " + std::to_string(it->second));
        obj[key] = YamlNodeToJson(kv.second, depth + 1);
      }
      return obj;
    }
  }
  return nullptr;
}

// Walks the document as YamlNodeToJson will, with aliases expanded: false when it nests
// deeper than 64 levels (`too_deep`) or has more than `budget` nodes. (An alias is a
// reference: ten lines that each repeat the one before ten times expand a 400-byte text
// into 10^7 nodes.)
bool YamlWithinBounds(const YAML::Node& n, int depth, int64_t& budget, bool& too_deep) {
  if (depth > 64) return !(too_deep = true);
  if (--budget < 0) return false;
  if (n.IsSequence() || n.IsMap())
    for (const auto& item : n) {
      if (n.IsMap() && --budget < 0) return false;  // the key
      if (!YamlWithinBounds(n.IsMap() ? item.second : item, depth + 1, budget, too_deep))
        return false;
    }
  return true;
}

}  // namespace

StatusOr<Json> ParseYaml(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    // Written out, a node takes two bytes or more: a document without aliases stays far
    // below this; one whose aliases multiply it is refused before it is built.
    const int64_t most = 10000 + static_cast<int64_t>(text.size());
    int64_t budget = most;
    bool too_deep = false;
    if (!YamlWithinBounds(root, 0, budget, too_deep)) {
      if (too_deep) return InvalidArgument("document nests deeper than 64 levels");
      return InvalidArgument("document expands to more than " + std::to_string(most) +
                             " values (its aliases repeat what they name)");
    }
    return YamlNodeToJson(root, 0);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("malformed YAML: ") + e.what());
  }
}

StatusOr<Json> ParseJson(const std::string& text) {
  std::vector<std::set<std::string>> open;  // the keys of each object being read
  std::string repeated;
  auto check = [&](int, Json::parse_event_t e, Json& parsed) {
    if (e == Json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (e == Json::parse_event_t::object_end) {
      open.pop_back();
    } else if (e == Json::parse_event_t::key && repeated.empty() &&
               !open.back().insert(parsed.get<std::string>()).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    Json j = Json::parse(text, check);
    if (!repeated.empty())
      return InvalidArgument("malformed JSON: key \"" + repeated + "\" repeats within an object");
    return j;
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
}

StatusOr<Json> LoadYamlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = ParseYaml(ss.str());
  if (!doc.ok()) return doc.status().WithContext(path);
  return doc;
}

// ---- ObjectReader ----

ObjectReader::ObjectReader(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

bool ObjectReader::Has(const char* key) {
  known_.emplace_back(key);
  return obj_.is_object() && obj_.contains(key) && !obj_.at(key).is_null();
}

const Json* ObjectReader::Get(const char* key) { return Has(key) ? &obj_.at(key) : nullptr; }

Status ObjectReader::String(const char* key, std::string& out, bool required) {
  const Json* v = Get(key);
  if (v == nullptr) return required ? InvalidArgument(Path(key) + ": required") : Status::Ok();
  if (v->is_number_integer()) {
    out = std::to_string(v->get<int64_t>());
    return Status::Ok();
  }
  if (!v->is_string()) return TypeError(Path(key), "a string", *v);
  out = v->get<std::string>();
  return Status::Ok();
}

Status ObjectReader::Int(const char* key, int64_t& out, bool required, int64_t min) {
  const Json* v = Get(key);
  if (v == nullptr) return required ? InvalidArgument(Path(key) + ": required") : Status::Ok();
  int64_t x;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_string()) {
    try {
      size_t used = 0;
      x = std::stoll(v->get<std::string>(), &used);
      if (used != v->get<std::string>().size()) throw std::invalid_argument("trailing");
    } catch (...) {
      return InvalidArgument(Path(key) + ": expected an integer, got \"" + v->get<std::string>() + "\"");
    }
  } else {
    return TypeError(Path(key), "an integer", *v);
  }
  if (x < min)
    return InvalidArgument(Path(key) + ": must be >= " + std::to_string(min) + ", got " + std::to_string(x));
  out = x;
  return Status::Ok();
}

Status ObjectReader::Int32(const char* key, int32_t& out, bool required, int32_t min) {
  int64_t x = out;
  TESSERA_RETURN_IF_ERROR(Int(key, x, required, min));
  if (x > INT32_MAX) return InvalidArgument(Path(key) + ": too large, got " + std::to_string(x));
  out = static_cast<int32_t>(x);
  return Status::Ok();
}

Status ObjectReader::Bool(const char* key, bool& out) {
  const Json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return TypeError(Path(key), "true or false", *v);
  out = v->get<bool>();
  return Status::Ok();
}

Status ObjectReader::Milli(const char* key, int64_t& out, bool required) {
  const Json* v = Get(key);
  if (v == nullptr) return required ? InvalidArgument(Path(key) + ": required") : Status::Ok();
  auto r = JsonMilli(*v, Path(key));
  if (!r.ok()) return r.status();
  out = *r;
  return Status::Ok();
}

Status ObjectReader::Bytes(const char* key, int64_t& out, bool required) {
  const Json* v = Get(key);
  if (v == nullptr) return required ? InvalidArgument(Path(key) + ": required") : Status::Ok();
  auto r = JsonBytes(*v, Path(key));
  if (!r.ok()) return r.status();
  out = *r;
  return Status::Ok();
}

Status ObjectReader::StringMap(const char* key, std::map<std::string, std::string>& out) {
  const Json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return TypeError(Path(key), "a map of strings", *v);
  for (const auto& [k, val] : v->items()) {
    if (val.is_string()) out[k] = val.get<std::string>();
    else if (val.is_number_integer()) out[k] = std::to_string(val.get<int64_t>());
    else if (val.is_boolean()) out[k] = val.get<bool>() ? "true" : "false";
    else return TypeError(Path(key) + "." + k, "a string", val);
  }
  return Status::Ok();
}

Status ObjectReader::StringList(const char* key, std::vector<std::string>& out) {
  const Json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return TypeError(Path(key), "a list of strings", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& s = (*v)[i];
    if (s.is_string()) out.push_back(s.get<std::string>());
    else if (s.is_number_integer()) out.push_back(std::to_string(s.get<int64_t>()));
    else return TypeError(Idx(Path(key), i), "a string", s);
  }
  return Status::Ok();
}

Status ObjectReader::Finish() const {
  if (!obj_.is_object()) return TypeError(path_.empty() ? "document" : path_, "an object", obj_);
  for (const auto& [k, v] : obj_.items()) {
    if (std::find(known_.begin(), known_.end(), k) == known_.end()) {
      return InvalidArgument(Path(k.c_str()) + ": unknown field");
    }
  }
  return Status::Ok();
}

namespace {
// A quantity given as a YAML/JSON number or a Kubernetes string, in units of 1/per.
StatusOr<int64_t> JsonScaled(const Json& v, const std::string& path, int64_t per,
                             StatusOr<int64_t> (*parse)(const std::string&)) {
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) return InvalidArgument(path + ": must not be negative, got " + std::to_string(x));
    if (x > INT64_MAX / per) return InvalidArgument(path + ": too large");
    return x * per;
  }
  std::string text;
  if (v.is_number_float()) {
    std::ostringstream ss;  // 15 digits: 4.096575 stays 4.096575 (the default 6 made 4.09658)
    ss << std::setprecision(15) << v.get<double>();
    text = ss.str();
  } else if (v.is_string()) {
    text = v.get<std::string>();
  } else {
    return TypeError(path, "a quantity such as 4 or \"500m\"", v);
  }
  auto r = parse(text);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}
}  // namespace

StatusOr<int64_t> JsonMilli(const Json& v, const std::string& path) {
  return JsonScaled(v, path, 1000, ParseMilliQuantity);
}

StatusOr<int64_t> JsonBytes(const Json& v, const std::string& path) {
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) return InvalidArgument(path + ": must not be negative, got " + std::to_string(x));
    return x;
  }
  if (!v.is_string()) return TypeError(path, "a quantity such as \"64Gi\"", v);
  auto r = ParseByteQuantity(v.get<std::string>());
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

// ---- resources ----

namespace {
constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kMigPrefix[] = "nvidia.com/mig-";
constexpr char kGpuMilli[] = "tessera.io/gpu-milli";
constexpr char kGpuMemory[] = "tessera.io/gpu-memory";
}  // namespace

// More devices than any node has by far; beyond it a count would wrap in 32 bits.
constexpr int64_t kMaxDevicesPerTask = 4096;
Status TooManyDevices(const std::string& path, int64_t count) {
  return InvalidArgument(path + ": " + std::to_string(count) + " is too large (at most " +
                         std::to_string(kMaxDevicesPerTask) + " per task)");
}

Status ReadTaskResources(const Json& resources, const std::string& path, TaskRequest& out) {
  if (!resources.is_object()) return TypeError(path, "a map of resource quantities", resources);
  int64_t gpu_milli_total = 0;
  for (const auto& [name, v] : resources.items()) {
    std::string p = path + "." + name;
    if (name == "cpu") {
      auto r = JsonMilli(v, p);
      if (!r.ok()) return r.status();
      out.cpu_milli = *r;
    } else if (name == "memory") {
      auto r = JsonBytes(v, p);
      if (!r.ok()) return r.status();
      out.memory_bytes = *r;
    } else if (name == kGpu) {
      auto r = JsonMilli(v, p);
      if (!r.ok()) return r.status();
      if (*r % 1000 != 0)
        return InvalidArgument(p + ": whole GPUs only; use " + kGpuMilli + " for a fraction");
      if (*r == 0) continue;
      if (out.gpu.kind != GpuRequestKind::kNone)
        return InvalidArgument(p + ": a task asks for one kind of GPU (whole, fraction or MIG)");
      if (*r / 1000 > kMaxDevicesPerTask) return TooManyDevices(p, *r / 1000);
      out.gpu.kind = GpuRequestKind::kWhole;
      out.gpu.count = static_cast<int32_t>(*r / 1000);
    } else if (name.rfind(kMigPrefix, 0) == 0) {
      auto r = JsonMilli(v, p);
      if (!r.ok()) return r.status();
      if (*r % 1000 != 0 || *r == 0) return InvalidArgument(p + ": a whole number of instances >= 1");
      if (out.gpu.kind != GpuRequestKind::kNone)
        return InvalidArgument(p + ": a task asks for one kind of GPU (whole, fraction or MIG)");
      if (*r / 1000 > kMaxDevicesPerTask) return TooManyDevices(p, *r / 1000);
      out.gpu.kind = GpuRequestKind::kMig;
      out.gpu.count = static_cast<int32_t>(*r / 1000);
      out.gpu.mig_profile = name.substr(sizeof(kMigPrefix) - 1);
      if (out.gpu.mig_profile.empty()) return InvalidArgument(p + ": missing MIG profile name");
      // NVIDIA's profile names: <compute slices, 1-7>g.<memory>gb, with suffixes as "+me",
      // "-me", "+gfx", "+me.all". (Which ones a model has is the node's business: a newer GPU
      // may have more.)
      static const std::regex kProfile(R"([1-7]g\.[1-9][0-9]*gb([+-][a-z][a-z0-9.]*)*)");
      if (!std::regex_match(out.gpu.mig_profile, kProfile))
        return InvalidArgument(p + ": \"" + out.gpu.mig_profile +
                               "\" is not a MIG profile (<1-7>g.<memory>gb, e.g. 1g.10gb, 3g.40gb)");
    } else if (name == kGpuMilli) {
      // An integer, quoted or not (as every other quantity may be).
      int64_t milli = 0;
      if (v.is_number_integer()) {
        milli = v.get<int64_t>();
      } else if (v.is_string()) {
        const std::string t = v.get<std::string>();
        if (!t.empty() && t.size() <= 3 && t.find_first_not_of("0123456789") == std::string::npos)
          milli = std::stoll(t);
      }
      if (milli < 1 || milli > 999)
        return InvalidArgument(p + ": thousandths of one GPU, an integer 1..999, got " + v.dump() +
                               " (use nvidia.com/gpu for whole GPUs)");
      gpu_milli_total = milli;
    } else if (name == kGpuMemory) {
      auto r = JsonBytes(v, p);
      if (!r.ok()) return r.status();
      out.gpu.memory_bytes = *r;
    } else {
      return InvalidArgument(p + ": unknown resource (known: cpu, memory, nvidia.com/gpu, "
                                 "nvidia.com/mig-<profile>, tessera.io/gpu-milli, tessera.io/gpu-memory)");
    }
  }
  if (gpu_milli_total > 0) {
    if (out.gpu.kind != GpuRequestKind::kNone)
      return InvalidArgument(path + ": a task asks for one kind of GPU (whole, fraction or MIG)");
    out.gpu.kind = GpuRequestKind::kFraction;
    out.gpu.count = 1;
    out.gpu.milli = static_cast<int32_t>(gpu_milli_total);
  } else if (out.gpu.memory_bytes > 0 && out.gpu.kind != GpuRequestKind::kWhole) {
    return InvalidArgument(path + "." + kGpuMemory + ": needs " + kGpuMilli + " (a fraction) or " + kGpu);
  }
  return Status::Ok();
}

Json TaskResourcesToJson(const TaskRequest& r) {
  Json j = Json::object();
  j["cpu"] = FormatMilli(r.cpu_milli);
  j["memory"] = FormatBytes(r.memory_bytes);
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone: break;
    case GpuRequestKind::kWhole: j[kGpu] = r.gpu.count; break;
    case GpuRequestKind::kFraction: j[kGpuMilli] = r.gpu.milli; break;
    case GpuRequestKind::kMig: j[std::string(kMigPrefix) + r.gpu.mig_profile] = r.gpu.count; break;
  }
  if (r.gpu.memory_bytes > 0) j[kGpuMemory] = FormatBytes(r.gpu.memory_bytes);
  return j;
}

Status ReadResourceVector(const Json& v, const std::string& path, ResourceVector& out) {
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.Milli("cpu", out.cpu_milli));
  TESSERA_RETURN_IF_ERROR(r.Bytes("memory", out.memory_bytes));
  TESSERA_RETURN_IF_ERROR(r.Milli(kGpu, out.gpu_milli));
  return r.Finish();
}

Json ResourceVectorToJson(const ResourceVector& r) {
  Json j = Json::object();
  j["cpu"] = FormatMilli(r.cpu_milli);
  j["memory"] = FormatBytes(r.memory_bytes);
  j[kGpu] = FormatMilli(r.gpu_milli);
  return j;
}

// ---- nodes ----

StatusOr<TaintEffect> ParseTaintEffect(const std::string& s, const std::string& path) {
  if (s == "NoSchedule") return TaintEffect::kNoSchedule;
  if (s == "PreferNoSchedule") return TaintEffect::kPreferNoSchedule;
  if (s == "NoExecute") return TaintEffect::kNoExecute;
  return InvalidArgument(path + ": unknown effect \"" + s +
                         "\" (NoSchedule, PreferNoSchedule or NoExecute)");
}

namespace {

const char* EffectName(TaintEffect e) {
  switch (e) {
    case TaintEffect::kNoSchedule: return "NoSchedule";
    case TaintEffect::kPreferNoSchedule: return "PreferNoSchedule";
    case TaintEffect::kNoExecute: return "NoExecute";
  }
  return "NoSchedule";
}

template <typename T, typename F>
Status ReadList(const Json* v, const std::string& path, std::vector<T>& out, F read_one) {
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return TypeError(path, "a list", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    auto item = read_one((*v)[i], Idx(path, i));
    if (!item.ok()) return item.status();
    out.push_back(std::move(*item));
  }
  return Status::Ok();
}

StatusOr<Device> DeviceFromJson(const Json& v, const std::string& path) {
  Device d;
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.Int32("index", d.index, true));
  TESSERA_RETURN_IF_ERROR(r.String("uuid", d.uuid));
  TESSERA_RETURN_IF_ERROR(r.String("model", d.model, true));
  TESSERA_RETURN_IF_ERROR(r.Bytes("memory", d.memory_bytes));
  TESSERA_RETURN_IF_ERROR(r.String("domain", d.domain));
  TESSERA_RETURN_IF_ERROR(r.Bool("healthy", d.healthy));
  TESSERA_RETURN_IF_ERROR(r.Bool("virtual", d.is_virtual));
  TESSERA_RETURN_IF_ERROR(r.Bool("shareable", d.shareable));
  TESSERA_RETURN_IF_ERROR(r.Int32("utilPercent", d.util_percent));
  TESSERA_RETURN_IF_ERROR(r.Bytes("memoryUsed", d.memory_used_bytes));
  TESSERA_RETURN_IF_ERROR(r.Int("powerMilliwatts", d.power_milliwatts));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("mig"), r.Path("mig"), d.mig,
                                   [&](const Json& m, const std::string& p) -> StatusOr<MigInstance> {
                                     MigInstance mi;
                                     ObjectReader mr(m, p);
                                     TESSERA_RETURN_IF_ERROR(mr.String("profile", mi.profile, true));
                                     TESSERA_RETURN_IF_ERROR(mr.Int32("start", mi.start_slice));
                                     TESSERA_RETURN_IF_ERROR(mr.String("uuid", mi.uuid));
                                     TESSERA_RETURN_IF_ERROR(mr.Finish());
                                     if (FindMigProfile(d.model, mi.profile) == nullptr)
                                       return InvalidArgument(p + ".profile: \"" + mi.profile +
                                                              "\" is not a MIG profile of " + d.model);
                                     return mi;
                                   }));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (d.memory_bytes == 0) {
    // Memory from the model name where it says it ("A100-80GB").
    auto pos = d.model.rfind('-');
    if (pos != std::string::npos && d.model.size() > pos + 3 &&
        d.model.compare(d.model.size() - 2, 2, "GB") == 0) {
      auto gb = ParseByteQuantity(d.model.substr(pos + 1, d.model.size() - pos - 3) + "Gi");
      if (gb.ok()) d.memory_bytes = *gb;
    }
  }
  if (!d.mig.empty()) {
    int32_t slices = 0;
    for (const auto& mi : d.mig) slices += FindMigProfile(d.model, mi.profile)->compute_slices;
    if (slices > 7) return InvalidArgument(path + ".mig: layout uses " + std::to_string(slices) + " of 7 compute slices");
  }
  return d;
}

Json DeviceToJson(const Device& d) {
  Json j = Json::object();
  j["index"] = d.index;
  if (!d.uuid.empty()) j["uuid"] = d.uuid;
  j["model"] = d.model;
  j["memory"] = FormatBytes(d.memory_bytes);
  if (!d.domain.empty()) j["domain"] = d.domain;
  if (!d.healthy) j["healthy"] = false;
  if (d.is_virtual) j["virtual"] = true;
  if (!d.shareable) j["shareable"] = false;
  if (!d.mig.empty()) {
    Json m = Json::array();
    for (const auto& mi : d.mig) {
      Json x = {{"profile", mi.profile}, {"start", mi.start_slice}};
      if (!mi.uuid.empty()) x["uuid"] = mi.uuid;
      m.push_back(x);
    }
    j["mig"] = m;
  }
  if (d.util_percent) j["utilPercent"] = d.util_percent;
  if (d.memory_used_bytes) j["memoryUsed"] = d.memory_used_bytes;
  if (d.power_milliwatts) j["powerMilliwatts"] = d.power_milliwatts;
  return j;
}

}  // namespace

StatusOr<Node> NodeFromJson(const Json& v, const std::string& path) {
  Node n;
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.String("name", n.name, true));
  TESSERA_RETURN_IF_ERROR(r.String("pool", n.pool));
  TESSERA_RETURN_IF_ERROR(r.StringMap("labels", n.labels));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("taints"), r.Path("taints"), n.taints,
                                   [](const Json& t, const std::string& p) -> StatusOr<Taint> {
                                     Taint taint;
                                     std::string effect = "NoSchedule";
                                     ObjectReader tr(t, p);
                                     TESSERA_RETURN_IF_ERROR(tr.String("key", taint.key, true));
                                     TESSERA_RETURN_IF_ERROR(tr.String("value", taint.value));
                                     TESSERA_RETURN_IF_ERROR(tr.String("effect", effect));
                                     TESSERA_RETURN_IF_ERROR(tr.Finish());
                                     auto e = ParseTaintEffect(effect, p + ".effect");
                                     if (!e.ok()) return e.status();
                                     taint.effect = *e;
                                     return taint;
                                   }));
  TESSERA_RETURN_IF_ERROR(r.Milli("cpu", n.cpu_milli, true));
  TESSERA_RETURN_IF_ERROR(r.Bytes("memory", n.memory_bytes, true));
  if (const Json* c = r.Get("costPerGpuHour")) {  // "2.5" per GPU-hour -> 2500000 micros
    auto micros = JsonScaled(*c, r.Path("costPerGpuHour"), 1000000, ParseMicroQuantity);
    if (!micros.ok()) return micros.status();
    n.cost_micros_per_gpu_hour = *micros;
  }
  TESSERA_RETURN_IF_ERROR(r.Bool("spot", n.spot));
  TESSERA_RETURN_IF_ERROR(r.Bool("ready", n.ready));
  TESSERA_RETURN_IF_ERROR(r.Bool("unschedulable", n.unschedulable));
  TESSERA_RETURN_IF_ERROR(r.Int32("maxTasks", n.max_tasks));
  if (n.max_tasks < 0) return InvalidArgument(r.Path("maxTasks") + ": must be >= 0 (0: no limit), got " + std::to_string(n.max_tasks));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("devices"), r.Path("devices"), n.devices, DeviceFromJson));
  // Shorthand: `gpus: {model: A100-80GB, count: 8, memory: 80Gi, domain: nvl0, virtual: true}`.
  if (const Json* g = r.Get("gpus")) {
    if (!n.devices.empty()) return InvalidArgument(r.Path("gpus") + ": use either gpus or devices");
    ObjectReader gr(*g, r.Path("gpus"));
    Device proto;
    int32_t count = 0;
    TESSERA_RETURN_IF_ERROR(gr.String("model", proto.model, true));
    TESSERA_RETURN_IF_ERROR(gr.Int32("count", count, true));
    TESSERA_RETURN_IF_ERROR(gr.Bytes("memory", proto.memory_bytes));
    TESSERA_RETURN_IF_ERROR(gr.String("domain", proto.domain));
    TESSERA_RETURN_IF_ERROR(gr.Bool("virtual", proto.is_virtual));
    TESSERA_RETURN_IF_ERROR(gr.Bool("shareable", proto.shareable));
    std::vector<std::string> mig;
    TESSERA_RETURN_IF_ERROR(gr.StringList("mig", mig));
    TESSERA_RETURN_IF_ERROR(gr.Finish());
    Json dj = DeviceToJson(proto);
    dj.erase("index");
    for (int32_t i = 0; i < count; ++i) {
      Json one = dj;
      one["index"] = i;
      if (!mig.empty()) {
        Json layout = Json::array();
        int32_t start = 0;
        for (const auto& p : mig) {
          layout.push_back({{"profile", p}, {"start", start}});
          const MigProfile* mp = FindMigProfile(proto.model, p);
          start += mp ? mp->compute_slices : 0;
        }
        one["mig"] = layout;
      }
      auto d = DeviceFromJson(one, Idx(r.Path("gpus"), i));
      if (!d.ok()) return d.status();
      n.devices.push_back(std::move(*d));
    }
  }
  TESSERA_RETURN_IF_ERROR(r.Finish());
  for (size_t i = 0; i < n.devices.size(); ++i) {
    if (n.devices[i].index != static_cast<int32_t>(i))
      return InvalidArgument(Idx(path + ".devices", i) + ".index: devices must be numbered 0..n-1 in order");
  }
  return n;
}

Json NodeToJson(const Node& n) {
  Json j = Json::object();
  j["name"] = n.name;
  j["pool"] = n.pool;
  if (!n.labels.empty()) j["labels"] = n.labels;
  if (!n.taints.empty()) {
    Json t = Json::array();
    for (const auto& taint : n.taints)
      t.push_back({{"key", taint.key}, {"value", taint.value}, {"effect", EffectName(taint.effect)}});
    j["taints"] = t;
  }
  j["cpu"] = FormatMilli(n.cpu_milli);
  j["memory"] = FormatBytes(n.memory_bytes);
  if (n.cost_micros_per_gpu_hour) j["costPerGpuHour"] = FormatMicro(n.cost_micros_per_gpu_hour);
  if (n.spot) j["spot"] = true;
  if (!n.ready) j["ready"] = false;
  if (n.unschedulable) j["unschedulable"] = true;
  if (n.max_tasks) j["maxTasks"] = n.max_tasks;
  Json d = Json::array();
  for (const auto& dev : n.devices) d.push_back(DeviceToJson(dev));
  j["devices"] = d;
  return j;
}

// ---- jobs ----

namespace {

StatusOr<NodeSelectorTerm> TermFromJson(const Json& v, const std::string& path) {
  NodeSelectorTerm term;
  // Accept both a bare list of requirements and {matchExpressions: [...]}.
  const Json* list = &v;
  std::optional<ObjectReader> r;
  if (v.is_object()) {
    r.emplace(v, path);
    list = r->Get("matchExpressions");
    if (list == nullptr) return InvalidArgument(path + ".matchExpressions: required");
  }
  std::string lp = v.is_object() ? path + ".matchExpressions" : path;
  TESSERA_RETURN_IF_ERROR(ReadList(list, lp, term.match_expressions,
      [](const Json& e, const std::string& p) -> StatusOr<NodeSelectorRequirement> {
        NodeSelectorRequirement req;
        std::string op;
        ObjectReader er(e, p);
        TESSERA_RETURN_IF_ERROR(er.String("key", req.key, true));
        TESSERA_RETURN_IF_ERROR(er.String("operator", op, true));
        TESSERA_RETURN_IF_ERROR(er.StringList("values", req.values));
        TESSERA_RETURN_IF_ERROR(er.Finish());
        static const std::pair<const char*, NodeSelectorRequirement::Op> kOps[] = {
            {"In", NodeSelectorRequirement::Op::kIn}, {"NotIn", NodeSelectorRequirement::Op::kNotIn},
            {"Exists", NodeSelectorRequirement::Op::kExists},
            {"DoesNotExist", NodeSelectorRequirement::Op::kDoesNotExist},
            {"Gt", NodeSelectorRequirement::Op::kGt}, {"Lt", NodeSelectorRequirement::Op::kLt}};
        for (const auto& [name, value] : kOps)
          if (op == name) {
            req.op = value;
            return req;
          }
        return InvalidArgument(p + ".operator: unknown \"" + op + "\" (In, NotIn, Exists, DoesNotExist, Gt, Lt)");
      }));
  if (r) TESSERA_RETURN_IF_ERROR(r->Finish());
  return term;
}

const char* OpName(NodeSelectorRequirement::Op op) {
  switch (op) {
    case NodeSelectorRequirement::Op::kIn: return "In";
    case NodeSelectorRequirement::Op::kNotIn: return "NotIn";
    case NodeSelectorRequirement::Op::kExists: return "Exists";
    case NodeSelectorRequirement::Op::kDoesNotExist: return "DoesNotExist";
    case NodeSelectorRequirement::Op::kGt: return "Gt";
    case NodeSelectorRequirement::Op::kLt: return "Lt";
  }
  return "In";
}

Json TermToJson(const NodeSelectorTerm& t) {
  Json list = Json::array();
  for (const auto& e : t.match_expressions) {
    Json x = {{"key", e.key}, {"operator", OpName(e.op)}};
    if (!e.values.empty()) x["values"] = e.values;
    list.push_back(x);
  }
  return {{"matchExpressions", list}};
}

StatusOr<TaskAllocation> AllocationFromJson(const Json& v, const std::string& path, int32_t& task) {
  TaskAllocation a;
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.Int32("task", task, true));
  TESSERA_RETURN_IF_ERROR(r.String("node", a.node, true));
  TESSERA_RETURN_IF_ERROR(r.Milli("cpu", a.cpu_milli));
  TESSERA_RETURN_IF_ERROR(r.Bytes("memory", a.memory_bytes));
  TESSERA_RETURN_IF_ERROR(r.Bool("idle", a.idle));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("devices"), r.Path("devices"), a.devices,
      [](const Json& d, const std::string& p) -> StatusOr<DeviceAssignment> {
        DeviceAssignment da;
        ObjectReader dr(d, p);
        TESSERA_RETURN_IF_ERROR(dr.Int32("device", da.device, true));
        TESSERA_RETURN_IF_ERROR(dr.Int32("milli", da.milli));
        TESSERA_RETURN_IF_ERROR(dr.Bytes("memory", da.memory_bytes));
        TESSERA_RETURN_IF_ERROR(dr.Int32("migInstance", da.mig_instance, false, -1));
        TESSERA_RETURN_IF_ERROR(dr.Finish());
        return da;
      }));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  return a;
}

Json AllocationToJson(const TaskAllocation& a) {
  Json j = Json::object();
  j["node"] = a.node;
  j["cpu"] = FormatMilli(a.cpu_milli);
  j["memory"] = FormatBytes(a.memory_bytes);
  Json d = Json::array();
  for (const auto& da : a.devices) {
    Json x = {{"device", da.device}, {"milli", da.milli}, {"memory", FormatBytes(da.memory_bytes)}};
    if (da.mig_instance >= 0) x["migInstance"] = da.mig_instance;
    d.push_back(x);
  }
  j["devices"] = d;
  if (a.idle) j["idle"] = true;
  return j;
}

// A job's or a task group's nodeSelector, tolerations and affinity.
Status ReadPlacement(ObjectReader& r, Placement& out) {
  TESSERA_RETURN_IF_ERROR(r.StringMap("nodeSelector", out.node_selector));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("tolerations"), r.Path("tolerations"), out.tolerations,
      [](const Json& t, const std::string& p) -> StatusOr<Toleration> {
        Toleration tol;
        std::string op = "Equal", effect;
        ObjectReader tr(t, p);
        TESSERA_RETURN_IF_ERROR(tr.String("key", tol.key));
        TESSERA_RETURN_IF_ERROR(tr.String("operator", op));
        TESSERA_RETURN_IF_ERROR(tr.String("value", tol.value));
        TESSERA_RETURN_IF_ERROR(tr.String("effect", effect));
        TESSERA_RETURN_IF_ERROR(tr.Finish());
        if (op == "Exists") tol.op = Toleration::Op::kExists;
        else if (op != "Equal") return InvalidArgument(p + ".operator: unknown \"" + op + "\" (Equal, Exists)");
        if (!effect.empty()) {
          auto e = ParseTaintEffect(effect, p + ".effect");
          if (!e.ok()) return e.status();
          tol.effect = *e;
        }
        return tol;
      }));
  if (const Json* aff = r.Get("affinity")) {
    ObjectReader ar(*aff, r.Path("affinity"));
    TESSERA_RETURN_IF_ERROR(ReadList(ar.Get("required"), ar.Path("required"), out.affinity.required, TermFromJson));
    TESSERA_RETURN_IF_ERROR(ReadList(ar.Get("preferred"), ar.Path("preferred"), out.affinity.preferred,
        [](const Json& pt, const std::string& p) -> StatusOr<PreferredTerm> {
          PreferredTerm out;
          ObjectReader pr(pt, p);
          TESSERA_RETURN_IF_ERROR(pr.Int32("weight", out.weight, true, 1));
          const Json* term = pr.Get("preference");
          if (term == nullptr) return InvalidArgument(p + ".preference: required");
          auto t = TermFromJson(*term, p + ".preference");
          if (!t.ok()) return t.status();
          out.term = std::move(*t);
          TESSERA_RETURN_IF_ERROR(pr.Finish());
          return out;
        }));
    TESSERA_RETURN_IF_ERROR(ar.Finish());
  }
  return Status::Ok();
}

// A task group's topologySpreadConstraints, as Kubernetes validates them (without the
// labelSelector: a constraint counts its own group's tasks).
Status ReadSpread(ObjectReader& gr, std::vector<TopologySpreadConstraint>& out) {
  TESSERA_RETURN_IF_ERROR(ReadList(gr.Get("topologySpreadConstraints"), gr.Path("topologySpreadConstraints"), out,
                                   SpreadConstraintFromJson));
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (out[k].topology_key == out[i].topology_key && out[k].schedule_anyway == out[i].schedule_anyway)
        return InvalidArgument(Idx(gr.Path("topologySpreadConstraints"), i) + ": duplicate of [" + std::to_string(k) +
                               "]: one constraint per {topologyKey, whenUnsatisfiable}");
  return Status::Ok();
}

Json SpreadToJson(const std::vector<TopologySpreadConstraint>& spread) {
  Json out = Json::array();
  for (const auto& c : spread) {
    Json x = {{"maxSkew", c.max_skew}, {"topologyKey", c.topology_key},
              {"whenUnsatisfiable", c.schedule_anyway ? "ScheduleAnyway" : "DoNotSchedule"}};
    if (c.min_domains > 0) x["minDomains"] = c.min_domains;
    if (!c.honor_node_affinity) x["nodeAffinityPolicy"] = "Ignore";
    if (c.honor_taints) x["nodeTaintsPolicy"] = "Honor";
    out.push_back(x);
  }
  return out;
}

Json PlacementToJson(const Placement& p) {
  Json o = Json::object();
  if (!p.node_selector.empty()) o["nodeSelector"] = p.node_selector;
  if (!p.tolerations.empty()) {
    Json t = Json::array();
    for (const auto& tol : p.tolerations) {
      Json x = Json::object();
      if (!tol.key.empty()) x["key"] = tol.key;
      x["operator"] = tol.op == Toleration::Op::kExists ? "Exists" : "Equal";
      if (!tol.value.empty()) x["value"] = tol.value;
      if (tol.effect) x["effect"] = EffectName(*tol.effect);
      t.push_back(x);
    }
    o["tolerations"] = t;
  }
  if (!p.affinity.required.empty() || !p.affinity.preferred.empty()) {
    Json a = Json::object();
    if (!p.affinity.required.empty()) {
      a["required"] = Json::array();
      for (const auto& t : p.affinity.required) a["required"].push_back(TermToJson(t));
    }
    if (!p.affinity.preferred.empty()) {
      a["preferred"] = Json::array();
      for (const auto& pt : p.affinity.preferred)
        a["preferred"].push_back({{"weight", pt.weight}, {"preference", TermToJson(pt.term)}});
    }
    o["affinity"] = a;
  }
  return o;
}

}  // namespace

StatusOr<TopologySpreadConstraint> SpreadConstraintFromJson(const Json& v, const std::string& p) {
  TopologySpreadConstraint c;
  ObjectReader r(v, p);
  std::string when, affinity = "Honor", taints = "Ignore";
  TESSERA_RETURN_IF_ERROR(r.Int32("maxSkew", c.max_skew, true, 1));
  TESSERA_RETURN_IF_ERROR(r.String("topologyKey", c.topology_key, true));
  TESSERA_RETURN_IF_ERROR(r.String("whenUnsatisfiable", when, true));
  if (r.Has("minDomains")) TESSERA_RETURN_IF_ERROR(r.Int32("minDomains", c.min_domains, false, 1));
  TESSERA_RETURN_IF_ERROR(r.String("nodeAffinityPolicy", affinity));
  TESSERA_RETURN_IF_ERROR(r.String("nodeTaintsPolicy", taints));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (std::string why = LabelKeyProblem(c.topology_key); !why.empty())
    return InvalidArgument(p + ".topologyKey: \"" + c.topology_key + "\" is not a label key: " + why);
  if (when != "DoNotSchedule" && when != "ScheduleAnyway")
    return InvalidArgument(p + ".whenUnsatisfiable: unknown \"" + when + "\" (DoNotSchedule, ScheduleAnyway)");
  c.schedule_anyway = when == "ScheduleAnyway";
  if (c.min_domains > 0 && c.schedule_anyway)
    return InvalidArgument(p + ".minDomains: can only be used with whenUnsatisfiable: DoNotSchedule");
  for (auto [name, value, out] : {std::tuple{"nodeAffinityPolicy", &affinity, &c.honor_node_affinity},
                                  std::tuple{"nodeTaintsPolicy", &taints, &c.honor_taints}}) {
    if (*value != "Honor" && *value != "Ignore")
      return InvalidArgument(p + "." + name + ": unknown \"" + *value + "\" (Honor, Ignore)");
    *out = *value == "Honor";
  }
  return c;
}

StatusOr<Job> JobFromJson(const Json& v, const std::string& path) {
  Job j;
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.String("id", j.id, true));
  TESSERA_RETURN_IF_ERROR(r.String("queue", j.queue));
  TESSERA_RETURN_IF_ERROR(r.String("priorityClass", j.priority_class));
  int64_t prio = 0;
  TESSERA_RETURN_IF_ERROR(r.Int("priority", prio, false, INT32_MIN));
  j.priority = static_cast<int32_t>(prio);
  TESSERA_RETURN_IF_ERROR(r.Int("submitTime", j.submit_time));
  TESSERA_RETURN_IF_ERROR(r.Int("submitSeq", j.submit_seq));
  TESSERA_RETURN_IF_ERROR(r.Int32("minAvailable", j.min_available));
  TESSERA_RETURN_IF_ERROR(r.Bool("preemptible", j.preemptible));
  TESSERA_RETURN_IF_ERROR(r.Bool("terminating", j.terminating));
  TESSERA_RETURN_IF_ERROR(r.Int("gracePeriodSeconds", j.grace_period_seconds));
  TESSERA_RETURN_IF_ERROR(r.Bool("oneTaskPerNode", j.one_task_per_node));
  TESSERA_RETURN_IF_ERROR(r.Bool("exclusive", j.exclusive));
  TESSERA_RETURN_IF_ERROR(r.Bool("service", j.service));
  if (r.Has("runtimeEstimateSeconds")) {
    int64_t est = 0;
    TESSERA_RETURN_IF_ERROR(r.Int("runtimeEstimateSeconds", est));
    j.runtime_estimate_seconds = est;
  }
  TESSERA_RETURN_IF_ERROR(r.Int("startTime", j.start_time, false, -1));
  TESSERA_RETURN_IF_ERROR(r.Int("attainedGpuMilliSeconds", j.attained_gpu_milli_seconds));
  TESSERA_RETURN_IF_ERROR(ReadPlacement(r, j.placement));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("tasks"), r.Path("tasks"), j.groups,
      [](const Json& g, const std::string& p) -> StatusOr<TaskGroup> {
        TaskGroup group;
        ObjectReader gr(g, p);
        TESSERA_RETURN_IF_ERROR(gr.String("name", group.name));
        TESSERA_RETURN_IF_ERROR(gr.Int32("replicas", group.replicas, false, 1));
        if (const Json* res = gr.Get("resources"))
          TESSERA_RETURN_IF_ERROR(ReadTaskResources(*res, gr.Path("resources"), group.request));
        TESSERA_RETURN_IF_ERROR(gr.StringList("gpuModels", group.request.gpu.models));
        // Any of the three given: the group's own placement, none of the job's.
        if (gr.Has("nodeSelector") || gr.Has("tolerations") || gr.Has("affinity"))
          TESSERA_RETURN_IF_ERROR(ReadPlacement(gr, group.placement.emplace()));
        TESSERA_RETURN_IF_ERROR(ReadSpread(gr, group.spread));
        TESSERA_RETURN_IF_ERROR(gr.Finish());
        return group;
      }));
  if (j.groups.empty()) return InvalidArgument(r.Path("tasks") + ": a job needs at least one task group");
  j.allocations.assign(j.TaskCount(), std::nullopt);
  if (const Json* running = r.Get("running")) {
    if (!running->is_array()) return TypeError(r.Path("running"), "a list", *running);
    for (size_t i = 0; i < running->size(); ++i) {
      int32_t task = -1;
      auto a = AllocationFromJson((*running)[i], Idx(r.Path("running"), i), task);
      if (!a.ok()) return a.status();
      if (task < 0 || task >= j.TaskCount())
        return InvalidArgument(Idx(r.Path("running"), i) + ".task: no task " + std::to_string(task));
      const TaskRequest& req = j.GroupOfTask(task).request;
      if (a->cpu_milli == 0 && !a->idle) a->cpu_milli = req.cpu_milli;
      if (a->memory_bytes == 0 && !a->idle) a->memory_bytes = req.memory_bytes;
      if (j.one_task_per_node)
        for (int32_t other = 0; other < j.TaskCount(); ++other)
          if (j.allocations[other] && j.allocations[other]->node == a->node)
            return InvalidArgument(Idx(r.Path("running"), i) + ".node: task " +
                                   std::to_string(other) + " already runs on \"" + a->node +
                                   "\" and the job has oneTaskPerNode");
      j.allocations[task] = std::move(*a);
    }
    if (j.start_time < 0) j.start_time = 0;
  }
  if (j.min_available > j.TaskCount())
    return InvalidArgument(r.Path("minAvailable") + ": " + std::to_string(j.min_available) +
                           " is more than the job's " + std::to_string(j.TaskCount()) + " tasks");
  TESSERA_RETURN_IF_ERROR(r.Finish());
  return j;
}

Json JobToJson(const Job& j) {
  Json o = Json::object();
  o["id"] = j.id;
  o["queue"] = j.queue;
  if (!j.priority_class.empty()) o["priorityClass"] = j.priority_class;
  o["priority"] = j.priority;
  o["submitTime"] = j.submit_time;
  if (j.submit_seq) o["submitSeq"] = j.submit_seq;
  if (j.min_available) o["minAvailable"] = j.min_available;
  if (!j.preemptible) o["preemptible"] = false;
  if (j.terminating) o["terminating"] = true;
  o["gracePeriodSeconds"] = j.grace_period_seconds;
  if (j.one_task_per_node) o["oneTaskPerNode"] = true;
  if (j.exclusive) o["exclusive"] = true;
  if (j.service) o["service"] = true;
  if (j.runtime_estimate_seconds) o["runtimeEstimateSeconds"] = *j.runtime_estimate_seconds;
  o.update(PlacementToJson(j.placement));
  Json tasks = Json::array();
  for (const auto& g : j.groups) {
    Json x = Json::object();
    if (!g.name.empty()) x["name"] = g.name;
    x["replicas"] = g.replicas;
    x["resources"] = TaskResourcesToJson(g.request);
    if (!g.request.gpu.models.empty()) x["gpuModels"] = g.request.gpu.models;
    if (g.placement) {
      x.update(PlacementToJson(*g.placement));
      // An empty one still replaces the job's: said by an empty list.
      if (g.placement->empty()) x["tolerations"] = Json::array();
    }
    if (!g.spread.empty()) x["topologySpreadConstraints"] = SpreadToJson(g.spread);
    tasks.push_back(x);
  }
  o["tasks"] = tasks;
  if (j.RunningTasks() > 0) {
    Json running = Json::array();
    for (size_t t = 0; t < j.allocations.size(); ++t) {
      if (!j.allocations[t]) continue;
      Json x = AllocationToJson(*j.allocations[t]);
      x["task"] = static_cast<int32_t>(t);
      running.push_back(x);
    }
    o["running"] = running;
    o["startTime"] = j.start_time;
  }
  if (j.attained_gpu_milli_seconds) o["attainedGpuMilliSeconds"] = j.attained_gpu_milli_seconds;
  return o;
}

// ---- queues, priority classes ----

StatusOr<Queue> QueueFromJson(const Json& v, const std::string& path) {
  Queue q;
  ObjectReader r(v, path);
  TESSERA_RETURN_IF_ERROR(r.String("name", q.name, true));
  TESSERA_RETURN_IF_ERROR(r.String("parent", q.parent));
  TESSERA_RETURN_IF_ERROR(r.Int32("weight", q.weight, false, 1));
  if (const Json* g = r.Get("guarantee")) TESSERA_RETURN_IF_ERROR(ReadResourceVector(*g, r.Path("guarantee"), q.guarantee));
  if (const Json* l = r.Get("limit")) {
    q.limit.emplace();
    TESSERA_RETURN_IF_ERROR(ReadResourceVector(*l, r.Path("limit"), *q.limit));
  }
  TESSERA_RETURN_IF_ERROR(r.Bool("reclaimable", q.reclaimable));
  TESSERA_RETURN_IF_ERROR(r.Bool("borrowing", q.borrowing));
  TESSERA_RETURN_IF_ERROR(r.Bool("open", q.open));
  TESSERA_RETURN_IF_ERROR(r.StringList("priorityClasses", q.priority_classes));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  return q;
}

Json QueueToJson(const Queue& q) {
  Json j = Json::object();
  j["name"] = q.name;
  if (!q.parent.empty()) j["parent"] = q.parent;
  j["weight"] = q.weight;
  j["guarantee"] = ResourceVectorToJson(q.guarantee);
  if (q.limit) j["limit"] = ResourceVectorToJson(*q.limit);
  j["reclaimable"] = q.reclaimable;
  j["borrowing"] = q.borrowing;
  if (!q.open) j["open"] = false;
  if (!q.priority_classes.empty()) j["priorityClasses"] = q.priority_classes;
  return j;
}

StatusOr<PriorityClass> PriorityClassFromJson(const Json& v, const std::string& path) {
  PriorityClass pc;
  ObjectReader r(v, path);
  std::string policy = "PreemptLowerPriority";
  TESSERA_RETURN_IF_ERROR(r.String("name", pc.name, true));
  int64_t value = 0;
  TESSERA_RETURN_IF_ERROR(r.Int("value", value, true, -2000000000));
  // Kubernetes' range (system classes go to 2e9); a bigger number must not wrap to 32 bits.
  if (value > 2000000000)
    return InvalidArgument(r.Path("value") + ": must be <= 2000000000, got " +
                           std::to_string(value));
  pc.value = static_cast<int32_t>(value);
  TESSERA_RETURN_IF_ERROR(r.String("preemptionPolicy", policy));
  TESSERA_RETURN_IF_ERROR(r.Bool("globalDefault", pc.global_default));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (policy == "Never") pc.preempt_lower = false;
  else if (policy != "PreemptLowerPriority")
    return InvalidArgument(r.Path("preemptionPolicy") + ": unknown \"" + policy + "\" (PreemptLowerPriority, Never)");
  return pc;
}

// ---- snapshot ----

StatusOr<Snapshot> SnapshotFromJson(const Json& doc) {
  Snapshot s;
  ObjectReader r(doc, "");
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("nodes"), "nodes", s.nodes, NodeFromJson));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("queues"), "queues", s.queues, QueueFromJson));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("priorityClasses"), "priorityClasses", s.priority_classes, PriorityClassFromJson));
  TESSERA_RETURN_IF_ERROR(ReadList(r.Get("jobs"), "jobs", s.jobs, JobFromJson));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  // Resolve priority classes into values; a job's explicit priority wins if no class is named.
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    Job& j = s.jobs[i];
    if (j.priority_class.empty()) continue;
    auto it = std::find_if(s.priority_classes.begin(), s.priority_classes.end(),
                           [&](const PriorityClass& pc) { return pc.name == j.priority_class; });
    if (it == s.priority_classes.end())
      return InvalidArgument(Idx("jobs", i) + ".priorityClass: unknown priority class \"" + j.priority_class + "\"");
    j.priority = it->value;
  }
  s.Canonicalize();
  for (size_t i = 1; i < s.nodes.size(); ++i)
    if (s.nodes[i].name == s.nodes[i - 1].name) return InvalidArgument("nodes: duplicate name \"" + s.nodes[i].name + "\"");
  for (size_t i = 1; i < s.jobs.size(); ++i)
    if (s.jobs[i].id == s.jobs[i - 1].id) return InvalidArgument("jobs: duplicate id \"" + s.jobs[i].id + "\"");
  for (size_t i = 1; i < s.queues.size(); ++i)
    if (s.queues[i].name == s.queues[i - 1].name) return InvalidArgument("queues: duplicate name \"" + s.queues[i].name + "\"");
  for (size_t i = 1; i < s.priority_classes.size(); ++i)
    if (s.priority_classes[i].name == s.priority_classes[i - 1].name)
      return InvalidArgument("priorityClasses: duplicate name \"" + s.priority_classes[i].name + "\"");
  return s;
}

Json SnapshotToJson(const Snapshot& s) {
  Json j = Json::object();
  j["nodes"] = Json::array();
  for (const auto& n : s.nodes) j["nodes"].push_back(NodeToJson(n));
  j["queues"] = Json::array();
  for (const auto& q : s.queues) j["queues"].push_back(QueueToJson(q));
  j["priorityClasses"] = Json::array();
  for (const auto& pc : s.priority_classes)
    j["priorityClasses"].push_back({{"name", pc.name}, {"value", pc.value},
                                    {"preemptionPolicy", pc.preempt_lower ? "PreemptLowerPriority" : "Never"}});
  j["jobs"] = Json::array();
  for (const auto& job : s.jobs) j["jobs"].push_back(JobToJson(job));
  return j;
}

// ---- plan ----

Json PlanToJson(const Plan& plan) {
  Json j = Json::object();
  j["now"] = plan.now;
  j["bindings"] = Json::array();
  for (const auto& b : plan.bindings) {
    Json x = Json::object();
    x["job"] = b.job;
    x["task"] = b.task;
    const Json alloc = AllocationToJson(b.allocation);  // a named value: items() must not outlive it
    for (auto& [k, v] : alloc.items()) x[k] = v;
    j["bindings"].push_back(x);
  }
  j["evictions"] = Json::array();
  for (const auto& e : plan.evictions)
    j["evictions"].push_back({{"job", e.job}, {"task", e.task}, {"node", e.node}, {"reason", e.reason},
                              {"preemptor", e.preemptor}, {"message", e.message},
                              {"gracePeriodSeconds", e.grace_period_seconds}});
  j["reservations"] = Json::array();
  for (const auto& r : plan.reservations)
    j["reservations"].push_back({{"job", r.job}, {"nodes", r.nodes}, {"earliestStart", r.earliest_start}});
  j["decisions"] = Json::array();
  for (const auto& d : plan.decisions) {
    Json x = {{"job", d.job}, {"outcome", OutcomeName(d.outcome)}};
    if (d.reason != nullptr && !d.reason->code.empty()) {
      const PendingReason& r = *d.reason;
      Json reason = {{"code", r.code}, {"message", r.message}};
      if (!r.resource.empty()) reason["resource"] = r.resource;
      if (!r.rejected_nodes.empty()) reason["rejectedNodes"] = r.rejected_nodes;
      x["reason"] = reason;
    }
    j["decisions"].push_back(x);
  }
  return j;
}

StatusOr<Plan> PlanFromJson(const Json& doc) {
  // Plans are produced by PlanToJson; read back leniently-typed but strictly-keyed.
  Plan p;
  try {
    p.now = doc.value("now", int64_t{0});
    for (const auto& b : doc.value("bindings", Json::array())) {
      Binding bind;
      bind.job = b.at("job").get<std::string>();
      bind.task = b.at("task").get<int32_t>();
      Json a = b;
      a.erase("job");
      int32_t task = 0;
      auto alloc = AllocationFromJson(a, "binding", task);
      if (!alloc.ok()) return alloc.status();
      bind.allocation = *alloc;
      p.bindings.push_back(bind);
    }
    for (const auto& e : doc.value("evictions", Json::array()))
      p.evictions.push_back({e.at("job"), e.at("task"), e.at("node"), e.at("reason"), e.value("preemptor", ""),
                             e.value("message", ""), e.value("gracePeriodSeconds", int64_t{30})});
    for (const auto& r : doc.value("reservations", Json::array()))
      p.reservations.push_back({r.at("job"), r.at("nodes").get<std::vector<std::string>>(), r.value("earliestStart", int64_t{0})});
    for (const auto& d : doc.value("decisions", Json::array())) {
      JobDecision dec;
      dec.job = d.at("job");
      std::string o = d.at("outcome");
      for (Outcome x : {Outcome::kPlaced, Outcome::kUnschedulable, Outcome::kInfeasible, Outcome::kWaiting, Outcome::kError})
        if (o == OutcomeName(x)) dec.outcome = x;
      if (d.contains("reason")) {
        const Json& r = d["reason"];
        dec.reason = std::make_shared<const PendingReason>(
            PendingReason{r.value("code", ""), r.value("message", ""), r.value("resource", ""),
                          r.value("rejectedNodes", std::map<std::string, int32_t>{})});
      }
      p.decisions.push_back(dec);
    }
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("malformed plan: ") + e.what());
  }
  return p;
}

}  // namespace tessera
