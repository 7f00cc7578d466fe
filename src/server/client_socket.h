#pragma once
// The socket a request came on, found without the HTTP library's help, and whether its client is still
// there. cpp-httplib 0.11 (Debian 12) gives a route neither its socket nor a way to ask whether the client
// left; http_server.cpp finds the socket with request_socket and polls it with peer_connected.
#include <string>

namespace ds::server {

// The connection's addresses as the HTTP library reports them (numeric host strings, any form inet_pton
// reads: "127.0.0.1", "::1", "::ffff:127.0.0.1", "[::1]", "fe80::1%eth0"; empty when unknown).
struct ConnectionEnds {
  std::string local_addr;
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

// This process's connected TCP socket with those ends, found among /proc/self/fd. Ports must match; the
// addresses are compared as binary addresses (an IPv4 address equals its v4-mapped IPv6 form, so a
// dual-stack listener on "::" is served too) and only where they parse. -1 when no socket or more than one
// matches (then it logs once per process, at debug level: DS_DEBUG set in the environment).
int request_socket(const ConnectionEnds& ends);

// False once the client closed or reset the connection: the socket reports a hang-up or error, or reads as
// end-of-file (peeked, so pipelined bytes of a next request stay for the HTTP library). Writes nothing.
// True for fd -1 (no socket found): a reply is never cancelled on a guess, it runs to its end.
bool peer_connected(int fd);

}  // namespace ds::server
