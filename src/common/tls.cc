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

}  // namespace

Status CheckTlsServerFiles(const TlsServerFiles& files) {
  if (files.cert_file.empty() || files.key_file.empty())
    return InvalidArgument(
        "--tls-cert-file and --tls-key-file: HTTPS needs both, the certificate and its key");
  auto cert = ReadCertificate("--tls-cert-file", files.cert_file);
  if (!cert.ok()) return cert.status();
  auto f = OpenPem("--tls-key-file", files.key_file);
  if (!f.ok()) return f.status();
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_PrivateKey(f->get(), nullptr, NoPassphrase, nullptr));
  if (!key)
    return InvalidArgument("--tls-key-file " + files.key_file +
                           ": no unencrypted PEM private key in it (" + OpenSslReason() + ")");
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("--tls-key-file " + files.key_file +
                           ": not the private key of the certificate in " + files.cert_file +
                           " (--tls-cert-file)");
  }
  return Status::Ok();
}

Status CheckCaFile(const std::string& flag, const std::string& path) {
  auto cert = ReadCertificate(flag, path);
  return cert.ok() ? Status::Ok() : cert.status();
}

StatusOr<std::unique_ptr<httplib::Server>> NewHttpServer(const TlsServerFiles& files) {
  if (!files.enabled()) return std::make_unique<httplib::Server>();
  TESSERA_RETURN_IF_ERROR(CheckTlsServerFiles(files));
  // Our own context set-up rather than httplib's: TLS 1.2 at least, and no passphrase prompt.
  auto server = std::make_unique<httplib::SSLServer>([&files](SSL_CTX& ctx) {
    SSL_CTX_set_default_passwd_cb(&ctx, NoPassphrase);
    return SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) == 1 &&
           SSL_CTX_use_certificate_chain_file(&ctx, files.cert_file.c_str()) == 1 &&
           SSL_CTX_use_PrivateKey_file(&ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
           SSL_CTX_check_private_key(&ctx) == 1;
  });
  if (!server->is_valid())
    return InvalidArgument("--tls-cert-file " + files.cert_file + ", --tls-key-file " +
                           files.key_file + ": OpenSSL refused them (" + OpenSslReason() + ")");
  return std::unique_ptr<httplib::Server>(std::move(server));
}

void ApplyTls(httplib::Client& client, const TlsClientOptions& tls) {
  SSL_CTX* ctx = client.ssl_context();
  if (ctx == nullptr) return;  // http://
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (tls.insecure_skip_verify)
    client.enable_server_certificate_verification(false);
  else if (!tls.ca_file.empty())
    client.set_ca_cert_path(tls.ca_file);
}

bool IsTlsError(httplib::Error error) {
  return error == httplib::Error::SSLConnection || error == httplib::Error::SSLLoadingCerts ||
         error == httplib::Error::SSLServerVerification;
}

std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const std::string& url, const TlsClientOptions& tls) {
  const std::string trusted = tls.ca_file.empty()
                                  ? "this system's CAs"
                                  : "the CA in " + tls.ca_file + " (" + tls.ca_flag + ")";
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
             ": is it serving HTTPS on that port?";
    }
    default:
      return httplib::to_string(error);
  }
}

}  // namespace tessera
