// For tests of TLS: a throwaway CA, a certificate it signed for 127.0.0.1 and localhost, and
// a second, unrelated CA; made at test time with the openssl command (scripts/deps.d/tls.list).
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
  std::string other_ca_cert;  // a CA that signed nothing here
  std::string other_key;      // its key: the private key of another certificate

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
    if (CaptureCommand("command -v openssl >/dev/null").first != 0)
      return "no openssl command on PATH: install openssl (scripts/deps.d/tls.list)";
    std::ofstream(d + "ext.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                    "extendedKeyUsage=serverAuth\n";
    // P-256 keys: made in milliseconds.
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string cmd =
        "set -e; cd '" + dir + "'; openssl req -x509" + key +
        " -keyout ca.key -out ca.pem -days 2 -subj /CN=tessera-test-ca; openssl req" + key +
        " -keyout server.key -out server.csr -subj /CN=localhost; openssl x509 -req -in "
        "server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile "
        "ext.cnf; openssl req -x509" +
        key + " -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=another-test-ca 2>&1";
    auto [rc, out] = CaptureCommand("(" + cmd + ") 2>&1");
    return rc == 0 ? "" : "openssl failed: " + out;
  }
};

}  // namespace tessera
