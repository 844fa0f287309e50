// TLS flags (docs/security.md): --cacert and --insecure-skip-tls-verify, how the commands that
// call a server over https:// check its certificate (the client commands, the agent); and
// --tls-cert-file, --tls-key-file for those that serve (the server, the agent's logs endpoint).
#pragma once

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/command.h"
#include "common/tls.h"

namespace tessera::cli {

inline void AddTlsClientFlags(CLI::App* c, TlsClientOptions& tls) {
  c->add_option("--cacert", tls.ca_file,
                "PEM CA file to check an https:// server's certificate against (default "
                "$TESSERA_CACERT, else the system's CAs)");
  c->add_option("--client-certificate", tls.cert_file,
                "PEM certificate to present to a server that asks for one (mutual TLS; "
                "default $TESSERA_CLIENT_CERT)");
  c->add_option("--client-key", tls.key_file,
                "the PEM private key of --client-certificate, not encrypted (default "
                "$TESSERA_CLIENT_KEY)");
  c->add_flag("--insecure-skip-tls-verify", tls.insecure_skip_verify,
              "do not check the https:// server's certificate at all: anyone on the way can "
              "read the token and the answers (a first setup only)");
}

// --tls-cert-file and --tls-key-file: `what` then serves HTTPS only.
inline void AddTlsServerFlags(CLI::App* c, TlsServerFiles& files, const std::string& what) {
  c->add_option("--tls-cert-file", files.cert_file,
                "serve " + what +
                    " over HTTPS only, with this PEM certificate (then its chain); needs "
                    "--tls-key-file (docs/security.md)");
  c->add_option("--tls-key-file", files.key_file,
                "the PEM private key of --tls-cert-file, not encrypted");
}

// The flags' options with $TESSERA_CACERT, $TESSERA_CLIENT_CERT and $TESSERA_CLIENT_KEY for
// those not given; a bad file is an error naming it. Says loudly, once per process, that an
// https:// server goes unchecked.
inline StatusOr<TlsClientOptions> ResolveTlsClientFlags(const TlsClientOptions& flags,
                                                        const std::string& url,
                                                        const char* program) {
  TlsClientOptions tls = flags;
  if (tls.ca_file.empty())
    if (const char* e = std::getenv("TESSERA_CACERT"); e != nullptr && *e != '\0') {
      tls.ca_file = e;
      tls.ca_flag = "$TESSERA_CACERT";
    }
  for (auto [file, env] : {std::pair{&tls.cert_file, "TESSERA_CLIENT_CERT"},
                           std::pair{&tls.key_file, "TESSERA_CLIENT_KEY"}})
    if (const char* e = std::getenv(env); file->empty() && e != nullptr) *file = e;
  if (url.rfind("https://", 0) != 0) {
    // Given on the command line and unused, a flag would read as "this is encrypted".
    for (const auto& [given, name] :
         {std::pair{!flags.ca_file.empty(), "--cacert"},
          std::pair{!flags.cert_file.empty(), "--client-certificate"},
          std::pair{!flags.key_file.empty(), "--client-key"},
          std::pair{flags.insecure_skip_verify, "--insecure-skip-tls-verify"}})
      if (given)
        return InvalidArgument(std::string(name) + ": the server URL " + url +
                               " is not https://, so no TLS is used");
    return tls;
  }
  // OpenSSL writes with write(), not send(MSG_NOSIGNAL): a server that closes the connection
  // first (refusing our certificate, under TLS 1.3 after the handshake) would kill us.
  std::signal(SIGPIPE, SIG_IGN);
  if (tls.insecure_skip_verify) {
    static bool warned = false;  // CLI commands run on one thread
    if (!warned)
      std::fprintf(stderr,
                   "%s: WARNING: --insecure-skip-tls-verify: the certificate of %s is not "
                   "checked; whoever sits between here and there can read the token\n",
                   program, url.c_str());
    warned = true;
  }
  TESSERA_RETURN_IF_ERROR(CheckTlsClientFiles(tls));
  return tls;
}

}  // namespace tessera::cli
