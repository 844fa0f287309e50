// Socket options for a listening HTTP server. cpp-httplib's defaults add SO_REUSEPORT, which
// lets a second process bind the same port and take half of the connections (a second
// server started by mistake would answer heartbeats with 401s); SO_REUSEADDR alone still
// allows a restart while old connections sit in TIME_WAIT.
#pragma once

#include <sys/socket.h>

namespace tessera {

inline void ReuseAddressOnly(int sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

}  // namespace tessera
