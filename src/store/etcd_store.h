// EtcdStore: the Store over etcd v3 (its JSON gateway), for several server replicas of which
// one leads and writes while the others wait (docs/store.md).
//
// Layout: every Tessera key K is the etcd key <prefix>data/K; the election key (default
// <prefix>leader) holds the leader's id, attached to its lease. Revisions are etcd's: a
// transaction's revision is etcd's header revision, a key's mod_revision is etcd's.
//
// Leadership: OpenEtcdStore returns only once this store leads (it waits, as a standby,
// while another holds the election key). A keepalive thread renews the lease every TTL/3;
// when the lease is lost (etcd says it is gone, or no renewal got through for a whole TTL)
// every later transaction fails and on_lost_leadership is called once. Every write
// transaction also compares the election key's create revision with the one this store
// created (fencing): a deposed leader never writes, however late its thread runs. Closing
// the store revokes the lease, so a standby takes over at once.
//
// Thread-safe. Transactions run one at a time on a writer thread, in the order queued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tls.h"
#include "store/store.h"

namespace tessera::store {

// Client TLS options whose errors name the server's flags for etcd (--etcd-cacert,
// --etcd-cert, --etcd-key), files unset.
TlsClientOptions EtcdTlsClientOptions();

struct EtcdOptions {
  // Client URLs, "http://host:port" or "https://host:port"; tried in order, the next on
  // failure.
  std::vector<std::string> endpoints;
  // For https:// endpoints: etcd's CA (else the system's) and a client certificate for an etcd
  // run with --client-cert-auth. Its files are checked when the store opens.
  TlsClientOptions tls = EtcdTlsClientOptions();
  std::string prefix = "/tessera/";
  std::string election_key;  // "" = <prefix>leader
  std::string id;            // this server in the election key; "" = hostname:pid
  int64_t lease_seconds = 10;
  int64_t request_timeout_ms = 5000;
  // etcd's own limits (its --max-txn-ops and --max-request-bytes): a transaction over them
  // is refused here, before it is sent, with ResourceExhausted naming the limit.
  size_t max_txn_ops = 128;
  size_t max_request_bytes = 1536 * 1024;
  // How often a standby looks whether the election key is gone.
  int64_t standby_poll_ms = 200;
  // Called once, from the keepalive thread, when this store stops leading.
  std::function<void(const Status&)> on_lost_leadership;
  // Polled while waiting to lead: true gives up (Open returns Unavailable).
  std::function<bool()> stop_waiting;
};

// "etcd://host:port[,host:port...]" -> http:// endpoints, "etcd+https://..." -> https://
// ones (one scheme for all: no member is reached in clear by mistake). InvalidArgument
// naming the flag's value.
StatusOr<std::vector<std::string>> ParseEtcdUrl(const std::string& url);

class EtcdStore : public Store {
 public:
  // Whether this store still leads, as far as it knows (fencing decides on each write).
  virtual bool Leading() = 0;
  // Test hook: a crash as seen by etcd, without the process dying: the lease is no longer
  // renewed (nor revoked), so it expires after its TTL.
  virtual void StopKeepaliveForTesting() = 0;
};

StatusOr<std::unique_ptr<EtcdStore>> OpenEtcdStore(const EtcdOptions& options);

}  // namespace tessera::store
