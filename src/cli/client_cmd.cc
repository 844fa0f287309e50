// The CLI client: submit, get, describe, cancel, hold, release, scale, events, logs, apply,
// token, bench-submit.
// kubectl/squeue-like tables; -o json|yaml|wide. Exit codes (docs/cli.md): 0 ok, 1 the
// server refused or failed the request, 2 usage error, 3 the server could not be reached.
#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "cli/tls_flags.h"
#include "common/rng.h"
#include "model/codec.h"
#include "model/run_as.h"
#include "server/api.h"

namespace tessera::cli {
namespace {

struct ClientFlags {
  std::string server;
  std::string token;
  std::string output;  // "", json, yaml, wide
  TlsClientOptions tls;
};

// Percent-encodes a query or path component.
std::string Esc(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// A job named as `get jobs -o name` prints it ("job/train"), or as submit and cancel say it:
// the name itself (a job name has no '/').
std::string JobArg(const std::string& arg) {
  for (const char* kind : {"job/", "jobs/"})
    if (arg.rfind(kind, 0) == 0) return arg.substr(std::strlen(kind));
  return arg;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string ReadAll(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) return {};
    ss << in.rdbuf();
  }
  return ss.str();
}

// Every file read before anything is sent: a missing one sends nothing (exit 2, naming it).
bool ReadEvery(const std::vector<std::string>& files, std::vector<std::string>& texts) {
  for (const auto& file : files) {
    if (file != "-" && !std::filesystem::is_regular_file(file)) {
      std::fprintf(stderr, "error: %s: no such file\n", file.c_str());
      SetExitCode(2);
      return false;
    }
    texts.push_back(ReadAll(file));
  }
  return true;
}

std::string ServerUrl(const ClientFlags& f) {
  std::string url = !f.server.empty()                          ? f.server
                    : std::getenv("TESSERA_SERVER") != nullptr ? std::getenv("TESSERA_SERVER")
                                                               : "http://127.0.0.1:8080";
  // As kubectl takes it: http://host:8080/ is the server at http://host:8080.
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  return url;
}

// [http[s]://]HOST[:PORT] and nothing after: cpp-httplib takes anything else whole for a host
// name, and then says only that it cannot connect.
bool IsServerUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme != std::string::npos && url.compare(0, scheme, "http") != 0 &&
      url.compare(0, scheme, "https") != 0)
    return false;
  const std::string rest = scheme == std::string::npos ? url : url.substr(scheme + 3);
  return !rest.empty() && rest.find_first_of("/?#") == std::string::npos;
}

// The bearer token: --token, $TESSERA_TOKEN, $TESSERA_TOKEN_FILE (an error when it cannot be
// read: a token silently left out reads as a server refusing it), or ./data/admin.token.
StatusOr<std::string> Token(const ClientFlags& f) {
  if (!f.token.empty()) return f.token;
  if (const char* e = std::getenv("TESSERA_TOKEN")) return std::string(e);
  if (const char* e = std::getenv("TESSERA_TOKEN_FILE")) {
    std::ifstream in(e);
    if (!in)
      return InvalidArgument(std::string("$TESSERA_TOKEN_FILE ") + e +
                             ": cannot read: " + std::strerror(errno));
    return Trim(ReadAll(e));
  }
  if (std::filesystem::exists("data/admin.token")) return Trim(ReadAll("data/admin.token"));
  return std::string();
}

struct Response {
  bool reached = false;
  // Not reached: whether the request may have been sent (no answer came), not merely
  // never connected.
  bool maybe_sent = false;
  std::string error;
  bool tls_error = false;  // not reached: the TLS handshake or certificate check failed
  bool bad_flag = false;   // not sent: --cacert names no CA file (a usage error)
  int status = 0;
  Json body;
  std::string raw;
  httplib::Headers headers;
};

Response Call(const ClientFlags& f, const std::string& method, const std::string& path,
              const std::string& body = "", const std::string& content_type = "application/yaml",
              const httplib::Headers& extra = {}) {
  Response out;
  const std::string url = ServerUrl(f);
  auto tls = ResolveTlsClientFlags(f.tls, url, "tessera");
  if (!tls.ok()) {
    out.error = tls.status().ToString();
    out.bad_flag = true;
    return out;
  }
  auto tok = Token(f);
  if (!tok.ok()) {
    out.error = tok.status().message();
    out.bad_flag = true;
    return out;
  }
  httplib::Client c(url);
  if (!IsServerUrl(url) || !c.is_valid()) {
    out.error = "server URL \"" + url + "\": not http[s]://HOST[:PORT] (--server, $TESSERA_SERVER)";
    out.bad_flag = true;
    return out;
  }
  ApplyTls(c, *tls);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(60, 0);
  httplib::Headers h;
  if (!tok->empty()) h.emplace("Authorization", "Bearer " + *tok);
  h.insert(extra.begin(), extra.end());
  httplib::Result r = method == "GET"      ? c.Get(path.c_str(), h)
                      : method == "DELETE" ? c.Delete(path.c_str(), h)
                                           : c.Post(path.c_str(), h, body, content_type.c_str());
  if (!r) {
    out.tls_error = IsTlsError(r.error());  // (before DescribeHttpError empties OpenSSL's queue)
    out.error = DescribeHttpError(c, r.error(), url, *tls);
    // An HTTPS server drops a plain-HTTP request unanswered: say what that may be.
    if (r.error() == httplib::Error::Read && url.rfind("http://", 0) == 0)
      out.error += "; if that server serves HTTPS, use an https:// URL";
    out.maybe_sent = !out.tls_error && r.error() != httplib::Error::Connection &&
                     r.error() != httplib::Error::ConnectionTimeout;
    return out;
  }
  out.reached = true;
  out.status = r->status;
  out.raw = r->body;
  out.headers = r->headers;
  try {
    out.body = Json::parse(r->body);
  } catch (...) {
  }
  return out;
}

// A key no other submission has: 128 random bits.
std::string RandomKey() { return "cli-" + SecureRandomHex(16); }

// Prints the error and sets the exit code; returns true when the call succeeded.
bool Check(const ClientFlags& f, const Response& r) {
  if (!r.reached) {
    if (r.tls_error || r.bad_flag) {
      std::fprintf(stderr, "error: %s\n", r.error.c_str());
      SetExitCode(r.bad_flag ? 2 : 3);
      return false;
    }
    if (r.maybe_sent)
      std::fprintf(stderr,
                   "error: no answer from the server at %s (%s): the request may have been "
                   "carried out\n",
                   ServerUrl(f).c_str(), r.error.c_str());
    else
      std::fprintf(stderr, "error: cannot reach the server at %s (is `tessera server` running?)\n",
                   ServerUrl(f).c_str());
    SetExitCode(3);
    return false;
  }
  if (r.status >= 200 && r.status < 300) return true;
  std::string code = "HTTP " + std::to_string(r.status), msg = r.raw;
  if (r.body.is_object() && r.body.contains("error")) {
    const Json& e = r.body["error"];
    if (e.is_object()) {
      code = e.value("code", code);
      msg = e.value("message", msg);
    } else if (e.is_string()) {  // not the API's shape (a proxy, an older agent): its words
      msg = e.get<std::string>();
    }
  }
  std::fprintf(stderr, "Error from server (%s): %s\n", code.c_str(), msg.c_str());
  // A server started with its own --data-dir writes its admin token there, not in ./data.
  if (auto sent = Token(f); r.status == 401 && sent.ok() && sent->empty())
    std::fprintf(stderr,
                 "hint: no token was sent: give --token, $TESSERA_TOKEN or $TESSERA_TOKEN_FILE "
                 "(`tessera server` writes its admin token to DATA_DIR/admin.token)\n");
  SetExitCode(1);
  return false;
}

// ---- output ----

std::string YamlScalar(const Json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    // Plain only where no YAML 1.1 or 1.2 reader would take it for anything but a string: not
    // a bool or null word in any case (no, On, NULL), nor anything that starts like a number
    // (0x1f, 1e3, .5, .inf, +1); quoting more is never wrong.
    std::string lower = s;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    static const std::set<std::string> kWords = {"true", "false", "yes",  "no", "y",   "n",
                                                 "on",   "off",   "null", "~",  "nan", "inf"};
    const bool numeric_start = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                                              s[0] == '.' || s[0] == '+' || s[0] == '-');
    bool plain = !s.empty() && s.find_first_of(":#{}[],&*!|>'\"%@`\n\t\\?") == std::string::npos &&
                 s.front() != ' ' && s.back() != ' ' && !kWords.count(lower) && !numeric_start;
    return plain ? s : v.dump();
  }
  return v.dump();
}

void Yaml(const Json& v, int indent, std::ostream& out) {
  std::string pad(indent, ' ');
  if (v.is_object()) {
    if (v.empty()) {
      out << pad << "{}\n";
      return;
    }
    for (const auto& [k, x] : v.items()) {
      out << pad << YamlScalar(Json(k)) << ":";
      if ((x.is_object() || x.is_array()) && !x.empty()) {
        out << "\n";
        Yaml(x, indent + 2, out);
      } else {
        out << " " << (x.is_object() ? "{}" : x.is_array() ? "[]" : YamlScalar(x)) << "\n";
      }
    }
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if ((x.is_object() || x.is_array()) && !x.empty()) {
        std::ostringstream inner;
        Yaml(x, indent + 2, inner);
        std::string s = inner.str();
        out << pad << "- " << s.substr(indent + 2);
      } else {
        out << pad << "- " << (x.is_object() ? "{}" : x.is_array() ? "[]" : YamlScalar(x)) << "\n";
      }
    }
  } else {
    out << pad << YamlScalar(v) << "\n";
  }
}

bool PrintStructured(const ClientFlags& f, const Json& v) {
  if (f.output == "json") {
    std::cout << v.dump(2) << "\n";
    return true;
  }
  if (f.output == "yaml") {
    Yaml(v, 0, std::cout);
    return true;
  }
  return false;
}

void Table(const std::vector<std::string>& header,
           const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(header.size());
  for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s += std::string(w[i] - r[i].size() + 3, ' ');
    }
    std::cout << s << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string Age(int64_t t) {
  if (t <= 0) return "<none>";
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  int64_t d = std::max<int64_t>(0, now - t);
  if (d < 120) return std::to_string(d) + "s";
  if (d < 7200) return std::to_string(d / 60) + "m";
  if (d < 172800) return std::to_string(d / 3600) + "h";
  return std::to_string(d / 86400) + "d";
}

// kubectl's words: Ready / NotReady, with ",SchedulingDisabled" for a cordoned or drained
// node (the engine places nothing there), and ",PoolDown" for a node of a pool run by
// another system (Slurm) that the system says is down: the server keeps it, that system
// ends its work (label pool.down, docs/slurm.md).
std::string NodeStatus(const Json& n) {
  std::string s = n.value("ready", false) ? "Ready" : "NotReady";
  if (n.value("unschedulable", false)) s += ",SchedulingDisabled";
  if (n.contains("labels") && n["labels"].is_object() && n["labels"].contains("pool.down"))
    s += ",PoolDown";
  return s;
}

std::string S(const Json& o, const char* k, const std::string& def = "") {
  if (!o.contains(k) || o[k].is_null()) return def;
  if (o[k].is_string()) return o[k].get<std::string>();
  return o[k].dump();
}

// A node's GPUs per model, in device order: a node may mix models (1xA100-80GB,1xH200-141GB).
std::string GpuShape(const Json& n) {
  std::vector<std::pair<std::string, int64_t>> models;
  for (const auto& d : n.value("devices", Json::array())) {
    const std::string m = S(d, "model");
    if (models.empty() || models.back().first != m) models.push_back({m, 0});
    models.back().second += 1;
  }
  std::string shape;
  for (const auto& [m, count] : models)
    shape += (shape.empty() ? "" : ",") + std::to_string(count) + "x" + m;
  return (shape.empty() ? "0x<none>" : shape) + (n.value("virtual", false) ? " (virtual)" : "");
}

std::string JoinList(const Json& a) {
  std::string s;
  if (!a.is_array()) return s;
  for (const auto& x : a)
    s += (s.empty() ? "" : ",") + (x.is_string() ? x.get<std::string>() : x.dump());
  return s;
}

bool ValidOutput(const ClientFlags& f) {
  if (f.output.empty() || f.output == "json" || f.output == "yaml" || f.output == "wide")
    return true;
  std::fprintf(stderr, "error: -o must be json, yaml or wide, got \"%s\"\n", f.output.c_str());
  SetExitCode(2);
  return false;
}

// Names in the order `ls -v` gives: runs of digits compare as numbers, so an array's jobs
// list as sweep_2, sweep_10 (not sweep_10, sweep_2).
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, k = 0;
  while (i < a.size() && k < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[k]))) {
      size_t ie = i, ke = k;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (ke < b.size() && std::isdigit(static_cast<unsigned char>(b[ke]))) ++ke;
      const std::string x = a.substr(i, ie - i), y = b.substr(k, ke - k);
      const std::string xs = x.substr(std::min(x.find_first_not_of('0'), x.size()));
      const std::string ys = y.substr(std::min(y.find_first_not_of('0'), y.size()));
      if (xs.size() != ys.size()) return xs.size() < ys.size();
      if (xs != ys) return xs < ys;
      i = ie, k = ke;
    } else {
      if (a[i] != b[k]) return a[i] < b[k];
      ++i, ++k;
    }
  }
  return a.size() - i < b.size() - k || (a.size() - i == b.size() - k && a < b);
}

void PrintJobs(const ClientFlags& f, const Json& given) {
  std::vector<std::vector<std::string>> rows;
  bool wide = f.output == "wide";
  std::vector<Json> items(given.begin(), given.end());
  std::stable_sort(items.begin(), items.end(), [](const Json& x, const Json& y) {
    return NaturalLess(S(x, "name"), S(y, "name"));
  });
  for (const auto& j : items) {
    std::vector<std::string> r = {S(j, "name"),
                                  S(j, "queue"),
                                  S(j, "state"),
                                  S(j, "priorityClass", "<none>"),
                                  S(j, "runningTasks") + "/" + S(j, "tasks"),
                                  S(j, "gpus"),
                                  S(j, "restarts"),
                                  Age(j.value("createdAt", int64_t{0}))};
    // An infeasible job says so first: no waiting will start it.
    std::string reason = !j.contains("pendingReason") ? S(j, "message")
                         : j["pendingReason"].value("infeasible", false)
                             ? "Infeasible"
                             : j["pendingReason"].value("code", "");
    if (wide) {
      r.push_back(S(j, "attempt"));
      r.push_back(S(j, "user"));
      std::string nodes = JoinList(j["nodes"]);
      r.push_back(nodes.empty() ? "<none>" : nodes);
      r.push_back(reason.empty() ? "<none>" : reason);
    } else {
      // Why it waits, as squeue's (REASON): the code alone; -o wide says what happened last.
      r.push_back(j.contains("pendingReason") ? reason : "<none>");
    }
    rows.push_back(r);
  }
  // RESTARTS as kubectl's: the job's runs after its first, and its tasks restarted alone.
  std::vector<std::string> h = {"NAME",  "QUEUE", "STATE",    "PRIORITY",
                                "TASKS", "GPUS",  "RESTARTS", "AGE"};
  if (wide)
    h.insert(h.end(), {"ATTEMPT", "USER", "NODES", "REASON"});
  else
    h.push_back("REASON");
  Table(h, rows);
}

// Wide: the sequence number (what --after pages by) and the time, RFC 3339 in UTC.
void PrintEvents(const Json& items, bool wide = false) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : items) {
    std::vector<std::string> r;
    if (wide) {
      const std::time_t t = e.value("time", int64_t{0});
      std::tm tm{};
      gmtime_r(&t, &tm);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      r = {S(e, "seq"), when};
    }
    r.insert(r.end(), {Age(e.value("time", int64_t{0})), S(e, "type"), S(e, "reason"),
                       S(e, "object"), S(e, "message")});
    rows.push_back(std::move(r));
  }
  std::vector<std::string> h = {"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"};
  if (wide) h.insert(h.begin(), {"SEQ", "TIME"});
  Table(h, rows);
}

// Every event `query` selects ("object=node/x"; "" for all), oldest first, page by page; only
// the newest `keep` of them (0: all). False when a call failed (said already).
bool NewestEvents(const ClientFlags& f, const std::string& query, size_t keep, Json& items) {
  items = Json::array();
  for (int64_t after = 0;;) {
    auto r = Call(f, "GET",
                  "/v1/events?limit=10000" + (query.empty() ? "" : "&" + query) +
                      "&after=" + std::to_string(after));
    if (!Check(f, r)) return false;
    for (auto& x : r.body["items"]) items.push_back(std::move(x));
    if (r.body["items"].size() < 10000) break;
    after = r.body["next"].get<int64_t>();
  }
  if (keep && items.size() > keep) items.erase(items.begin(), items.end() - keep);
  return true;
}

// A placement's device indices, "0,1" ("-": none), for the allocation tables of describe.
std::string DeviceIndices(const Json& placement) {
  std::string devs;
  for (const auto& d : placement.value("devices", Json::array()))
    devs += (devs.empty() ? "" : ",") + S(d, "device");
  return devs.empty() ? "-" : devs;
}

// The Events section of describe, as kubectl's.
void PrintEventsSection(const Json& events) {
  std::printf("Events:\n");
  if (events.empty())
    std::printf("  <none>\n");
  else
    PrintEvents(events);
}

// `tessera describe node NAME`, as kubectl's: what the node is, what is allocated on it (the
// tasks holding its devices; another queue's shown as capacity in use only), its events.
void DescribeNode(const ClientFlags& f, const std::string& name) {
  auto r = Call(f, "GET", "/v1/nodes?allocations=true");
  if (!Check(f, r)) return;
  const Json* found = nullptr;
  for (const auto& n : r.body["items"])
    if (S(n, "name") == name) found = &n;
  if (found == nullptr) {
    std::fprintf(stderr, "Error from server (NotFound): node \"%s\" not found\n", name.c_str());
    SetExitCode(1);
    return;
  }
  // Its newest events (oldest first, as kubectl shows them).
  Json events;
  if (!NewestEvents(f, "object=" + Esc("node/" + name), 50, events)) return;
  Json node = *found;
  node["events"] = std::move(events);
  if (PrintStructured(f, node)) return;
  const Json& n = node;
  std::string labels, taints;
  const Json node_labels = n.value("labels", Json::object());  // (items() of a temporary dangles)
  for (const auto& [k, v] : node_labels.items())
    labels +=
        (labels.empty() ? "" : ",") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  for (const auto& t : n.value("taints", Json::array()))
    taints += (taints.empty() ? "" : ",") + S(t, "key") +
              (S(t, "value").empty() ? "" : "=" + S(t, "value")) + ":" + S(t, "effect");
  std::printf("Name:           %s\n", S(n, "name").c_str());
  std::printf("Pool:           %s\n", S(n, "pool").c_str());
  std::printf("Status:         %s\n", NodeStatus(n).c_str());
  std::printf("Last heartbeat: %s\n",
              n.contains("lastHeartbeat")
                  ? (Age(n["lastHeartbeat"].get<int64_t>()) + " ago").c_str()
                  : "<none since the server started>");
  std::printf("Agent:          %s (epoch %s)\n", S(n, "agentVersion", "<unknown>").c_str(),
              S(n, "epoch").c_str());
  std::printf("Labels:         %s\n", labels.empty() ? "<none>" : labels.c_str());
  std::printf("Taints:         %s\n", taints.empty() ? "<none>" : taints.c_str());
  std::printf("Capacity:       cpu %s, memory %s, GPUs %s\n", S(n, "cpu").c_str(),
              S(n, "memory").c_str(), GpuShape(n).c_str());
  int64_t cpu = 0, memory = 0;
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : n.value("allocations", Json::array())) {
    const Json& pl = a["placement"];
    if (auto c = ParseMilliQuantity(S(pl, "cpu", "0")); c.ok()) cpu += *c;
    if (auto m = ParseByteQuantity(S(pl, "memory", "0")); m.ok()) memory += *m;
    rows.push_back({"  " + S(a, "id", "<other queue>"), S(a, "job", "-"), S(a, "task"),
                    S(a, "state"), DeviceIndices(pl), S(pl, "cpu"), S(pl, "memory")});
  }
  std::printf("Allocated:      cpu %s, memory %s, GPUs %s/%s\n", FormatMilli(cpu).c_str(),
              FormatBytes(memory).c_str(),
              FormatMilli(n.value("gpuMilliInUse", int64_t{0})).c_str(), S(n, "gpus").c_str());
  std::printf("Allocations:\n");
  if (rows.empty())
    std::printf("  <none>\n");
  else
    Table({"  ID", "JOB", "TASK", "STATE", "DEVICES", "CPU", "MEMORY"}, rows);
  PrintEventsSection(n["events"]);
}

// Fetches every page of a list endpoint.
bool ListAll(const ClientFlags& f, const std::string& path, Json& items, size_t max_items = 0) {
  items = Json::array();
  std::string cont;
  for (;;) {
    std::string p = path + (path.find('?') == std::string::npos ? "?" : "&") + "limit=1000" +
                    (cont.empty() ? "" : "&continue=" + Esc(cont));
    auto r = Call(f, "GET", p);
    if (!Check(f, r)) return false;
    for (auto& x : r.body["items"]) items.push_back(x);
    if (!r.body.contains("continue") || (max_items && items.size() >= max_items)) return true;
    cont = r.body["continue"].get<std::string>();
  }
}

void AddCommon(CLI::App* c, ClientFlags& f, bool output = true) {
  c->add_option("--server", f.server, "API URL (default $TESSERA_SERVER or http://127.0.0.1:8080)");
  c->add_option(
      "--token", f.token,
      "bearer token (default $TESSERA_TOKEN, $TESSERA_TOKEN_FILE, or ./data/admin.token)");
  AddTlsClientFlags(c, f.tls);
  if (output) c->add_option("-o,--output", f.output, "json | yaml | wide (get: also name)");
}

// ---- bench-submit ----

struct BenchFlags {
  int clients = 16;
  int jobs = 20000;
  bool json = false;
  bool yaml_body = false;
  bool no_fsync = false;
  bool scheduler = false;
  std::string data_dir;
};

void RunBench(const ClientFlags& f, const BenchFlags& b) {
  std::unique_ptr<server::ControlPlane> cp;
  std::unique_ptr<server::ApiServer> api;
  auto given = Token(f);
  if (!given.ok()) {
    std::fprintf(stderr, "error: %s\n", given.status().message().c_str());
    SetExitCode(2);
    return;
  }
  std::string url = f.server, token = *given, dir;
  if (url.empty()) {
    // In-process server on a fresh data dir: the same code as `tessera server`.
    dir = b.data_dir.empty() ? (std::filesystem::temp_directory_path() /
                                ("tessera-bench-" + std::to_string(::getpid())))
                                   .string()
                             : b.data_dir;
    std::filesystem::remove_all(dir);
    store::SqliteOptions so;
    so.synchronous_full = !b.no_fsync;
    auto st = store::OpenSqliteStore(dir, so);
    auto engine = Engine::Create(DefaultEngineConfig());
    if (!st.ok() || !engine.ok()) {
      std::fprintf(stderr, "bench: cannot open store or engine\n");
      SetExitCode(1);
      return;
    }
    server::ControlPlaneOptions cpo;
    cpo.run_scheduler = b.scheduler;
    auto c = server::ControlPlane::Open(std::move(*st), std::move(*engine), cpo);
    if (!c.ok()) {
      std::fprintf(stderr, "bench: %s\n", c.status().ToString().c_str());
      SetExitCode(1);
      return;
    }
    cp = std::move(*c);
    token = server::NewToken();
    server::TokenEntry e{{"bench", server::Role::kAdmin, {"*"}}, server::Sha256Hex(token), "bench"};
    cp->tokens().Add(e);
    server::Principal admin{"bench", server::Role::kAdmin, {"*"}};
    (void)cp->Apply(
        admin,
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: default}\n");
    server::ApiOptions ao;
    ao.port = 0;
    api = std::make_unique<server::ApiServer>(*cp, ao);
    if (!api->Start().ok()) {
      SetExitCode(1);
      return;
    }
    url = api->url();
  }
  auto tls = ResolveTlsClientFlags(f.tls, url, "tessera bench-submit");
  if (!tls.ok()) {
    std::fprintf(stderr, "error: %s\n", tls.status().ToString().c_str());
    SetExitCode(2);
    return;
  }
  std::vector<std::vector<double>> lat(b.clients);
  std::atomic<int> errors{0}, retries{0}, replayed{0};
  std::string first_error, first_retry;
  std::mutex err_mu;
  std::string run = std::to_string(::getpid());
  auto cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  const double cpu0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < b.clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client cli(url);
      ApplyTls(cli, *tls);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      cli.set_read_timeout(60, 0);
      httplib::Headers h = {{"Authorization", "Bearer " + token}};
      int n = b.jobs / b.clients + (c < b.jobs % b.clients ? 1 : 0);
      for (int i = 0; i < n; ++i) {
        std::string name = "bench-" + run + "-c" + std::to_string(c) + "-" + std::to_string(i);
        std::string body =
            b.yaml_body
                ? "apiVersion: tessera.io/v1\nkind: Job\nmetadata:\n  name: " + name +
                      "\nspec:\n  queue: default\n  tasks:\n    - replicas: 1\n      resources: "
                      "{cpu: 1, memory: 1Gi, "
                      "nvidia.com/gpu: 1}\n      command: [\"true\"]\n"
                : R"({"apiVersion":"tessera.io/v1","kind":"Job","metadata":{"name":")" + name +
                      R"("},"spec":{"queue":"default","tasks":[{"replicas":1,"resources":{"cpu":1,"memory":"1Gi","nvidia.com/gpu":1},"command":["true"]}]}})";
        httplib::Headers hk = h;
        hk.emplace("Idempotency-Key", name);
        auto s = std::chrono::steady_clock::now();
        auto post = [&] {
          return cli.Post("/v1/jobs", hk, body,
                          b.yaml_body ? "application/yaml" : "application/json");
        };
        httplib::Result r = post();
        // Retried: a connection that was never made (no byte sent), a 503 (the server says
        // so), and a request that got no answer: it may have been stored, but it carries its
        // Idempotency-Key, so the retry gets the stored job back (200) instead of creating
        // it twice.
        for (int attempt = 0; (!r || r->status == 503) && attempt < 3; ++attempt) {
          if (retries++ == 0) {
            std::lock_guard<std::mutex> l(err_mu);
            first_retry = r ? std::to_string(r->status) + " " + r->body
                            : "no response (" + httplib::to_string(r.error()) + ")";
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5 << attempt));
          r = post();
        }
        auto e = std::chrono::steady_clock::now();
        if (r && r->status == 200) replayed++;
        if (!r || (r->status != 201 && r->status != 200)) {
          if (errors++ == 0) {
            std::lock_guard<std::mutex> l(err_mu);
            first_error = r ? std::to_string(r->status) + " " + r->body
                            : "no response (" + httplib::to_string(r.error()) + ")";
          }
          continue;
        }
        lat[c].push_back(std::chrono::duration<double, std::milli>(e - s).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // CPU of this process (server and clients alike when the server is in-process): on a shared
  // machine the rate depends on the load, the CPU per submission much less.
  const double cpu = cpu_seconds() - cpu0;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  Json out = {{"clients", b.clients},
              {"jobs", static_cast<int64_t>(all.size())},
              {"errors", errors.load()},
              {"retries", retries.load()},
              {"replayed", replayed.load()},
              {"seconds", secs},
              {"cpuSeconds", cpu},
              {"cpuMicrosPerSubmission", all.empty() ? 0.0 : cpu * 1e6 / all.size()},
              {"submissionsPerSecond", all.size() / secs},
              {"latencyMs",
               {{"p50", pct(0.50)},
                {"p90", pct(0.90)},
                {"p99", pct(0.99)},
                {"max", all.empty() ? 0.0 : all.back()}}},
              {"body", b.yaml_body ? "yaml" : "json"},
              {"fsync", !b.no_fsync},
              {"scheduler", b.scheduler}};
  if (cp) {
    auto stats = cp->store().GetStats();
    out["storeTransactions"] = stats.transactions;
    out["storeCommits"] = stats.commits;
  }
  if (!first_error.empty()) out["firstError"] = first_error;
  if (!first_retry.empty()) out["firstRetryCause"] = first_retry;
  if (b.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf(
        "%d clients, %zu durable submissions in %.2f s: %.0f/s; latency p50 %.2f ms, p99 %.2f ms, "
        "max %.2f ms; "
        "%d errors, %d retries (%d answered from a stored submission)\n",
        b.clients, all.size(), secs, all.size() / secs, pct(0.5), pct(0.99),
        all.empty() ? 0.0 : all.back(), errors.load(), retries.load(), replayed.load());
    if (!first_retry.empty()) std::printf("first retry: %s\n", first_retry.c_str());
    std::printf("cpu: %.2f s in this process, %.0f us per submission%s\n", cpu,
                all.empty() ? 0.0 : cpu * 1e6 / all.size(),
                cp ? " (server and clients)" : " (clients only)");
    if (cp)
      std::printf("store: %lld transactions in %lld fsync'd commits\n",
                  static_cast<long long>(out["storeTransactions"].get<int64_t>()),
                  static_cast<long long>(out["storeCommits"].get<int64_t>()));
  }
  if (api) api->Stop();
  api.reset();
  cp.reset();
  if (!dir.empty() && b.data_dir.empty()) std::filesystem::remove_all(dir);
  if (errors > 0) SetExitCode(1);
}

}  // namespace

void AddClientCommands(CLI::App& app) {
  auto f = std::make_shared<ClientFlags>();

  // submit
  {
    auto files = std::make_shared<std::vector<std::string>>();
    CLI::App* c =
        app.add_subcommand("submit", "submit jobs from YAML/JSON documents or #SBATCH scripts");
    c->add_option("-f,--filename", *files, "file to submit ('-' = stdin); repeatable")->required();
    AddCommon(c, *f);
    c->callback([f, files] {
      if (!ValidOutput(*f)) return;
      std::vector<std::string> texts;
      if (!ReadEvery(*files, texts)) return;
      // Each file is one request (all of its documents or none). When a later file is
      // refused, what the earlier ones submitted is printed before the error.
      Json all = Json::array();
      auto print = [&] {
        if (PrintStructured(*f, Json{{"items", all}})) return;
        for (const auto& j : all)
          std::printf("job/%s submitted (queue %s, %s)\n", S(j, "name").c_str(),
                      S(j, "queue").c_str(), S(j, "state").c_str());
      };
      for (size_t i = 0; i < texts.size(); ++i) {
        // A request that got no answer may have been stored: it is sent again with the same
        // Idempotency-Key, which gets the stored jobs back instead of a second copy. So is a
        // 503 (the first copy still being stored). A server not there at all is said at once.
        const httplib::Headers key = {{"Idempotency-Key", RandomKey()}};
        auto r = Call(*f, "POST", "/v1/jobs", texts[i], "application/yaml", key);
        for (int retry = 0; (r.maybe_sent || r.status == 503) && retry < 3; ++retry) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500 << retry));
          r = Call(*f, "POST", "/v1/jobs", texts[i], "application/yaml", key);
        }
        if (!Check(*f, r)) {
          if (!r.reached && r.maybe_sent)
            std::fprintf(stderr,
                         "error: %s: it may have been submitted (`tessera get jobs` tells)\n",
                         (*files)[i].c_str());
          else
            std::fprintf(stderr, "error: %s: nothing from it was submitted\n", (*files)[i].c_str());
          print();
          return;
        }
        for (auto& j : r.body["items"]) all.push_back(j);
      }
      print();
    });
  }

  // apply (queues, priority classes)
  {
    auto files = std::make_shared<std::vector<std::string>>();
    CLI::App* c =
        app.add_subcommand("apply", "create or replace queues and priority classes (admin)");
    c->add_option("-f,--filename", *files, "file ('-' = stdin); repeatable")->required();
    AddCommon(c, *f);
    c->callback([f, files] {
      std::vector<std::string> texts;
      if (!ReadEvery(*files, texts)) return;
      for (const std::string& text : texts) {
        bool pcs = text.find("kind: PriorityClass") != std::string::npos;
        auto r = Call(*f, "POST", pcs ? "/v1/priorityclasses" : "/v1/queues", text);
        if (!Check(*f, r)) return;
        for (const auto& x : r.body["items"])
          std::printf("%s/%s %s\n", S(x, "kind").c_str(), S(x, "name").c_str(),
                      x.value("action", "configured").c_str());
      }
    });
  }

  // get
  {
    auto what = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto queue = std::make_shared<std::string>();
    auto state = std::make_shared<std::string>();
    auto limit = std::make_shared<int>(0);
    CLI::App* c = app.add_subcommand(
        "get", "list jobs, nodes, queues, priorityclasses, pools, events or tokens");
    c->add_option("kind", *what,
                  "jobs | nodes | queues | priorityclasses | pools | events | tokens")
        ->required()
        ->check(
            CLI::IsMember({"jobs", "job", "nodes", "node", "queues", "queue", "priorityclasses",
                           "priorityclass", "pc", "pools", "pool", "events", "tokens", "token"}));
    c->add_option("name", *name, "one object by name");
    c->add_option("--queue", *queue, "jobs: only this queue");
    c->add_option("--state", *state, "jobs: only this state (Pending, Running, ...; any case)");
    c->add_option("--limit", *limit, "at most this many (events: the newest)");
    AddCommon(c, *f);
    c->callback([f, what, name, queue, state, limit] {
      // One name per kind from here on: the plural (kubectl takes either, and `pc`).
      static const std::map<std::string, std::string> kPlural = {
          {"job", "jobs"},
          {"node", "nodes"},
          {"queue", "queues"},
          {"pool", "pools"},
          {"token", "tokens"},
          {"pc", "priorityclasses"},
          {"priorityclass", "priorityclasses"}};
      const auto plural_of = kPlural.find(*what);
      std::string k = plural_of == kPlural.end() ? *what : plural_of->second;
      // kubectl's -o name: KIND/NAME per line, for scripts (`tessera cancel` takes job/NAME).
      const bool names_only = f->output == "name";
      if (names_only && k == "events") {
        std::fprintf(stderr, "error: -o name: events have no name\n");
        SetExitCode(2);
        return;
      }
      if (names_only) f->output.clear();
      if (!ValidOutput(*f)) return;
      bool jobs = k == "jobs" || k == "job";
      if (!jobs && (!queue->empty() || !state->empty())) {
        std::fprintf(stderr, "error: --queue and --state filter jobs only, not %s\n", k.c_str());
        SetExitCode(2);
        return;
      }
      if (k == "events" && !name->empty()) {
        std::fprintf(stderr, "error: events have no name; for a job's: tessera events --job %s\n",
                     name->c_str());
        SetExitCode(2);
        return;
      }
      if (*limit < 0) {
        std::fprintf(stderr, "error: --limit: must be >= 1, got %d\n", *limit);
        SetExitCode(2);
        return;
      }
      // Every kind: fetch, keep the named object, keep at most --limit, then print.
      Json items = Json::array();
      auto fetch = [&](const std::string& path) {
        auto r = Call(*f, "GET", path);
        if (!Check(*f, r)) return false;
        for (auto& x : r.body["items"])
          if (name->empty() || S(x, "name") == *name) items.push_back(std::move(x));
        return true;
      };
      size_t keep = *limit > 0 ? static_cast<size_t>(*limit) : 0;
      if (jobs) {
        if (!name->empty()) {
          auto r = Call(*f, "GET", "/v1/jobs/" + Esc(JobArg(*name)));
          if (!Check(*f, r)) return;
          items.push_back(r.body);
        } else {
          std::string p = "/v1/jobs?queue=" + Esc(*queue) + "&state=" + Esc(*state);
          if (!ListAll(*f, p, items, keep)) return;
        }
      } else if (k == "events") {
        // Oldest first: the newest are at the end.
        if (!NewestEvents(*f, "", keep, items)) return;
      } else {
        std::string path = k.starts_with("node")    ? "/v1/nodes"
                           : k.starts_with("queue") ? "/v1/queues"
                           : k.starts_with("pool")  ? "/v1/pools"
                           : k.starts_with("token") ? "/v1/tokens"
                                                    : "/v1/priorityclasses";
        if (!fetch(path)) return;
      }
      if (keep && items.size() > keep) items.erase(items.begin() + keep, items.end());
      std::string plural = k == "pc" || k == "priorityclass" ? "priorityclasses"
                           : k.ends_with("s")                ? k
                                                             : k + "s";
      if (items.empty() && !name->empty()) {
        std::fprintf(stderr, "error: %s \"%s\" not found\n", plural.c_str(), name->c_str());
        SetExitCode(1);
        return;
      }
      if (names_only) {
        const char* singular = jobs                     ? "job"
                               : k.starts_with("node")  ? "node"
                               : k.starts_with("queue") ? "queue"
                               : k.starts_with("pool")  ? "pool"
                               : k.starts_with("token") ? "token"
                                                        : "priorityclass";
        for (const auto& x : items) std::printf("%s/%s\n", singular, S(x, "name").c_str());
        return;
      }
      // A named object alone, as kubectl prints it; a list otherwise.
      if (PrintStructured(*f,
                          !name->empty() && items.size() == 1 ? items[0] : Json{{"items", items}}))
        return;
      if (items.empty()) {
        std::fprintf(stderr, "No %s found.\n", plural.c_str());
        return;
      }
      if (jobs) {
        PrintJobs(*f, items);
      } else if (k == "nodes" || k == "node") {
        std::vector<std::vector<std::string>> rows;
        for (const auto& n : items) {
          int64_t gpus = n.value("gpus", int64_t{0});
          std::vector<std::string> r2 = {
              S(n, "name"),
              NodeStatus(n),
              S(n, "pool"),
              GpuShape(n),
              FormatMilli(n.value("gpuMilliInUse", int64_t{0})) + "/" + std::to_string(gpus),
              Age(n.value("lastHeartbeat", int64_t{0}))};
          if (f->output == "wide") {
            r2.push_back(S(n, "cpu"));
            r2.push_back(S(n, "memory"));
            r2.push_back(S(n, "epoch"));
          }
          rows.push_back(r2);
        }
        std::vector<std::string> h = {"NAME", "STATUS",        "POOL",
                                      "GPUS", "GPU-ALLOCATED", "HEARTBEAT"};
        if (f->output == "wide") h.insert(h.end(), {"CPU", "MEMORY", "EPOCH"});
        Table(h, rows);
      } else if (k == "queues" || k == "queue") {
        std::vector<std::vector<std::string>> rows;
        // A limit names only what it caps: "0" of a resource is no cap on it.
        auto limit = [](const Json& q, const char* resource) {
          const std::string v = q.contains("limit") ? S(q["limit"], resource) : "0";
          return v == "0" || v == "0B" ? std::string("<none>") : v;
        };
        const bool wide = f->output == "wide";
        for (const auto& q : items) {
          std::vector<std::string> r = {S(q, "name"),
                                        S(q, "parent", "<none>"),
                                        S(q, "weight"),
                                        S(q["guarantee"], "nvidia.com/gpu"),
                                        limit(q, "nvidia.com/gpu"),
                                        FormatMilli(q.value("gpuMilliInUse", int64_t{0})),
                                        S(q, "pendingJobs"),
                                        S(q, "runningJobs")};
          if (wide)
            r.insert(r.end(), {limit(q, "cpu"), limit(q, "memory"),
                               q.value("reclaimable", true) ? "true" : "false",
                               q.value("borrowing", true) ? "true" : "false"});
          rows.push_back(r);
        }
        // GPU-IN-USE: the queue's and its children's, what its limit caps.
        std::vector<std::string> h = {"NAME",      "PARENT",     "WEIGHT",  "GUARANTEE-GPU",
                                      "LIMIT-GPU", "GPU-IN-USE", "PENDING", "RUNNING"};
        if (wide) h.insert(h.end(), {"LIMIT-CPU", "LIMIT-MEMORY", "RECLAIMABLE", "BORROWING"});
        Table(h, rows);
      } else if (k == "priorityclasses" || k == "pc") {
        std::vector<std::vector<std::string>> rows;
        for (const auto& p : items)
          rows.push_back({S(p, "name"), S(p, "value"),
                          p.value("globalDefault", false) ? "true" : "false",
                          S(p, "preemptionPolicy")});
        Table({"NAME", "VALUE", "GLOBAL-DEFAULT", "PREEMPTION"}, rows);
      } else if (k == "tokens" || k == "token") {
        std::vector<std::vector<std::string>> rows;
        for (const auto& t : items) {
          std::string queues;
          for (const auto& q : t["queues"])
            queues += (queues.empty() ? "" : ",") + q.get<std::string>();
          rows.push_back(
              {S(t, "name"), S(t, "role"), queues.empty() ? "<none>" : queues, S(t, "origin")});
        }
        Table({"NAME", "ROLE", "QUEUES", "ORIGIN"}, rows);
      } else if (k == "pools") {
        std::vector<std::vector<std::string>> rows;
        for (const auto& p : items)
          rows.push_back(
              {S(p, "name"), S(p, "backend"),
               S(p, "readyNodes") + "/" + S(p, "nodes") +
                   (p.value("downNodes", 0) > 0 ? " (" + S(p, "downNodes") + " down)" : ""),
               S(p, "gpus")});
        Table({"NAME", "BACKEND", "READY", "GPUS"}, rows);
      } else {
        PrintEvents(items, f->output == "wide");
      }
    });
  }

  // describe
  {
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    CLI::App* c = app.add_subcommand(
        "describe",
        "a job or node in detail: spec, pending reason, allocations, events (kubectl describe)");
    c->add_option("kind", *kind, "job | node")
        ->required()
        ->check(CLI::IsMember({"job", "jobs", "node", "nodes"}));
    c->add_option("name", *name, "job or node name")->required();
    AddCommon(c, *f);
    c->callback([f, kind, name] {
      if (!ValidOutput(*f)) return;
      if (kind->starts_with("node")) return DescribeNode(*f, *name);
      auto r = Call(*f, "GET", "/v1/jobs/" + Esc(JobArg(*name)) + "/describe");
      if (!Check(*f, r)) return;
      if (PrintStructured(*f, r.body)) return;
      const Json& j = r.body;
      std::printf("Name:           %s\n", S(j, "name").c_str());
      std::printf("Queue:          %s\n", S(j, "queue").c_str());
      std::printf("Priority:       %s (%s)\n", S(j, "priorityClass", "<none>").c_str(),
                  S(j, "priority").c_str());
      std::printf("Source:         %s\n", S(j, "source").c_str());
      if (j.contains("array"))
        std::printf("Array:          %s (SLURM_ARRAY_JOB_ID %s), index %s (%s jobs in all)%s\n",
                    S(j["array"], "name").c_str(), S(j["array"], "jobId").c_str(),
                    S(j["array"], "index").c_str(), S(j["array"], "count").c_str(),
                    j["array"].value("throttle", 0) > 0
                        ? (", at most " + S(j["array"], "throttle") + " at once").c_str()
                        : "");
      if (j.contains("slurmJobId"))
        std::printf("Slurm job id:   %s (%%j, SLURM_JOB_ID on Tessera's nodes)\n",
                    S(j, "slurmJobId").c_str());
      if (j.contains("timeLimitSeconds"))
        std::printf("Time limit:     %s s, %s\n", S(j, "timeLimitSeconds").c_str(),
                    S(j, "timeLimitFrom") == "firstStart"
                        ? "from the job's first start, through its retries"
                        : "per attempt, from when it first ran");
      std::printf("User:           %s\n", S(j, "user").c_str());
      // Who its tasks run as on Tessera's own nodes (docs/agent.md, "Task identity"), per
      // task group when the groups differ.
      {
        const Json templates = j["spec"].value("templates", Json::array());
        const Json tasks = j["spec"]["job"].value("tasks", Json::array());
        std::vector<std::pair<std::string, std::string>> groups;  // (task group, identity)
        for (size_t g = 0; g < templates.size(); ++g) {
          auto run_as = RunAsFromJson(templates[g].value("securityContext", Json::object()), "");
          std::string text = run_as.ok() ? DescribeRunAs(*run_as) : "";
          if (text.empty())
            text =
                "the agent's choice (the submitter's account with --run-as-submitter, else "
                "the agent's own user)";
          groups.emplace_back(g < tasks.size() ? S(tasks[g], "name") : std::to_string(g), text);
        }
        const bool same = std::all_of(groups.begin(), groups.end(),
                                      [&](const auto& x) { return x.second == groups[0].second; });
        for (size_t i = 0; i < groups.size() && (i == 0 || !same); ++i)
          std::printf("%s%s%s\n", i == 0 ? "Run as:         " : "                ",
                      same ? "" : ("task " + groups[i].first + ": ").c_str(),
                      groups[i].second.c_str());
      }
      std::printf("State:          %s\n", S(j, "state").c_str());
      std::printf("Attempt:        %s", S(j, "attempt").c_str());
      if (j.value("taskRestarts", 0) > 0)
        std::printf(
            " (and %s task restart(s) alone: `tessera logs %s --task N -p` shows the run "
            "before)",
            S(j, "taskRestarts").c_str(), S(j, "name").c_str());
      std::printf("\n");
      // What `las` orders a requeued job by: the runs that ended (the current one is apart).
      // A finished job's runStartedAt is its last run's start, and that run has ended too.
      const std::string state = S(j, "state");
      const bool finished = state == "Succeeded" || state == "Failed" || state == "Cancelled";
      if (j.value("attainedGpuSeconds", int64_t{0}) > 0)
        std::printf(!finished && j.value("runStartedAt", int64_t{-1}) >= 0
                        ? "Earlier runs:   %s GPU-seconds held\n"
                        : "GPU time:       %s GPU-seconds held (runs that ended)\n",
                    S(j, "attainedGpuSeconds").c_str());
      std::printf("Tasks:          %s (gang minimum %s), GPUs %s\n", S(j, "tasks").c_str(),
                  S(j, "minAvailable").c_str(), S(j, "gpus").c_str());
      if (j.value("exclusive", false))
        std::printf("Nodes:          exclusive (no other job on its nodes; charged whole)\n");
      // As sbatch writes them, each with where it stands ("afterok:prep (Waiting)").
      std::string deps;
      for (const auto& d : j.value("dependencies", Json::array()))
        deps += (deps.empty() ? "" : ", ") + S(d, "condition") + ":" + S(d, "job") + " (" +
                S(d, "state") + ")";
      if (!deps.empty()) std::printf("Dependencies:   %s\n", deps.c_str());
      // The job's policy, then any task group's own (Volcano tasks[].policies).
      auto policy = [](const Json& p) {
        std::string text = "onFailure=" + S(p, "onFailure") + " onEviction=" + S(p, "onEviction");
        // Bound to a name: items() of the temporary value() returns would dangle in the loop.
        const Json codes = p.value("onExitCode", Json::object());
        for (const auto& [code, action] : codes.items())
          text += " exitCode " + code + "=" + S(codes, code.c_str());
        if (p.value("completeOnTaskCompleted", false)) text += " TaskCompleted=CompleteJob";
        return text;
      };
      std::printf("Restart policy: %s maxRetries=%s\n", policy(j["restartPolicy"]).c_str(),
                  S(j["restartPolicy"], "maxRetries").c_str());
      const Json groups = j["spec"].value("groupRestartPolicies", Json::array());
      for (size_t g = 0; g < groups.size(); ++g)
        if (!groups[g].is_null())
          std::printf("  task %s: %s\n", S(j["spec"]["job"]["tasks"][g], "name").c_str(),
                      policy(groups[g]).c_str());
      std::printf("Created:        %s ago\n", Age(j.value("createdAt", int64_t{0})).c_str());
      if (j.contains("pendingReason")) {
        // As `get jobs`: one that can never fit says so first, then what it lacks.
        const Json& r = j["pendingReason"];
        const std::string code =
            r.value("infeasible", false) ? "Infeasible (" + S(r, "code") + ")" : S(r, "code");
        std::printf("Pending reason: %s: %s\n", code.c_str(), S(r, "message").c_str());
      }
      if (j.contains("message")) std::printf("Message:        %s\n", S(j, "message").c_str());
      std::printf("Allocations:\n");
      if (j["allocations"].empty()) std::printf("  <none>\n");
      std::vector<std::vector<std::string>> rows;
      for (const auto& a : j["allocations"]) {
        // Who it ran as, as its agent reported (Run as: above is what was asked).
        const Json ran = a.value("runAs", Json::object());
        const std::string user = !ran.contains("uid")     ? "<none>"
                                 : S(ran, "user").empty() ? "uid " + S(ran, "uid")
                                                          : S(ran, "user");
        rows.push_back({"  " + S(a, "id"), S(a, "task"), S(a, "attempt"), S(a["placement"], "node"),
                        DeviceIndices(a["placement"]), user, S(a, "state"), S(a, "message")});
      }
      if (!rows.empty())
        Table({"  ID", "TASK", "ATTEMPT", "NODE", "DEVICES", "USER", "STATE", "MESSAGE"}, rows);
      PrintEventsSection(j["events"]);
    });
  }

  // cordon / uncordon / drain (admin), as kubectl's
  for (const char* op : {"cordon", "uncordon", "drain"}) {
    auto nodes = std::make_shared<std::vector<std::string>>();
    const std::string what = op;
    CLI::App* c = app.add_subcommand(
        what, what == "cordon"     ? "mark nodes unschedulable: no new tasks (admin)"
              : what == "uncordon" ? "mark nodes schedulable again (admin)"
                                   : "cordon nodes and evict their jobs, which restart elsewhere "
                                     "(admin)");
    c->add_option("nodes", *nodes, "node names")->required();
    AddCommon(c, *f, false);
    c->callback([f, nodes, what] {
      for (const auto& n : *nodes) {
        auto r = Call(*f, "POST", "/v1/nodes/" + Esc(n) + "/" + what, "", "application/json");
        if (!Check(*f, r)) continue;
        // As kubectl: a node that already was says so (drain then goes on to evict).
        const bool already = !r.body.value("changed", true);
        std::printf("node/%s %s%s\n", n.c_str(), already ? "already " : "",
                    what == "uncordon" ? "uncordoned" : "cordoned");
        if (what == "drain") std::printf("node/%s drained\n", n.c_str());
        if (what == "drain")
          for (const auto& j : r.body.value("evicted", Json::array()))
            std::printf("job/%s evicted\n", j.get<std::string>().c_str());
      }
    });
  }

  // cancel
  {
    auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* c = app.add_subcommand("cancel", "cancel jobs (SIGTERM, grace period, SIGKILL)");
    c->add_option("names", *names, "job names (NAME or job/NAME)")->required();
    AddCommon(c, *f, false);
    c->callback([f, names] {
      for (const auto& n : *names) {
        auto r = Call(*f, "POST", "/v1/jobs/" + Esc(JobArg(n)) + "/cancel");
        if (!Check(*f, r)) continue;
        // A job array's name cancels every unfinished job of it: one line each.
        const Json items = r.body.contains("items") ? r.body["items"] : Json::array({r.body});
        for (const auto& j : items)
          std::printf("job/%s %s\n", S(j, "name").c_str(),
                      S(j, "state") == "Cancelled" ? "cancelled" : "cancelling");
      }
    });
  }

  // hold / release (scontrol hold / release): a held job stays pending, never placed
  for (const char* what : {"hold", "release"}) {
    auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* c = app.add_subcommand(
        what, std::string(what) == "hold"
                  ? "hold pending jobs: not scheduled until released (scontrol hold)"
                  : "release held jobs: scheduled again (scontrol release)");
    c->add_option("names", *names, "job names (NAME or job/NAME)")->required();
    AddCommon(c, *f, false);
    c->callback([f, names, what] {
      for (const auto& n : *names) {
        auto r = Call(*f, "POST", "/v1/jobs/" + Esc(JobArg(n)) + "/" + what);
        if (!Check(*f, r)) continue;
        // A job array's name holds or releases its jobs: one line each.
        const Json items = r.body.contains("items") ? r.body["items"] : Json::array({r.body});
        for (const auto& j : items)
          std::printf("job/%s %s\n", S(j, "name").c_str(),
                      std::string(what) == "hold" ? "held" : "released");
      }
    });
  }

  // scale (kubectl scale): a Deployment's replicas. `NAME`, `deployment/NAME` (also
  // `deploy/`, `deployment.apps/`) or `deployment NAME`, as kubectl takes them.
  {
    auto names = std::make_shared<std::vector<std::string>>();
    auto replicas = std::make_shared<int64_t>(-1);
    CLI::App* c = app.add_subcommand(
        "scale",
        "set a Deployment's replicas (kubectl scale): fewer stop the highest-numbered ones");
    c->add_option("names", *names, "Deployment names (NAME or deployment/NAME)")->required();
    c->add_option("--replicas", *replicas, "the replicas it should have (0 stops them all)")
        ->required()
        ->check(CLI::Range(0, 1000000));
    AddCommon(c, *f, false);
    c->callback([f, names, replicas] {
      auto deployment = [](const std::string& kind) {
        return kind == "deployment" || kind == "deployments" || kind == "deploy" ||
               kind == "deployment.apps";
      };
      std::vector<std::string> jobs;
      // `scale deployment NAME...`: the kind first, as kubectl takes it.
      const bool kind_first = names->size() > 1 && deployment(names->front());
      for (size_t i = kind_first ? 1 : 0; i < names->size(); ++i) {
        const std::string& n = (*names)[i];
        const size_t slash = n.find('/');
        if (slash == std::string::npos) {
          jobs.push_back(n);
        } else if (deployment(n.substr(0, slash)) && slash + 1 < n.size()) {
          jobs.push_back(n.substr(slash + 1));
        } else {
          std::fprintf(stderr, "error: \"%s\": only Deployments scale (NAME or deployment/NAME)\n",
                       n.c_str());
          SetExitCode(2);
          return;
        }
      }
      for (const std::string& n : jobs) {
        auto r = Call(*f, "POST", "/v1/jobs/" + Esc(n) + "/scale",
                      Json{{"replicas", *replicas}}.dump(), "application/json");
        if (!Check(*f, r)) continue;
        std::printf("deployment.apps/%s scaled\n", S(r.body, "name").c_str());
      }
    });
  }

  // delete: queues, priority classes, tokens (admin); jobs: a finished one is removed (its
  // name is free again), an unfinished one is cancelled
  {
    auto kind = std::make_shared<std::string>();
    auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* c = app.add_subcommand(
        "delete",
        "delete finished jobs (an unfinished one is cancelled), or NotReady nodes, queues, "
        "priority classes, tokens (admin)");
    c->add_option("kind", *kind, "job | node | queue | priorityclass | token")
        ->required()
        ->check(CLI::IsMember({"job", "jobs", "node", "nodes", "queue", "queues", "priorityclass",
                               "priorityclasses", "pc", "token", "tokens"}));
    c->add_option("names", *names, "names")->required();
    AddCommon(c, *f, false);
    c->callback([f, kind, names] {
      const std::string k = kind->starts_with("queue")   ? "queue"
                            : kind->starts_with("token") ? "token"
                            : kind->starts_with("job")   ? "job"
                            : kind->starts_with("node")  ? "node"
                                                         : "priorityclass";
      const std::string path = k == "queue"   ? "/v1/queues/"
                               : k == "token" ? "/v1/tokens/"
                               : k == "job"   ? "/v1/jobs/"
                               : k == "node"  ? "/v1/nodes/"
                                              : "/v1/priorityclasses/";
      for (const auto& given : *names) {
        // kubectl's KIND/NAME (`get jobs -o name | xargs tessera delete job`).
        const std::string n = k == "job" ? JobArg(given) : given;
        auto r = Call(*f, "DELETE", path + Esc(n));
        if (!Check(*f, r)) continue;
        // The job the name or number resolved to (an array's id: its first element).
        const std::string shown = k == "job" && !S(r.body, "name").empty() ? S(r.body, "name") : n;
        if (k == "job" && !r.body.value("deleted", false))
          std::printf("job/%s %s (delete it again to remove it once it has ended)\n", shown.c_str(),
                      S(r.body, "state") == "Cancelled" ? "cancelled" : "cancelling");
        else
          std::printf("%s/%s deleted\n", k.c_str(), shown.c_str());
      }
    });
  }

  // events
  {
    auto job = std::make_shared<std::string>();
    auto after = std::make_shared<int64_t>(0);
    auto limit = std::make_shared<int>(500);
    CLI::App* c = app.add_subcommand("events", "events, oldest first (like kubectl get events)");
    auto object = std::make_shared<std::string>();
    auto type = std::make_shared<std::string>();
    c->add_option("--job", *job, "only this job's events");
    c->add_option("--for", *object, "only this object's events: node/NAME or job/NAME");
    c->add_option("--type,--types", *type, "only events of this type (Normal, Warning)")
        ->transform(CLI::IsMember({"Normal", "Warning"}, CLI::ignore_case));
    c->add_option("--after", *after, "only events after this sequence number");
    c->add_option("--limit", *limit, "at most this many")
        ->capture_default_str()
        ->check(CLI::Range(1, 10000));  // the server's bounds, said before asking it
    AddCommon(c, *f);
    c->callback([f, job, object, type, after, limit] {
      if (!ValidOutput(*f)) return;
      auto r =
          Call(*f, "GET",
               "/v1/events?job=" + Esc(*job) + "&object=" + Esc(*object) + "&type=" + Esc(*type) +
                   "&after=" + std::to_string(*after) + "&limit=" + std::to_string(*limit));
      if (!Check(*f, r)) return;
      if (!PrintStructured(*f, r.body)) {
        if (r.body["items"].empty())
          std::fprintf(stderr, "No events found.\n");
        else
          PrintEvents(r.body["items"], f->output == "wide");
      }
      // A full page is the oldest --limit events: say where the rest begin (on stderr, so
      // structured output stays parseable).
      if (r.body["items"].size() == static_cast<size_t>(*limit) && r.body.contains("next"))
        std::fprintf(stderr,
                     "(the oldest %d shown; more may follow: --after %lld; the newest: `tessera "
                     "get events --limit N`)\n",
                     *limit, static_cast<long long>(r.body["next"].get<int64_t>()));
    });
  }

  // token create
  {
    auto name = std::make_shared<std::string>();
    auto role = std::make_shared<std::string>("member");
    auto queues = std::make_shared<std::vector<std::string>>();
    auto nodes = std::make_shared<std::string>();
    CLI::App* t = app.add_subcommand("token", "manage API tokens (admin)");
    CLI::App* c =
        t->add_subcommand("create", "create a token; it is printed once and stored hashed");
    t->require_subcommand(1);
    c->add_option("--name", *name, "who the token is for")->required();
    c->add_option("--role", *role, "admin | member | agent")->capture_default_str();
    c->add_option("--queues", *queues, "member: queues it may use")->delimiter(',');
    c->add_option("--nodes", *nodes,
                  "agent: the only nodes it may register and speak for, a hostlist "
                  "(gpu-[01-16]); default any");
    AddCommon(c, *f);
    c->callback([f, name, role, queues, nodes] {
      Json body = {{"name", *name}, {"role", *role}, {"queues", *queues}};
      if (!nodes->empty()) body["nodes"] = *nodes;
      auto r = Call(*f, "POST", "/v1/tokens", body.dump(), "application/json");
      if (!Check(*f, r)) return;
      if (PrintStructured(*f, r.body)) return;
      std::printf("%s\n", S(r.body, "token").c_str());
    });
  }

  // logs: registered here unless the agent's command file already did.
  bool has_logs = true;
  try {
    app.get_subcommand("logs");
  } catch (const CLI::OptionNotFound&) {
    has_logs = false;
  }
  if (!has_logs) {
    auto job = std::make_shared<std::string>();
    auto task = std::make_shared<int>(0);
    auto stream = std::make_shared<std::string>("stdout");
    auto follow = std::make_shared<bool>(false);
    CLI::App* c = app.add_subcommand(
        "logs", "a task's output (from its node agent, or the file its Slurm job wrote)");
    c->add_option("job", *job, "job name")->required();
    c->add_option("--task", *task, "task index")->capture_default_str();
    c->add_option("--stream", *stream, "stdout | stderr")
        ->capture_default_str()
        ->check(CLI::IsMember({"stdout", "stderr"}));
    c->add_flag("-f,--follow", *follow,
                "keep printing new output until the task ends (waits for its placement)");
    auto previous = std::make_shared<bool>(false);
    auto pinned = std::make_shared<std::string>();
    c->add_flag("-p,--previous", *previous,
                "the task's run before its latest (a restart or retry), as kubectl logs -p");
    c->add_option("--allocation", *pinned,
                  "one run of the task: an allocation id of `tessera describe job`")
        ->excludes("--previous");
    AddCommon(c, *f, false);
    c->callback([f, job, task, stream, follow, previous, pinned] {
      *job = JobArg(*job);
      std::string base =
          "/v1/jobs/" + Esc(*job) + "/logs?task=" + std::to_string(*task) + "&stream=" + *stream;
      if (*previous) {
        // The task's runs are its allocations, oldest first: the one before the latest.
        auto d = Call(*f, "GET", "/v1/jobs/" + Esc(*job) + "/describe");
        if (!Check(*f, d)) return;
        std::vector<std::string> runs;
        for (const auto& a : d.body.value("allocations", Json::array()))
          if (a.value("task", -1) == *task) runs.push_back(a.value("id", ""));
        if (runs.size() < 2) {
          std::fprintf(stderr, "error: task %d of job %s has no previous run\n", *task,
                       job->c_str());
          SetExitCode(1);
          return;
        }
        *pinned = runs[runs.size() - 2];
      }
      if (!pinned->empty()) base += "&allocation=" + Esc(*pinned);
      if (!*follow) {
        auto r = Call(*f, "GET", base);
        if (!Check(*f, r)) return;
        std::cout << r.raw;
        // An empty stdout of a task that wrote to stderr (a failure, usually): point there.
        if (r.raw.empty() && *stream == "stdout") {
          auto e = Call(*f, "GET", base.substr(0, base.rfind("&stream=")) + "&stream=stderr");
          if (e.reached && e.status == 200 && !e.raw.empty())
            std::fprintf(stderr,
                         "(no stdout; stderr has %zu bytes: tessera logs %s --stream stderr)\n",
                         e.raw.size(), job->c_str());
        }
        return;
      }
      // Long polls (docs/api.md): each answer carries the bytes after `offset`, the next
      // offset, and whether the task has ended. The allocation is pinned after the first
      // answer so that a restarted task's new log is not mixed into this one. A read is
      // safe to repeat: while the server does not answer (a restart) it is asked again, for
      // up to kServerAwaySeconds.
      constexpr int kServerAwaySeconds = 120;
      int64_t offset = 0;
      std::string allocation;  // (pinned in `base` already when given)
      for (;;) {
        const std::string path = base + "&follow=true&offset=" + std::to_string(offset) +
                                 (allocation.empty() ? "" : "&allocation=" + Esc(allocation));
        auto r = Call(*f, "GET", path);
        const auto away_since = std::chrono::steady_clock::now();
        // (A certificate refused is refused again: not retried.)
        for (bool told = false; !r.reached && !r.tls_error && !r.bad_flag &&
                                std::chrono::steady_clock::now() - away_since <
                                    std::chrono::seconds(kServerAwaySeconds);) {
          if (!told)
            std::fprintf(stderr,
                         "tessera logs: no answer from the server at %s (%s); retrying for up "
                         "to %d s\n",
                         ServerUrl(*f).c_str(), r.error.c_str(), kServerAwaySeconds);
          told = true;
          std::this_thread::sleep_for(std::chrono::seconds(1));
          r = Call(*f, "GET", path);
        }
        if (!Check(*f, r)) return;
        std::cout << r.raw << std::flush;
        // The reader went away (`| head`): SIGPIPE, ignored for https:// (tls_flags.h), does
        // not end us, so the failed write must.
        if (!std::cout) return;
        auto header = [&](const char* k) {
          auto it = r.headers.find(k);
          return it == r.headers.end() ? std::string() : it->second;
        };
        std::string next = header("X-Next-Offset");
        offset = next.empty() ? offset + static_cast<int64_t>(r.raw.size())
                              : std::strtoll(next.c_str(), nullptr, 10);
        if (allocation.empty()) allocation = header("X-Tessera-Allocation");
        if (header("X-Tessera-Task-Ended") != "true") {
          // A busy server answers at once rather than wait (its threads are few): ask later.
          if (r.raw.empty() && !header("Retry-After").empty())
            std::this_thread::sleep_for(std::chrono::seconds(1));
          continue;
        }
        if (allocation.empty()) {  // it ended (cancelled, deleted) before any placement
          std::fprintf(stderr, "error: job %s task %d ended without being placed: no output\n",
                       job->c_str(), *task);
          SetExitCode(1);
        }
        return;
      }
    });
  }

  // bench-submit
  {
    auto b = std::make_shared<BenchFlags>();
    CLI::App* c = app.add_subcommand(
        "bench-submit",
        "benchmark durable submissions/s and latency (in-process server unless --server is given)");
    c->add_option("--clients", b->clients, "concurrent clients")->capture_default_str();
    c->add_option("--jobs", b->jobs, "jobs in total")->capture_default_str();
    c->add_flag("--json", b->json, "print JSON");
    c->add_flag("--yaml", b->yaml_body, "send YAML bodies instead of JSON");
    c->add_flag("--no-fsync", b->no_fsync, "in-process server with synchronous=NORMAL");
    c->add_flag("--with-scheduler", b->scheduler, "in-process server also runs scheduling cycles");
    c->add_option("--data-dir", b->data_dir, "in-process server's data dir (kept afterwards)");
    AddCommon(c, *f, false);
    c->callback([f, b] {
      if (b->clients < 1 || b->jobs < 1) {
        std::fprintf(stderr, "error: --clients and --jobs must be >= 1\n");
        SetExitCode(2);
        return;
      }
      RunBench(*f, *b);
    });
  }
}

}  // namespace tessera::cli
