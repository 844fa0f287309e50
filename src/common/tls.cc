#include "common/tls.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

// Without it httplib.h declares no SSLServer, and an https:// client is silently invalid.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#error \
    "cpp-httplib without CPPHTTPLIB_OPENSSL_SUPPORT: link PkgConfig::HTTPLIB, whose Cflags define it"
#endif

namespace tessera {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// This thread's newest OpenSSL error in words ("" when none); the queue is emptied.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : "";
}

// A server starts unattended: an encrypted key fails instead of prompting on a terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

// Whether the server this thread last shook hands with asked for a client certificate when
// we had none. Under TLS 1.3 it refuses us only after the handshake, and the request then
// fails reading or writing, as if the server had gone away: this tells the two apart.
thread_local bool client_certificate_asked = false;

int NoClientCertificate(SSL*, X509**, EVP_PKEY**) {
  client_certificate_asked = true;
  return 0;  // the handshake goes on without one
}

StatusOr<std::unique_ptr<FILE, FileCloser>> OpenPem(const std::string& flag,
                                                    const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "r"));
  if (!f) return InvalidArgument(flag + " " + path + ": cannot read: " + std::strerror(errno));
  return f;
}

using X509Ptr = std::unique_ptr<X509, X509Free>;

// Every PEM certificate in `path`, in order: at least one, or an error naming `flag` and it.
StatusOr<std::vector<X509Ptr>> ReadCertificates(const std::string& flag, const std::string& path) {
  auto f = OpenPem(flag, path);
  if (!f.ok()) return f.status();
  std::vector<X509Ptr> certs;
  while (X509* c = PEM_read_X509(f->get(), nullptr, NoPassphrase, nullptr)) certs.emplace_back(c);
  if (certs.empty())
    return InvalidArgument(flag + " " + path + ": no PEM certificate in it (" + OpenSslReason() +
                           ")");
  ERR_clear_error();  // the end of the file
  return certs;
}

// A certificate, the intermediate CAs after it in its file, and its private key.
struct KeyPair {
  X509Ptr cert;
  std::vector<X509Ptr> chain_certs;
  STACK_OF(X509) * chain = sk_X509_new_null();  // views of chain_certs, for SSL_use_cert_and_key
  std::unique_ptr<EVP_PKEY, KeyFree> key;
  KeyPair() = default;
  KeyPair(const KeyPair&) = delete;
  KeyPair& operator=(const KeyPair&) = delete;
  ~KeyPair() { sk_X509_free(chain); }
};

// A certificate and its own key, unencrypted; `what` says what needs both.
StatusOr<std::shared_ptr<const KeyPair>> LoadKeyPair(const std::string& cert_flag,
                                                     const std::string& cert_file,
                                                     const std::string& key_flag,
                                                     const std::string& key_file,
                                                     const std::string& what) {
  if (cert_file.empty() || key_file.empty())
    return InvalidArgument(cert_flag + " and " + key_flag + ": " + what +
                           " needs both, the certificate and its key");
  auto certs = ReadCertificates(cert_flag, cert_file);
  if (!certs.ok()) return certs.status();
  auto pair = std::make_shared<KeyPair>();
  pair->cert = std::move(certs->front());
  for (size_t i = 1; i < certs->size(); ++i) {
    sk_X509_push(pair->chain, (*certs)[i].get());
    pair->chain_certs.push_back(std::move((*certs)[i]));
  }
  auto f = OpenPem(key_flag, key_file);
  if (!f.ok()) return f.status();
  pair->key.reset(PEM_read_PrivateKey(f->get(), nullptr, NoPassphrase, nullptr));
  if (!pair->key)
    return InvalidArgument(key_flag + " " + key_file + ": no unencrypted PEM private key in it (" +
                           OpenSslReason() + ")");
  if (X509_check_private_key(pair->cert.get(), pair->key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(key_flag + " " + key_file +
                           ": not the private key of the certificate in " + cert_file + " (" +
                           cert_flag + ")");
  }
  return std::shared_ptr<const KeyPair>(std::move(pair));
}

Status CheckCertificateAndKey(const std::string& cert_flag, const std::string& cert_file,
                              const std::string& key_flag, const std::string& key_file,
                              const std::string& what) {
  auto pair = LoadKeyPair(cert_flag, cert_file, key_flag, key_file, what);
  return pair.ok() ? Status::Ok() : pair.status();
}

// The CAs of a PEM file, as a handshake checks a peer against them and names them to it.
struct CaBundle {
  X509_STORE* store = X509_STORE_new();
  STACK_OF(X509_NAME) * names = nullptr;
  CaBundle() = default;
  CaBundle(const CaBundle&) = delete;
  CaBundle& operator=(const CaBundle&) = delete;
  ~CaBundle() {
    X509_STORE_free(store);
    sk_X509_NAME_pop_free(names, X509_NAME_free);
  }
};

StatusOr<std::shared_ptr<const CaBundle>> LoadCaBundle(const std::string& flag,
                                                       const std::string& path) {
  auto certs = ReadCertificates(flag, path);  // names the file when it holds none
  if (!certs.ok()) return certs.status();
  auto ca = std::make_shared<CaBundle>();
  ca->names = SSL_load_client_CA_file(path.c_str());
  if (ca->store == nullptr || ca->names == nullptr ||
      X509_STORE_load_file(ca->store, path.c_str()) != 1)
    return InvalidArgument(flag + " " + path + ": OpenSSL refused it (" + OpenSslReason() + ")");
  return std::shared_ptr<const CaBundle>(std::move(ca));
}

// What tells that a file was renewed without reading it: renewals write new files in place,
// rename new ones over them (certbot) or swap a symlinked directory (Kubernetes secrets),
// and each changes one of these. All zero for a file that cannot be read.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size,
          int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
          int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec};
}

// A value loaded from files and loaded again, at the next handshake, once any of them changed:
// renewed certificates are taken without a restart, by new connections (open ones keep what
// they shook hands with). What does not load (a certificate renewed and its key not yet
// written) is not taken: the previous value stays until the files agree, and stderr says so
// once per change. Thread-safe: handshakes run on the servers' connection threads.
template <typename T>
class Reloading {
 public:
  using Loader = std::function<StatusOr<std::shared_ptr<const T>>()>;
  Reloading(std::vector<std::string> files, Loader load, std::string log_prefix)
      : files_(std::move(files)), load_(std::move(load)), log_prefix_(std::move(log_prefix)) {}

  // Loads the files now (at start): an error names the flag and the file.
  Status Load() {
    std::lock_guard<std::mutex> l(mu_);
    stamps_ = Stamps();
    auto v = load_();
    if (!v.ok()) return v.status();
    current_ = *v;
    return Status::Ok();
  }

  // The value for a handshake starting now; null when nothing ever loaded.
  std::shared_ptr<const T> Current() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<FileStamp> now = Stamps();
    if (now == stamps_) return current_;
    stamps_ = std::move(now);
    auto v = load_();
    if (v.ok()) {
      current_ = *v;
      std::fprintf(stderr, "%s: TLS: loaded the renewed %s\n", log_prefix_.c_str(),
                   Joined().c_str());
    } else {
      std::fprintf(stderr, "%s: TLS: warning: %s changed and do not load; %s until they do: %s\n",
                   log_prefix_.c_str(), Joined().c_str(),
                   current_ ? "the previous ones stay in use" : "none is presented",
                   v.status().ToString().c_str());
    }
    return current_;
  }

 private:
  std::vector<FileStamp> Stamps() const {
    std::vector<FileStamp> s;
    for (const std::string& f : files_) s.push_back(StampOf(f));
    return s;
  }
  std::string Joined() const {
    std::string s;
    for (const std::string& f : files_) s += (s.empty() ? "" : " and ") + f;
    return s;
  }

  const std::vector<std::string> files_;
  const Loader load_;
  const std::string log_prefix_;
  std::mutex mu_;
  std::vector<FileStamp> stamps_;
  std::shared_ptr<const T> current_;
};

}  // namespace

Status CheckCaFile(const std::string& flag, const std::string& path) {
  auto certs = ReadCertificates(flag, path);
  return certs.ok() ? Status::Ok() : certs.status();
}

namespace {

Reloading<KeyPair>::Loader ServerPairLoader(const TlsServerFiles& files) {
  return [files] {
    return LoadKeyPair("--tls-cert-file", files.cert_file, "--tls-key-file", files.key_file,
                       "HTTPS");
  };
}

Reloading<CaBundle>::Loader ClientCaLoader(const TlsServerFiles& files) {
  return [files] { return LoadCaBundle("--tls-client-ca-file", files.client_ca_file); };
}

// What an HTTPS server presents and checks clients against, as its files are now.
struct ServerTls {
  std::unique_ptr<Reloading<KeyPair>> pair;
  std::unique_ptr<Reloading<CaBundle>> client_ca;  // null: no client certificate asked for
};

// OpenSSL's certificate callback, at each handshake before the server's certificate and its
// request for the client's are sent.
int UseCurrentFiles(SSL* ssl, void* arg) {
  ServerTls& tls = *static_cast<ServerTls*>(arg);
  const std::shared_ptr<const KeyPair> pair = tls.pair->Current();
  if (!pair || SSL_use_cert_and_key(ssl, pair->cert.get(), pair->key.get(), pair->chain, 1) != 1)
    return 0;
  if (!tls.client_ca) return 1;
  const std::shared_ptr<const CaBundle> ca = tls.client_ca->Current();
  if (!ca || SSL_set1_verify_cert_store(ssl, ca->store) != 1) return 0;
  // Names the CAs to clients, so that one holding several certificates picks the right one.
  SSL_set_client_CA_list(ssl, SSL_dup_CA_list(ca->names));
  return 1;
}

// Held before httplib::SSLServer is constructed: its constructor sets up the context, whose
// callback points here.
struct ServerTlsHolder {
  ServerTls tls;
};

class HttpsServer : private ServerTlsHolder, public httplib::SSLServer {
 public:
  explicit HttpsServer(ServerTls files)
      : ServerTlsHolder{std::move(files)}, httplib::SSLServer([tls = &tls](SSL_CTX& ctx) {
          // Our own set-up rather than httplib's: TLS 1.2 at least, no passphrase prompt, and
          // the files read again when they change.
          SSL_CTX_set_default_passwd_cb(&ctx, NoPassphrase);
          if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return false;
          SSL_CTX_set_cert_cb(&ctx, UseCurrentFiles, tls);
          if (tls->client_ca)
            SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
          return true;
        }) {}
};

}  // namespace

Status CheckTlsServerFiles(const TlsServerFiles& files) {
  auto pair = ServerPairLoader(files)();
  if (!pair.ok()) return pair.status();
  if (files.client_ca_file.empty()) return Status::Ok();
  auto ca = ClientCaLoader(files)();
  return ca.ok() ? Status::Ok() : ca.status();
}

Status CheckTlsClientFiles(const TlsClientOptions& tls) {
  if (!tls.ca_file.empty()) TESSERA_RETURN_IF_ERROR(CheckCaFile(tls.ca_flag, tls.ca_file));
  if (tls.cert_file.empty() && tls.key_file.empty()) return Status::Ok();
  return CheckCertificateAndKey(tls.cert_flag, tls.cert_file, tls.key_flag, tls.key_file,
                                "a client certificate");
}

StatusOr<std::unique_ptr<httplib::Server>> NewHttpServer(const TlsServerFiles& files) {
  if (!files.enabled()) return std::make_unique<httplib::Server>();
  ServerTls tls;
  tls.pair = std::make_unique<Reloading<KeyPair>>(
      std::vector<std::string>{files.cert_file, files.key_file}, ServerPairLoader(files),
      "tessera");
  TESSERA_RETURN_IF_ERROR(tls.pair->Load());
  if (!files.client_ca_file.empty()) {
    tls.client_ca = std::make_unique<Reloading<CaBundle>>(
        std::vector<std::string>{files.client_ca_file}, ClientCaLoader(files), "tessera");
    TESSERA_RETURN_IF_ERROR(tls.client_ca->Load());
  }
  auto server = std::make_unique<HttpsServer>(std::move(tls));
  if (!server->is_valid())
    return InvalidArgument("--tls-cert-file " + files.cert_file + ", --tls-key-file " +
                           files.key_file + ": OpenSSL refused them (" + OpenSslReason() + ")");
  return std::unique_ptr<httplib::Server>(std::move(server));
}

namespace {

// The client certificates of this process, one per pair of files, kept for its lifetime:
// clients made for one request (the CLI) and clients kept for months (an agent's, the etcd
// store's) alike present the files as they are at each handshake.
Reloading<KeyPair>& ClientCertificate(const TlsClientOptions& tls) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<Reloading<KeyPair>>> pairs;
  std::lock_guard<std::mutex> l(mu);
  auto& pair = pairs[{tls.cert_file, tls.key_file}];
  if (!pair) {
    pair = std::make_unique<Reloading<KeyPair>>(
        std::vector<std::string>{tls.cert_file, tls.key_file},
        [tls] {
          return LoadKeyPair(tls.cert_flag, tls.cert_file, tls.key_flag, tls.key_file,
                             "a client certificate");
        },
        "tessera");
    // (Checked by CheckTlsClientFiles; one that fails here is not sent, and a server that
    // wants it says so.)
    (void)pair->Load();
  }
  return *pair;
}

// OpenSSL's certificate callback on a client, when a server asks for a certificate.
int PresentClientCertificate(SSL* ssl, void* arg) {
  const std::shared_ptr<const KeyPair> pair = static_cast<Reloading<KeyPair>*>(arg)->Current();
  if (pair && SSL_use_cert_and_key(ssl, pair->cert.get(), pair->key.get(), pair->chain, 1) != 1)
    ERR_clear_error();
  return 1;  // with or without one: the server decides
}

}  // namespace

void ResetTlsDiagnostics() {
  client_certificate_asked = false;
  ERR_clear_error();
}

void ApplyTls(httplib::Client& client, const TlsClientOptions& tls) {
  // What IsTlsError reads is about this client's request, not an earlier one.
  ResetTlsDiagnostics();
  SSL_CTX* ctx = client.ssl_context();
  if (ctx == nullptr) return;  // http://
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (tls.insecure_skip_verify)
    client.enable_server_certificate_verification(false);
  else if (!tls.ca_file.empty())
    client.set_ca_cert_path(tls.ca_file);
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    SSL_CTX_set_client_cert_cb(ctx, NoClientCertificate);
    return;
  }
  SSL_CTX_set_cert_cb(ctx, PresentClientCertificate, &ClientCertificate(tls));
}

namespace {

// A request that failed after its TLS handshake for a TLS reason: the server refused our
// client certificate, or wanted one we did not have (it says so in an alert, TLS 1.3).
bool RefusedAfterHandshake(httplib::Error error) {
  if (error != httplib::Error::Read && error != httplib::Error::Write &&
      error != httplib::Error::SSLConnection)
    return false;
  return client_certificate_asked || (error != httplib::Error::SSLConnection &&
                                      ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_SSL);
}

}  // namespace

bool IsTlsError(httplib::Error error) {
  return RefusedAfterHandshake(error) || error == httplib::Error::SSLConnection ||
         error == httplib::Error::SSLLoadingCerts || error == httplib::Error::SSLServerVerification;
}

std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const std::string& url, const TlsClientOptions& tls) {
  const std::string trusted = tls.ca_file.empty()
                                  ? "this system's CAs"
                                  : "the CA in " + tls.ca_file + " (" + tls.ca_flag + ")";
  if (client_certificate_asked && RefusedAfterHandshake(error)) {
    ERR_clear_error();
    return "TLS: " + url + " wants a client certificate, and none was given (" + tls.cert_flag +
           " and " + tls.key_flag + (tls.cert_env_hint.empty() ? "" : ", or " + tls.cert_env_hint) +
           ")";
  }
  switch (error) {
    case httplib::Error::SSLLoadingCerts:
      return "TLS: cannot load " + trusted + ": " + OpenSslReason();
    case httplib::Error::SSLServerVerification: {
      const long v = client.get_openssl_verify_result();
      if (v != X509_V_OK)
        return "TLS: the certificate of " + url +
               " is not trusted: " + X509_verify_cert_error_string(v) + " (checked against " +
               trusted +
               (tls.ca_file.empty() ? "; give the CA that signed it with " + tls.ca_flag + " FILE"
                                    : "") +
               ")";
      return "TLS: the certificate of " + url +
             " does not name that host (its subjectAltName must list the host name or IP "
             "address the URL names)";
    }
    case httplib::Error::SSLConnection: {
      const std::string why = OpenSslReason();
      return "TLS: handshake with " + url + " failed" + (why.empty() ? "" : " (" + why + ")") +
             ": is it serving HTTPS on that port?" +
             (tls.cert_file.empty()
                  ? ""
                  : " Does it take the client certificate in " + tls.cert_file + "?");
    }
    default: {
      if (!RefusedAfterHandshake(error)) return httplib::to_string(error);
      return "TLS: " + url + " ended the connection (" + OpenSslReason() + ")" +
             (tls.cert_file.empty()
                  ? ""
                  : ": does it take the client certificate in " + tls.cert_file + "?");
    }
  }
}

}  // namespace tessera
