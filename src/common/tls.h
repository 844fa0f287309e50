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

// The files an HTTPS server presents: all empty for plain HTTP.
struct TlsServerFiles {
  std::string cert_file;  // PEM: the certificate, then any intermediate CAs
  std::string key_file;   // PEM: its private key, not encrypted
  // PEM CAs: every client must present a certificate one of them signed (mutual TLS);
  // "" = no client certificate asked for.
  std::string client_ca_file;
  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty();
  }
};

// How a client checks the server behind an https:// URL (nothing for http://).
struct TlsClientOptions {
  std::string ca_file;  // PEM CA certificates to trust; "" = the system's
  // No check at all: anyone on the path can read the bearer token. For a first setup only.
  bool insecure_skip_verify = false;
  std::string ca_flag = "--cacert";  // what errors tell the user to set
  // A certificate and key to present to a server that asks for one (mutual TLS); "" = none.
  std::string cert_file;
  std::string key_file;
  // What errors name for them (the server's etcd client has its own flags).
  std::string cert_flag = "--client-certificate";
  std::string key_flag = "--client-key";
  std::string cert_env_hint = "$TESSERA_CLIENT_CERT and $TESSERA_CLIENT_KEY";  // "" = none
};

// The files readable PEM, the key unencrypted and the certificate's own; errors name the
// flags (--tls-cert-file, --tls-key-file, --tls-client-ca-file) and the file at fault.
Status CheckTlsServerFiles(const TlsServerFiles& files);

// The same for a client's files: its CA file and its certificate and key, when given
// (tls.ca_flag, tls.cert_flag, tls.key_flag).
Status CheckTlsClientFiles(const TlsClientOptions& tls);

// At least one PEM certificate in `path`; errors name `flag` and the file.
Status CheckCaFile(const std::string& flag, const std::string& path);

// httplib::SSLServer (HTTPS only) when files are given, checked first; else httplib::Server.
StatusOr<std::unique_ptr<httplib::Server>> NewHttpServer(const TlsServerFiles& files);

// Applies `tls` to a client of an https:// URL (nothing for http://). Call it on the thread
// that makes the request, before it: IsTlsError and DescribeHttpError read what that
// thread's handshake left.
void ApplyTls(httplib::Client& client, const TlsClientOptions& tls);

// What IsTlsError and DescribeHttpError read, cleared for the next request of this thread
// (ApplyTls does it too): a client kept for many requests calls it before each.
void ResetTlsDiagnostics();

// Why a request by `client` to `url` got no answer, in words. For a TLS failure: which URL,
// and why (the certificate's verify error, a name mismatch, a handshake refused) with what to
// set; otherwise cpp-httplib's name of the error.
std::string DescribeHttpError(const httplib::Client& client, httplib::Error error,
                              const std::string& url, const TlsClientOptions& tls);

// Whether `error` happened in TLS: the handshake, the certificate check, or the server
// refusing this client's certificate (or its lack of one) right after. The request was not
// carried out. Call it before DescribeHttpError, which empties OpenSSL's error queue.
bool IsTlsError(httplib::Error error);

}  // namespace tessera
