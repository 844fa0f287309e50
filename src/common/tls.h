// TLS for Tessera's HTTP servers and clients (cpp-httplib built with OpenSSL; docs/security.md).
//
// A server given a certificate and key serves HTTPS only, never plain HTTP beside it; its files
// are checked before it starts, so that a wrong path or a key of another certificate is an
// error naming the file, not a server that fails every handshake. A client talking to an
// https:// URL checks the server's certificate against the system's CAs or a CA file, and says
// in words which host failed the check and why. Stateless functions; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace httplib {
class Client;
class Server;
enum class Error;
}  // namespace httplib

namespace tessera {

// The files an HTTPS server presents: both empty for plain HTTP.
struct TlsServerFiles {
  std::string cert_file;  // PEM: the certificate, then any intermediate CAs
  std::string key_file;   // PEM: its private key, not encrypted
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// How a client checks the server behind an https:// URL (nothing for http://).
struct TlsClientOptions {
  std::string ca_file;  // PEM CA certificates to trust; "" = the system's
  // No check at all: anyone on the path can read the bearer token. For a first setup only.
  bool insecure_skip_verify = false;
  std::string ca_flag = "--cacert";  // what errors tell the user to set
};

// Both files readable PEM, the key unencrypted and the certificate's own; errors name the
// flags (--tls-cert-file, --tls-key-file) and the file at fault.
Status CheckTlsServerFiles(const TlsServerFiles& files);

// At least one PEM certificate in `path`; errors name `flag` and the file.
Status CheckCaFile(const std::string& flag, const std::string& path);

// httplib::SSLServer (HTTPS only) when files are given, checked first; else httplib::Server.
StatusOr<std::unique_ptr<httplib::Server>> NewHttpServer(const TlsServerFiles& files);

// Applies `tls` to a client of an https:// URL; a no-op for http://.
void ApplyTls(httplib::Client& client, const TlsClientOptions& tls);

// Why a request by `client` to `url` got no answer, in words. For a TLS failure: which URL,
// and why (the certificate's verify error, a name mismatch, a handshake refused) with what to
// set; otherwise cpp-httplib's name of the error.
std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const std::string& url, const TlsClientOptions& tls);

// Whether `error` happened in TLS (before any request byte was sent).
bool IsTlsError(httplib::Error error);

}  // namespace tessera
