// EtcdStore over etcd v3's JSON gateway (grpc-gateway): POST /v3/kv/range, /v3/kv/txn,
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke. Keys and values travel base64;
// int64 fields come back as JSON strings, and fields at their default value (false, 0, an
// empty list) are left out, so a missing field reads as false/0/empty.
#include "store/etcd_store.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "store/txn_internal.h"

namespace tessera::store {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

StatusOr<std::string> Unbase64(const std::string& in) {
  std::string out(3 * (in.size() / 4) + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) return Internal("etcd: a key or value is not valid base64");
  // EVP_DecodeBlock decodes whole quanta: the padding comes out as zero bytes.
  size_t pad = 0;
  for (size_t i = in.size(); i > 0 && in[i - 1] == '=' && pad < 2; --i) ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// int64 fields arrive as strings ("revision":"7"), or are absent when 0.
int64_t Int(const Json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return it->is_number() ? it->get<int64_t>() : 0;
}

// The end of the range of keys starting with `p` (etcd's prefix range_end).
std::string PrefixEnd(std::string p) {
  while (!p.empty()) {
    if (static_cast<unsigned char>(p.back()) < 0xff) {
      p.back() = static_cast<char>(static_cast<unsigned char>(p.back()) + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::string DefaultId() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

// What went wrong, in words (cpp-httplib's own names are one word: "Connection", "Read"),
// `waited` after sending to `endpoint`.
std::string Failure(httplib::Error e, const std::string& endpoint, Clock::duration waited,
                    const TlsClientOptions& tls) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connecting timed out";
    case httplib::Error::Read:
    case httplib::Error::Write:
      // An etcd serving HTTPS closes a plain HTTP connection at once, without a word.
      if (endpoint.rfind("http://", 0) == 0 && waited < std::chrono::milliseconds(500))
        return "the connection was closed without a reply: if this etcd serves HTTPS (its "
               "--cert-file), use --store etcd+https://...";
      // Under TLS 1.3 etcd refuses a client certificate after the handshake, by closing the
      // connection: whether OpenSSL has read its alert by then is a matter of timing.
      if (endpoint.rfind("https://", 0) == 0 && !tls.cert_file.empty())
        return std::string(e == httplib::Error::Read ? "no reply" : "cannot send the request") +
               " (connection closed): with TLS, etcd closes it when it refuses the client "
               "certificate in " +
               tls.cert_file + " (" + tls.cert_flag +
               "): is it signed by a CA in etcd's --trusted-ca-file?";
      return e == httplib::Error::Read ? "no reply (timed out or connection closed)"
                                       : "cannot send the request";
    default:
      return httplib::to_string(e);
  }
}

// One connection to etcd, moving to the next endpoint when one cannot be reached. Calls are
// serialized (one request at a time per Gateway).
class Gateway {
 public:
  Gateway(std::vector<std::string> endpoints, TlsClientOptions tls, int64_t timeout_ms)
      : endpoints_(std::move(endpoints)), tls_(std::move(tls)), timeout_ms_(timeout_ms) {}

  // POSTs `body` to `path`; the decoded reply, or Unavailable when no endpoint answered and
  // the error etcd gave (its gRPC code mapped) otherwise. `first_line`: the reply is a
  // stream (keepalive): read up to its first newline, then drop the connection.
  StatusOr<Json> Call(const std::string& path, const Json& body, bool first_line = false) {
    std::lock_guard<std::mutex> l(mu_);
    std::string last_error;
    bool last_was_tls = false;
    for (size_t tries = 0; tries < endpoints_.size(); ++tries) {
      const std::string& ep = endpoints_[current_];
      if (!client_) {
        client_ = std::make_unique<httplib::Client>(ep);
        client_->set_connection_timeout(std::chrono::milliseconds(timeout_ms_));
        client_->set_read_timeout(std::chrono::milliseconds(timeout_ms_));
        client_->set_write_timeout(std::chrono::milliseconds(timeout_ms_));
        client_->set_keep_alive(true);
        client_->set_tcp_nodelay(true);  // else Nagle and delayed ACKs add 40 ms a request
        ApplyTls(*client_, tls_);        // once per client: it reads the certificate files
      }
      // Before every request: a failed handshake is then described as this one's (tls.h).
      ResetTlsDiagnostics();
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      std::string reply;
      int status = 0;
      req.response_handler = [&status](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        reply.append(data, n);
        return !first_line || reply.find('\n') == std::string::npos;
      };
      const auto sent = Clock::now();
      auto res = client_->send(req);
      // grpc-gateway ends an error reply with an HTTP trailer, which this cpp-httplib cannot
      // parse (a Read error): the status and the body have arrived all the same. (A body cut
      // short does not parse as JSON, and Decode says Unavailable.)
      const bool unanswered = status == 0 || (!res && reply.empty());
      if (unanswered) {  // described before the client goes: TLS reads its verify result
        last_was_tls = IsTlsError(res.error());
        last_error = "etcd " + ep + path + ": " +
                     (last_was_tls ? DescribeHttpError(*client_, res.error(), ep, tls_)
                                   : Failure(res.error(), ep, Clock::now() - sent, tls_));
      }
      if (!res || first_line) client_.reset();  // a cut stream: a new connection next time
      if (unanswered) {
        current_ = (current_ + 1) % endpoints_.size();
        continue;
      }
      if (status == 503 || status == 502) {  // the member has no leader, or is stopping
        last_error = "etcd " + ep + path + ": HTTP " + std::to_string(status) + " " + reply;
        // etcd's gateway dials its own gRPC port presenting etcd's certificate, and with
        // --client-cert-auth that fails unless the certificate is also one for a client.
        // (gRPC's words for a connection it could not make or keep; etcd's own start
        // "etcdserver:".)
        if (ep.rfind("https://", 0) == 0 && (reply.find("transport: ") != std::string::npos ||
                                             reply.find("connection closed") != std::string::npos))
          last_error +=
              " (etcd's JSON gateway cannot reach etcd itself: if etcd runs with "
              "--client-cert-auth, its --cert-file needs extendedKeyUsage clientAuth besides "
              "serverAuth, signed by a CA in its --trusted-ca-file; docs/store.md)";
        client_.reset();
        current_ = (current_ + 1) % endpoints_.size();
        continue;
      }
      if (first_line) reply.resize(std::min(reply.size(), reply.find('\n')));
      return Decode(ep, path, status, reply);
    }
    // A TLS failure is not cured by waiting: it says what to fix instead.
    return Unavailable(last_error +
                       (last_was_tls ? "" : " (no etcd endpoint answered; is etcd running?)"));
  }

  std::string endpoint() {
    std::lock_guard<std::mutex> l(mu_);
    return endpoints_[current_];
  }

 private:
  static StatusOr<Json> Decode(const std::string& ep, const std::string& path, int http,
                               const std::string& text) {
    Json j = Json::parse(text, nullptr, false);
    const std::string where = "etcd " + ep + path;
    if (j.is_discarded())
      return Unavailable(where + ": not JSON (HTTP " + std::to_string(http) + ")");
    if (j.contains("result")) j = j["result"];  // streamed replies
    if (http == 200 && !j.contains("error")) return j;
    // Unary errors: {"error","code","message"}; streamed ones: {"error":{"grpc_code",...}}.
    if (j.contains("error") && j["error"].is_object()) {
      j = j["error"];
      j["code"] = j.value("grpc_code", 0);
    }
    const int64_t code = Int(j, "code");
    std::string msg = "HTTP " + std::to_string(http);
    if (j.contains("message") && j["message"].is_string())
      msg = j["message"];
    else if (j.contains("error") && j["error"].is_string())
      msg = j["error"];
    std::string what = where + ": " + msg;
    switch (code) {  // gRPC codes
      case 3:
        return InvalidArgument(what);
      case 5:
        return NotFound(what);
      case 8:
        return ResourceExhausted(what);
      case 9:
        return FailedPrecondition(what);
      case 4:
      case 10:
      case 14:
        return Unavailable(what);
      default:
        return http >= 500 ? Unavailable(what) : Internal(what);
    }
  }

  std::mutex mu_;
  std::vector<std::string> endpoints_;
  const TlsClientOptions tls_;
  size_t current_ = 0;
  int64_t timeout_ms_;
  std::unique_ptr<httplib::Client> client_;
};

class EtcdStoreImpl final : public EtcdStore {
 public:
  explicit EtcdStoreImpl(const EtcdOptions& o)
      : options_(o),
        data_(o.prefix + "data/"),
        leader_key_(o.election_key.empty() ? o.prefix + "leader" : o.election_key),
        id_(o.id.empty() ? DefaultId() : o.id),
        writes_(o.endpoints, o.tls, o.request_timeout_ms),
        reads_(o.endpoints, o.tls, o.request_timeout_ms),
        lease_(o.endpoints, o.tls, o.request_timeout_ms) {}

  ~EtcdStoreImpl() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    StopKeepalive();
    // Gone at once rather than after a TTL: a standby takes over now.
    if (lease_id_ != 0 && !lost_.load())
      (void)lease_.Call("/v3/lease/revoke", {{"ID", std::to_string(lease_id_)}});
  }

  Status Open() {
    if (options_.endpoints.empty()) return InvalidArgument("etcd store: no endpoints");
    // A bad file is named now, not as a handshake failing on every request.
    TESSERA_RETURN_IF_ERROR(CheckTlsClientFiles(options_.tls));
    if (options_.lease_seconds < 1) return InvalidArgument("etcd store: lease TTL must be >= 1 s");
    std::string announced_holder;
    for (;;) {
      if (options_.stop_waiting && options_.stop_waiting())
        return Unavailable("etcd store: stopped while waiting to lead (" + leader_key_ + ")");
      auto held = reads_.Call("/v3/kv/range", {{"key", Base64(leader_key_)}});
      if (!held.ok()) return held.status().WithContext("etcd store: reading the election key");
      NoteHeader(*held);
      if (held->contains("kvs") && !(*held)["kvs"].empty()) {
        auto holder = Unbase64((*held)["kvs"][0].value("value", ""));
        std::string h = holder.ok() ? *holder : "?";
        if (h != announced_holder) {
          std::fprintf(stderr, "tessera store: waiting to lead: held by %s (%s, etcd %s)\n",
                       h.c_str(), leader_key_.c_str(), reads_.endpoint().c_str());
          announced_holder = h;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.standby_poll_ms));
        continue;
      }
      auto granted =
          lease_.Call("/v3/lease/grant", {{"TTL", std::to_string(options_.lease_seconds)}});
      if (!granted.ok()) return granted.status().WithContext("etcd store: granting a lease");
      const int64_t id = Int(*granted, "ID");
      Json txn = {{"compare",
                   {{{"target", "CREATE"},
                     {"key", Base64(leader_key_)},
                     {"result", "EQUAL"},
                     {"create_revision", "0"}}}},
                  {"success",
                   {{{"request_put",
                      {{"key", Base64(leader_key_)},
                       {"value", Base64(id_)},
                       {"lease", std::to_string(id)}}}}}}};
      auto won = writes_.Call("/v3/kv/txn", txn);
      if (!won.ok()) {
        (void)lease_.Call("/v3/lease/revoke", {{"ID", std::to_string(id)}});  // else it lasts a TTL
        return won.status().WithContext("etcd store: taking the election key");
      }
      NoteHeader(*won);
      if (!won->value("succeeded", false)) {  // another got there first
        (void)lease_.Call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
        continue;
      }
      lease_id_ = id;
      create_revision_ = Int((*won)["header"], "revision");
      break;
    }
    std::fprintf(stderr, "tessera store: leading as %s (%s, lease %lld s, etcd %s)\n", id_.c_str(),
                 leader_key_.c_str(), static_cast<long long>(options_.lease_seconds),
                 writes_.endpoint().c_str());
    keepalive_ = std::thread([this] { KeepaliveLoop(); });
    writer_ = std::thread([this] { WriterLoop(); });
    return Status::Ok();
  }

  bool Leading() override { return !lost_.load(); }

  void StopKeepaliveForTesting() override { StopKeepalive(); }

  std::future<StatusOr<TxnResult>> TxnAsync(std::vector<Compare> compares,
                                            std::vector<Op> ops) override {
    return QueueForWriter(mu_, cv_, stopping_, queue_, std::move(compares), std::move(ops), [] {});
  }

  StatusOr<std::optional<KeyValue>> Get(const std::string& key) override {
    auto r = reads_.Call("/v3/kv/range", {{"key", Base64(data_ + key)}});
    if (!r.ok()) return r.status().WithContext("get " + key);
    NoteHeader(*r);
    if (!r->contains("kvs") || (*r)["kvs"].empty()) return std::optional<KeyValue>();
    auto kv = ToKeyValue((*r)["kvs"][0]);
    if (!kv.ok()) return kv.status();
    return std::optional<KeyValue>(std::move(*kv));
  }

  StatusOr<std::vector<KeyValue>> Range(const std::string& prefix, const std::string& start_after,
                                        size_t limit) override {
    std::string from = data_ + prefix;
    if (!start_after.empty()) from = std::max(from, data_ + start_after + std::string(1, '\0'));
    Json body = {{"key", Base64(from)}, {"range_end", Base64(PrefixEnd(data_ + prefix))}};
    if (limit > 0) body["limit"] = std::to_string(limit);
    auto r = reads_.Call("/v3/kv/range", body);
    if (!r.ok()) return r.status().WithContext("range " + prefix);
    NoteHeader(*r);
    std::vector<KeyValue> out;
    if (r->contains("kvs"))
      for (const Json& j : (*r)["kvs"]) {
        auto kv = ToKeyValue(j);
        if (!kv.ok()) return kv.status();
        out.push_back(std::move(*kv));
      }
    return out;
  }

  int64_t Revision() override { return revision_.load(); }
  // Each transaction also re-puts the election key (one etcd operation).
  size_t MaxWritesPerTxn() override {
    return options_.max_txn_ops > 1 ? options_.max_txn_ops - 1 : 1;
  }

  Stats GetStats() override {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }

 private:
  void NoteHeader(const Json& reply) {
    if (!reply.contains("header")) return;
    const int64_t rev = Int(reply["header"], "revision");
    int64_t seen = revision_.load();
    while (rev > seen && !revision_.compare_exchange_weak(seen, rev)) {
    }
  }

  StatusOr<KeyValue> ToKeyValue(const Json& j) {
    auto k = Unbase64(j.value("key", ""));
    auto v = Unbase64(j.value("value", ""));
    if (!k.ok()) return k.status();
    if (!v.ok()) return v.status();
    return KeyValue{k->substr(data_.size()), std::move(*v), Int(j, "mod_revision")};
  }

  void LoseLeadership(const Status& why) {
    if (lost_.exchange(true)) return;
    std::fprintf(stderr, "tessera store: lost leadership of %s: %s\n", leader_key_.c_str(),
                 why.ToString().c_str());
    if (options_.on_lost_leadership) options_.on_lost_leadership(why);
  }

  Status NotLeading() const {
    return FailedPrecondition("etcd store: not the leader any more (" + leader_key_ +
                              " is no longer held by " + id_ + "); nothing was written");
  }

  void StopKeepalive() {
    {
      std::lock_guard<std::mutex> l(ka_mu_);
      ka_stopping_ = true;
    }
    ka_cv_.notify_all();
    if (keepalive_.joinable()) keepalive_.join();
  }

  // Renews the lease every TTL/3; a renewal that fails is retried every half second until a
  // whole TTL has passed since the last one that got through.
  void KeepaliveLoop() {
    const auto period = std::chrono::milliseconds(options_.lease_seconds * 1000 / 3);
    const auto ttl = std::chrono::seconds(options_.lease_seconds);
    auto renewed = Clock::now();
    auto wait = period;
    for (;;) {
      {
        std::unique_lock<std::mutex> l(ka_mu_);
        if (ka_cv_.wait_for(l, wait, [&] { return ka_stopping_; })) return;
      }
      auto r = lease_.Call("/v3/lease/keepalive", {{"ID", std::to_string(lease_id_)}}, true);
      if (r.ok() && Int(*r, "TTL") > 0) {
        renewed = Clock::now();
        wait = period;
        continue;
      }
      if (r.ok()) {  // TTL 0 or absent: etcd no longer knows the lease
        LoseLeadership(FailedPrecondition("etcd says lease " + std::to_string(lease_id_) +
                                          " is gone (expired or revoked)"));
        return;
      }
      if (Clock::now() - renewed >= ttl) {
        LoseLeadership(Unavailable("the lease could not be renewed for " +
                                   std::to_string(options_.lease_seconds) +
                                   " s: " + r.status().message()));
        return;
      }
      wait = std::chrono::milliseconds(500);
    }
  }

  // One Tessera transaction as one etcd txn: the caller's compares plus the fencing compare;
  // on success its ops plus a put of the election key (so that every committed transaction
  // bumps the revision, as in the SQLite store); on failure a read of every compared key, to
  // say which compare failed.
  StatusOr<TxnResult> Apply(const PendingTxn& p) {
    if (lost_.load()) return NotLeading();
    // etcd refuses a txn naming a key twice; as applied in order, the last op on a key wins.
    std::map<std::string, size_t> last;
    for (size_t i = 0; i < p.ops.size(); ++i) last[p.ops[i].key] = i;
    size_t bytes = 64 + leader_key_.size() + id_.size();
    Json success = Json::array(), compare = Json::array(), failure = Json::array();
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      if (last[op.key] != i) continue;
      bytes += data_.size() + op.key.size() + op.value.size() + 16;
      if (op.kind == Op::Kind::kPut)
        success.push_back(
            {{"request_put", {{"key", Base64(data_ + op.key)}, {"value", Base64(op.value)}}}});
      else
        success.push_back({{"request_delete_range", {{"key", Base64(data_ + op.key)}}}});
    }
    success.push_back({{"request_put",
                        {{"key", Base64(leader_key_)},
                         {"value", Base64(id_)},
                         {"lease", std::to_string(lease_id_)}}}});
    for (const Compare& c : p.compares) {
      bytes += 2 * (data_.size() + c.key.size()) + 32;
      if (c.mod_revision == 0)
        compare.push_back({{"target", "CREATE"},
                           {"key", Base64(data_ + c.key)},
                           {"result", "EQUAL"},
                           {"create_revision", "0"}});
      else
        compare.push_back({{"target", "MOD"},
                           {"key", Base64(data_ + c.key)},
                           {"result", "EQUAL"},
                           {"mod_revision", std::to_string(c.mod_revision)}});
      failure.push_back({{"request_range", {{"key", Base64(data_ + c.key)}}}});
    }
    compare.push_back({{"target", "CREATE"},
                       {"key", Base64(leader_key_)},
                       {"result", "EQUAL"},
                       {"create_revision", std::to_string(create_revision_)}});
    failure.push_back({{"request_range", {{"key", Base64(leader_key_)}}}});
    const size_t n = std::max(success.size(), compare.size());
    if (n > options_.max_txn_ops)
      return ResourceExhausted(
          "etcd store: a transaction of " + std::to_string(p.ops.size()) + " writes and " +
          std::to_string(p.compares.size()) + " compares needs " + std::to_string(n) +
          " etcd txn operations, over etcd's limit of " + std::to_string(options_.max_txn_ops) +
          " (etcd --max-txn-ops; tell the server with --etcd-max-txn-ops); nothing was written");
    if (bytes > options_.max_request_bytes)
      return ResourceExhausted("etcd store: a transaction of about " + std::to_string(bytes) +
                               " bytes is over etcd's request limit of " +
                               std::to_string(options_.max_request_bytes) +
                               " bytes (etcd --max-request-bytes; tell the server with "
                               "--etcd-max-request-bytes); nothing was written");
    auto r = writes_.Call("/v3/kv/txn",
                          {{"compare", compare}, {"success", success}, {"failure", failure}});
    {
      std::lock_guard<std::mutex> l(mu_);
      stats_.commits += 1;
    }
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kUnavailable)
        return Unavailable(r.status().message() +
                           " (the transaction may or may not have been applied)");
      const std::string& m = r.status().message();
      if (m.find("too many operations") != std::string::npos ||
          m.find("request is too large") != std::string::npos)  // etcd's limits are lower
        return ResourceExhausted(
            m + " (the store was told --etcd-max-txn-ops " + std::to_string(options_.max_txn_ops) +
            ", --etcd-max-request-bytes " + std::to_string(options_.max_request_bytes) +
            ": more than this etcd allows); nothing was written");
      return r.status();
    }
    NoteHeader(*r);
    if (r->value("succeeded", false)) return TxnResult{Int((*r)["header"], "revision")};
    // Which compare failed: the replies are in the order of the compares, then the election key.
    const Json& replies = r->contains("responses") ? (*r)["responses"] : Json::array();
    auto mod_of = [&](size_t i, int64_t* create) -> int64_t {
      if (i >= replies.size()) return -1;
      const Json& rr =
          replies[i].contains("response_range") ? replies[i]["response_range"] : Json();
      if (!rr.is_object() || !rr.contains("kvs") || rr["kvs"].empty()) return 0;
      if (create) *create = Int(rr["kvs"][0], "create_revision");
      return Int(rr["kvs"][0], "mod_revision");
    };
    int64_t leader_create = 0;
    (void)mod_of(p.compares.size(), &leader_create);
    if (leader_create != create_revision_) {
      Status why = NotLeading();
      LoseLeadership(why);
      return why;
    }
    for (size_t i = 0; i < p.compares.size(); ++i) {
      const Compare& c = p.compares[i];
      const int64_t have = mod_of(i, nullptr);
      if (have == c.mod_revision) continue;
      return CompareFailed(c, have);
    }
    return FailedPrecondition(
        "etcd store: a compare failed but every key read back matches "
        "(changed in between); nothing was written");
  }

  void WriterLoop() {
    for (;;) {
      std::unique_ptr<PendingTxn> p;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything queued is done
        p = std::move(queue_.front());
        queue_.pop_front();
      }
      StatusOr<TxnResult> r = Apply(*p);
      {
        std::lock_guard<std::mutex> l(mu_);
        stats_.transactions += 1;
      }
      p->done.set_value(std::move(r));
    }
  }

  const EtcdOptions options_;
  const std::string data_;        // <prefix>data/
  const std::string leader_key_;  // the election key
  const std::string id_;
  Gateway writes_, reads_, lease_;
  int64_t lease_id_ = 0;
  int64_t create_revision_ = 0;  // of the election key, when this store took it
  std::atomic<int64_t> revision_{0};
  std::atomic<bool> lost_{false};

  std::mutex mu_;  // guards queue_, stats_, stopping_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<PendingTxn>> queue_;
  Stats stats_;
  bool stopping_ = false;
  std::thread writer_;

  std::mutex ka_mu_;  // guards ka_stopping_
  std::condition_variable ka_cv_;
  bool ka_stopping_ = false;
  std::thread keepalive_;
};

}  // namespace

TlsClientOptions EtcdTlsClientOptions() {
  TlsClientOptions tls;
  tls.ca_flag = "--etcd-cacert";
  tls.cert_flag = "--etcd-cert";
  tls.key_flag = "--etcd-key";
  tls.cert_env_hint = "";
  return tls;
}

StatusOr<std::vector<std::string>> ParseEtcdUrl(const std::string& url) {
  std::string rest, scheme;
  for (auto [prefix, endpoint_scheme] :
       {std::pair{"etcd://", "http://"}, std::pair{"etcd+https://", "https://"}})
    if (url.rfind(prefix, 0) == 0) {
      rest = url.substr(std::string(prefix).size());
      scheme = endpoint_scheme;
    }
  if (scheme.empty())
    return InvalidArgument(
        "--store: expected etcd://HOST:PORT[,HOST:PORT...] or etcd+https://HOST:PORT[,...], got "
        "\"" +
        url + "\"");
  std::vector<std::string> endpoints;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string ep =
        rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (ep.empty() || ep.find(':') == std::string::npos || ep.find('/') != std::string::npos)
      return InvalidArgument("--store: bad etcd endpoint \"" + ep + "\" in \"" + url +
                             "\" (expected HOST:PORT)");
    endpoints.push_back(scheme + ep);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return endpoints;
}

StatusOr<std::unique_ptr<EtcdStore>> OpenEtcdStore(const EtcdOptions& options) {
  auto s = std::make_unique<EtcdStoreImpl>(options);
  TESSERA_RETURN_IF_ERROR(s->Open());
  return std::unique_ptr<EtcdStore>(std::move(s));
}

}  // namespace tessera::store
