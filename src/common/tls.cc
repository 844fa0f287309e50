#include "common/tls.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

StatusOr<std::unique_ptr<X509, X509Free>> ReadCertificate(const std::string& flag,
                                                          const std::string& path) {
  auto f = OpenPem(flag, path);
  if (!f.ok()) return f.status();
  std::unique_ptr<X509, X509Free> cert(PEM_read_X509(f->get(), nullptr, NoPassphrase, nullptr));
  if (!cert)
    return InvalidArgument(flag + " " + path + ": no PEM certificate in it (" + OpenSslReason() +
                           ")");
  return cert;
}

// A certificate and its own key, unencrypted; `what` says what needs both.
Status CheckCertificateAndKey(const std::string& cert_flag, const std::string& cert_file,
                              const std::string& key_flag, const std::string& key_file,
                              const std::string& what) {
  if (cert_file.empty() || key_file.empty())
    return InvalidArgument(cert_flag + " and " + key_flag + ": " + what +
                           " needs both, the certificate and its key");
  auto cert = ReadCertificate(cert_flag, cert_file);
  if (!cert.ok()) return cert.status();
  auto f = OpenPem(key_flag, key_file);
  if (!f.ok()) return f.status();
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_PrivateKey(f->get(), nullptr, NoPassphrase, nullptr));
  if (!key)
    return InvalidArgument(key_flag + " " + key_file + ": no unencrypted PEM private key in it (" +
                           OpenSslReason() + ")");
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(key_flag + " " + key_file +
                           ": not the private key of the certificate in " + cert_file + " (" +
                           cert_flag + ")");
  }
  return Status::Ok();
}

}  // namespace

Status CheckCaFile(const std::string& flag, const std::string& path) {
  auto cert = ReadCertificate(flag, path);
  return cert.ok() ? Status::Ok() : cert.status();
}

Status CheckTlsServerFiles(const TlsServerFiles& files) {
  TESSERA_RETURN_IF_ERROR(CheckCertificateAndKey("--tls-cert-file", files.cert_file,
                                                 "--tls-key-file", files.key_file, "HTTPS"));
  if (files.client_ca_file.empty()) return Status::Ok();
  return CheckCaFile("--tls-client-ca-file", files.client_ca_file);
}

Status CheckTlsClientFiles(const TlsClientOptions& tls) {
  if (!tls.ca_file.empty()) TESSERA_RETURN_IF_ERROR(CheckCaFile(tls.ca_flag, tls.ca_file));
  if (tls.cert_file.empty() && tls.key_file.empty()) return Status::Ok();
  return CheckCertificateAndKey(tls.cert_flag, tls.cert_file, tls.key_flag, tls.key_file,
                                "a client certificate");
}

StatusOr<std::unique_ptr<httplib::Server>> NewHttpServer(const TlsServerFiles& files) {
  if (!files.enabled()) return std::make_unique<httplib::Server>();
  TESSERA_RETURN_IF_ERROR(CheckTlsServerFiles(files));
  // Our own context set-up rather than httplib's: TLS 1.2 at least, and no passphrase prompt.
  auto server = std::make_unique<httplib::SSLServer>([&files](SSL_CTX& ctx) {
    SSL_CTX_set_default_passwd_cb(&ctx, NoPassphrase);
    if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(&ctx, files.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(&ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(&ctx) != 1)
      return false;
    if (files.client_ca_file.empty()) return true;
    if (SSL_CTX_load_verify_locations(&ctx, files.client_ca_file.c_str(), nullptr) != 1)
      return false;
    // Names the CAs to clients, so that one holding several certificates picks the right one.
    SSL_CTX_set_client_CA_list(&ctx, SSL_load_client_CA_file(files.client_ca_file.c_str()));
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return true;
  });
  if (!server->is_valid())
    return InvalidArgument("--tls-cert-file " + files.cert_file + ", --tls-key-file " +
                           files.key_file + ": OpenSSL refused them (" + OpenSslReason() + ")");
  return std::unique_ptr<httplib::Server>(std::move(server));
}

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
  // (Checked by CheckTlsClientFiles; one that fails here is not sent, and a server that
  // wants it says so.)
  SSL_CTX_set_default_passwd_cb(ctx, NoPassphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    ERR_clear_error();
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
