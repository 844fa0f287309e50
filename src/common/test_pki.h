// For tests of TLS: a throwaway CA, a server certificate it signed for 127.0.0.1 and
// localhost, a client certificate it signed, and a second, unrelated CA with a server and a
// client certificate of its own (a renewal from another CA); made at test time with the
// openssl command (scripts/deps.d/tls.list).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "common/capture_command.h"

namespace tessera {

struct TestPki {
  std::string ca_cert;      // the CA that signed server_cert
  std::string server_cert;  // for 127.0.0.1 and localhost (subjectAltName), serverAuth
  std::string server_key;
  std::string client_cert;  // clientAuth, for mutual TLS
  std::string client_key;
  // serverAuth and clientAuth, for 127.0.0.1 and localhost: etcd with --client-cert-auth
  // needs one (its JSON gateway dials its own gRPC port presenting its server certificate).
  std::string etcd_cert;
  std::string etcd_key;
  std::string other_ca_cert;  // a second CA, unrelated to the first
  std::string other_key;      // its key: the private key of another certificate
  // What the second CA signed: as server_* and client_*.
  std::string other_server_cert;
  std::string other_server_key;
  std::string other_client_cert;
  std::string other_client_key;

  // Writes the files into `dir` (created); "" on success, else what failed (no openssl
  // command: the caller skips).
  std::string Make(const std::string& dir) {
    std::filesystem::create_directories(dir);
    const std::string d = dir + "/";
    ca_cert = d + "ca.pem";
    server_cert = d + "server.pem";
    server_key = d + "server.key";
    other_ca_cert = d + "other-ca.pem";
    other_key = d + "other-ca.key";
    client_cert = d + "client.pem";
    client_key = d + "client.key";
    etcd_cert = d + "etcd.pem";
    etcd_key = d + "etcd.key";
    other_server_cert = d + "other-server.pem";
    other_server_key = d + "other-server.key";
    other_client_cert = d + "other-client.pem";
    other_client_key = d + "other-client.key";
    if (CaptureCommand("command -v openssl >/dev/null").first != 0)
      return "no openssl command on PATH: install openssl (scripts/deps.d/tls.list)";
    std::ofstream(d + "server.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                       "extendedKeyUsage=serverAuth\n";
    std::ofstream(d + "client.cnf") << "extendedKeyUsage=clientAuth\n";
    std::ofstream(d + "etcd.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                     "extendedKeyUsage=serverAuth,clientAuth\n";
    // P-256 keys: made in milliseconds.
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto self_signed = [&](const std::string& name) {  // a CA: NAME.pem, NAME.key
      return "openssl req -x509" + key + " -keyout " + name + ".key -out " + name +
             ".pem -days 2 -subj /CN=" + name + "; ";
    };
    // NAME.pem, signed by CA.pem, with CNF.cnf's extensions
    auto signed_by = [&](const std::string& ca, const std::string& name, const std::string& cnf) {
      return "openssl req" + key + " -keyout " + name + ".key -out " + name +
             ".csr -subj /CN=" + name + "; openssl x509 -req -in " + name + ".csr -CA " + ca +
             ".pem -CAkey " + ca + ".key -CAcreateserial -days 2 -out " + name + ".pem -extfile " +
             cnf + ".cnf; ";
    };
    auto signed_by_ca = [&](const std::string& name) { return signed_by("ca", name, name); };
    const std::string cmd = "set -e; cd '" + dir + "'; " + self_signed("ca") +
                            signed_by_ca("server") + signed_by_ca("client") + signed_by_ca("etcd") +
                            self_signed("other-ca") +
                            signed_by("other-ca", "other-server", "server") +
                            signed_by("other-ca", "other-client", "client");
    auto [rc, out] = CaptureCommand("(" + cmd + ") 2>&1");
    return rc == 0 ? "" : "openssl failed: " + out;
  }
};

}  // namespace tessera
