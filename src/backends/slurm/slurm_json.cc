#include "backends/slurm/slurm_json.h"

#include <charconv>

#include <nlohmann/json.hpp>

namespace tessera::slurm {
namespace {

using nlohmann::json;

bool ParseInt(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Reads fields of one JSON object, naming the path of anything missing or mistyped.
class Fields {
 public:
  Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  Status Int(const char* key, int64_t& out, bool null_ok = true) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return InvalidArgument(path_ + "." + key + ": missing");
    if (it->is_null() && null_ok) return Status::Ok();
    if (it->is_number_integer()) {
      out = it->get<int64_t>();
      return Status::Ok();
    }
    if (it->is_number_unsigned()) {  // priority and friends can exceed int64 in theory
      out = static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX));
      return Status::Ok();
    }
    return InvalidArgument(path_ + "." + key + ": expected an integer, got " + it->dump());
  }
  Status OptInt(const char* key, std::optional<int64_t>& out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      out.reset();
      return Status::Ok();
    }
    int64_t v = 0;
    TESSERA_RETURN_IF_ERROR(Int(key, v));
    out = v;
    return Status::Ok();
  }
  // Absent or null reads as "" only when optional.
  Status Str(const char* key, std::string& out, bool required = true) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      if (required && it == obj_.end()) return InvalidArgument(path_ + "." + key + ": missing");
      out.clear();
      return Status::Ok();
    }
    if (!it->is_string()) {
      return InvalidArgument(path_ + "." + key + ": expected a string, got " + it->dump());
    }
    out = it->get<std::string>();
    return Status::Ok();
  }
  Status StrList(const char* key, std::vector<std::string>& out) const {
    out.clear();
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    if (!it->is_array()) return InvalidArgument(path_ + "." + key + ": expected a list");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        return InvalidArgument(path_ + "." + key + "[" + std::to_string(i) +
                               "]: expected a string");
      }
      out.push_back((*it)[i].get<std::string>());
    }
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string path_;
};

StatusOr<json> ParseDocument(const std::string& text, const char* what, const char* list_key) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument(std::string(what) + ": not a JSON object (" +
                           std::to_string(text.size()) + " bytes)");
  }
  if (auto e = doc.find("errors"); e != doc.end() && e->is_array() && !e->empty()) {
    return Unavailable(std::string(what) + ": Slurm reported errors: " + e->dump());
  }
  auto it = doc.find(list_key);
  if (it == doc.end() || !it->is_array()) {
    return InvalidArgument(std::string(what) + "." + list_key + ": missing or not a list");
  }
  return doc;
}

}  // namespace

StatusOr<std::vector<GresEntry>> ParseGres(const std::string& text) {
  std::vector<GresEntry> out;
  if (text.empty() || text == "(null)" || text == "N/A") return out;
  // Split on commas outside parentheses.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  items.push_back(cur);
  for (std::string item : items) {
    std::string shown = item;
    if (size_t p = item.find('('); p != std::string::npos) item.resize(p);
    if (item.empty()) continue;
    std::vector<std::string> parts = Split(item, ':');
    GresEntry e;
    e.name = parts[0];
    e.count = 1;  // "gpu" alone means one
    if (parts.size() == 2) {
      if (!ParseInt(parts[1], e.count)) e.type = parts[1], e.count = 1;  // "gpu:a100"
    } else if (parts.size() == 3) {
      e.type = parts[1];
      if (!ParseInt(parts[2], e.count)) {
        return InvalidArgument("gres \"" + text + "\": bad count in \"" + shown + "\"");
      }
    } else if (parts.size() > 3) {
      return InvalidArgument("gres \"" + text + "\": cannot read \"" + shown + "\"");
    }
    if (e.name.empty() || e.count < 0) {
      return InvalidArgument("gres \"" + text + "\": cannot read \"" + shown + "\"");
    }
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::vector<SlurmNode>> ParseSinfoJson(const std::string& text) {
  auto doc = ParseDocument(text, "sinfo", "nodes");
  if (!doc.ok()) return doc.status();
  std::vector<SlurmNode> out;
  const json& nodes = (*doc)["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::string path = "sinfo.nodes[" + std::to_string(i) + "]";
    if (!nodes[i].is_object()) return InvalidArgument(path + ": expected an object");
    Fields f(nodes[i], path);
    SlurmNode n;
    std::string gres, gres_used, features;
    TESSERA_RETURN_IF_ERROR(f.Str("name", n.name));
    TESSERA_RETURN_IF_ERROR(f.Str("state", n.state));
    TESSERA_RETURN_IF_ERROR(f.StrList("state_flags", n.state_flags));
    TESSERA_RETURN_IF_ERROR(f.Str("reason", n.reason, false));
    TESSERA_RETURN_IF_ERROR(f.StrList("partitions", n.partitions));
    TESSERA_RETURN_IF_ERROR(f.Str("active_features", features, false));
    TESSERA_RETURN_IF_ERROR(f.Int("cpus", n.cpus, false));
    TESSERA_RETURN_IF_ERROR(f.Int("real_memory", n.real_memory_mib, false));
    TESSERA_RETURN_IF_ERROR(f.Int("alloc_cpus", n.alloc_cpus));
    TESSERA_RETURN_IF_ERROR(f.Int("alloc_memory", n.alloc_memory_mib));
    TESSERA_RETURN_IF_ERROR(f.Str("gres", gres, false));
    TESSERA_RETURN_IF_ERROR(f.Str("gres_used", gres_used, false));
    if (n.name.empty()) return InvalidArgument(path + ".name: empty");
    for (const std::string& s : Split(features, ',')) {
      if (!s.empty()) n.features.push_back(s);
    }
    auto g = ParseGres(gres);
    if (!g.ok()) return g.status().WithContext(path + ".gres");
    n.gres = *g;
    auto gu = ParseGres(gres_used);
    if (!gu.ok()) return gu.status().WithContext(path + ".gres_used");
    n.gres_used = *gu;
    out.push_back(std::move(n));
  }
  return out;
}

StatusOr<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text) {
  auto doc = ParseDocument(text, "squeue", "jobs");
  if (!doc.ok()) return doc.status();
  std::vector<SlurmJob> out;
  const json& jobs = (*doc)["jobs"];
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::string path = "squeue.jobs[" + std::to_string(i) + "]";
    if (!jobs[i].is_object()) return InvalidArgument(path + ": expected an object");
    Fields f(jobs[i], path);
    SlurmJob j;
    TESSERA_RETURN_IF_ERROR(f.Int("job_id", j.job_id, false));
    TESSERA_RETURN_IF_ERROR(f.Int("het_job_id", j.het_job_id));
    TESSERA_RETURN_IF_ERROR(f.Int("het_job_offset", j.het_job_offset));
    TESSERA_RETURN_IF_ERROR(f.Int("array_job_id", j.array_job_id));
    TESSERA_RETURN_IF_ERROR(f.Str("name", j.name, false));
    TESSERA_RETURN_IF_ERROR(f.Str("comment", j.comment, false));
    TESSERA_RETURN_IF_ERROR(f.Str("job_state", j.state));
    TESSERA_RETURN_IF_ERROR(f.Str("state_reason", j.state_reason, false));
    TESSERA_RETURN_IF_ERROR(f.Int("exit_code", j.exit_code));
    TESSERA_RETURN_IF_ERROR(f.Str("nodes", j.nodes, false));
    TESSERA_RETURN_IF_ERROR(f.Str("partition", j.partition, false));
    TESSERA_RETURN_IF_ERROR(f.Int("submit_time", j.submit_time));
    TESSERA_RETURN_IF_ERROR(f.Int("start_time", j.start_time));
    TESSERA_RETURN_IF_ERROR(f.Int("end_time", j.end_time));
    TESSERA_RETURN_IF_ERROR(f.OptInt("time_limit", j.time_limit_minutes));
    TESSERA_RETURN_IF_ERROR(f.Int("tasks", j.tasks));
    TESSERA_RETURN_IF_ERROR(f.Int("node_count", j.node_count));
    if (j.job_id <= 0) return InvalidArgument(path + ".job_id: must be > 0");
    out.push_back(std::move(j));
  }
  return out;
}

std::map<std::string, std::string> ParseScontrolLine(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::string s = line;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  // A key starts at the line start or after a space, and runs to '=' with no space in it.
  auto key_at = [&](size_t pos) -> size_t {  // returns the '=' position or npos
    size_t eq = s.find('=', pos);
    if (eq == std::string::npos) return eq;
    size_t sp = s.find(' ', pos);
    return (sp != std::string::npos && sp < eq) ? std::string::npos : eq;
  };
  size_t pos = 0;
  while (pos < s.size()) {
    size_t eq = key_at(pos);
    if (eq == std::string::npos) break;
    std::string key = s.substr(pos, eq - pos);
    // The value runs to the next " Key=".
    size_t end = eq + 1;
    while (true) {
      size_t sp = s.find(' ', end);
      if (sp == std::string::npos) {
        end = s.size();
        break;
      }
      if (key_at(sp + 1) != std::string::npos) {
        end = sp;
        break;
      }
      end = sp + 1;
    }
    std::string value = s.substr(eq + 1, end - eq - 1);
    while (!value.empty() && value.back() == ' ') value.pop_back();  // "Comment=x  StdErr=..."
    kv[key] = value;
    pos = s.find_first_not_of(' ', end);
    if (pos == std::string::npos) break;
  }
  return kv;
}

StatusOr<SlurmJob> SlurmJobFromScontrol(const std::map<std::string, std::string>& kv) {
  auto get = [&](const char* k) -> std::string {
    auto it = kv.find(k);
    return it == kv.end() ? std::string() : it->second;
  };
  SlurmJob j;
  if (!ParseInt(get("JobId"), j.job_id) || j.job_id <= 0) {
    return InvalidArgument("scontrol.JobId: expected a positive integer, got \"" + get("JobId") +
                           "\"");
  }
  j.name = get("JobName");
  j.comment = get("Comment");
  j.state = get("JobState");
  j.state_reason = get("Reason");
  j.nodes = get("NodeList");
  j.partition = get("Partition");
  if (j.state.empty()) return InvalidArgument("scontrol.JobState: missing");
  int64_t v = 0;
  if (ParseInt(get("HetJobId"), v)) j.het_job_id = v;
  if (ParseInt(get("HetJobOffset"), v)) j.het_job_offset = v;
  if (ParseInt(get("ArrayJobId"), v)) j.array_job_id = v;
  // ExitCode=3:0 is "exit status:signal"; store it as the raw wait status squeue uses.
  std::string ec = get("ExitCode");
  size_t colon = ec.find(':');
  int64_t code = 0, sig = 0;
  if (colon == std::string::npos || !ParseInt(ec.substr(0, colon), code) ||
      !ParseInt(ec.substr(colon + 1), sig)) {
    return InvalidArgument("scontrol.ExitCode: expected \"N:S\", got \"" + ec + "\"");
  }
  j.exit_code = sig != 0 ? (sig & 0x7f) : ((code & 0xff) << 8);
  if (j.nodes == "(null)") j.nodes.clear();
  return j;
}

StatusOr<std::optional<int64_t>> ParseSlurmTime(const std::string& text) {
  if (text == "UNLIMITED" || text == "INFINITE") return std::optional<int64_t>();
  auto bad = [&] { return InvalidArgument("\"" + text + "\" is not a Slurm time"); };
  int64_t days = 0;
  std::string rest = text;
  const size_t dash = text.find('-');
  if (dash != std::string::npos) {
    if (!ParseInt(text.substr(0, dash), days) || days < 0) return bad();
    rest = text.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  for (const std::string& p : Split(rest, ':')) {
    int64_t v = 0;
    if (!ParseInt(p, v) || v < 0) return bad();
    parts.push_back(v);
  }
  if (parts.size() > 3) return bad();
  // With days: hours[:minutes[:seconds]]; without: minutes[:seconds] or hours:minutes:seconds.
  int64_t h = 0, m = 0, s = 0;
  if (dash != std::string::npos) {
    h = parts[0];
    if (parts.size() > 1) m = parts[1];
    if (parts.size() > 2) s = parts[2];
  } else if (parts.size() == 3) {
    h = parts[0], m = parts[1], s = parts[2];
  } else {
    m = parts[0];
    if (parts.size() > 1) s = parts[1];
  }
  return std::optional<int64_t>(((days * 24 + h) * 60 + m) * 60 + s);
}

StatusOr<std::vector<SlurmPartition>> ParseScontrolPartitions(const std::string& text) {
  std::vector<SlurmPartition> out;
  for (const std::string& line : Split(text, '\n')) {
    if (line.find_first_not_of(" \r") == std::string::npos) continue;
    if (line.rfind("No partitions", 0) == 0) continue;
    const std::map<std::string, std::string> kv = ParseScontrolLine(line);
    auto get = [&](const char* k) -> std::string {
      auto it = kv.find(k);
      return it == kv.end() ? std::string() : it->second;
    };
    SlurmPartition p;
    p.name = get("PartitionName");
    if (p.name.empty()) {
      return InvalidArgument("scontrol show partition: a line without PartitionName: \"" +
                             line.substr(0, 80) + "\"");
    }
    const std::string path = "scontrol show partition " + p.name;
    p.state = get("State");
    if (p.state.empty()) return InvalidArgument(path + ": State missing");
    p.is_default = get("Default") == "YES";
    p.hidden = get("Hidden") == "YES";
    auto max_time = ParseSlurmTime(get("MaxTime"));
    if (!max_time.ok()) return max_time.status().WithContext(path + ": MaxTime");
    p.max_time_seconds = *max_time;
    int64_t v = 0;
    if (ParseInt(get("MaxNodes"), v)) p.max_nodes = v;  // else UNLIMITED
    if (ParseInt(get("PriorityTier"), v)) p.priority_tier = v;
    // scontrol prints AllowX=ALL when unrestricted, and DenyX only when set (in place of AllowX).
    auto list = [&](const char* k) -> std::optional<std::vector<std::string>> {
      const std::string value = get(k);
      if (value.empty() || value == "ALL" || value == "(null)") return std::nullopt;
      return Split(value, ',');
    };
    p.allow_accounts = list("AllowAccounts");
    p.allow_groups = list("AllowGroups");
    p.allow_qos = list("AllowQos");
    p.deny_accounts = list("DenyAccounts").value_or(std::vector<std::string>{});
    p.deny_qos = list("DenyQos").value_or(std::vector<std::string>{});
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tessera::slurm
