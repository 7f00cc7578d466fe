// request_socket (server/client_socket.h): a request's socket is found by its ends whatever form the HTTP
// library spells the addresses in (IPv4, IPv6, v4-mapped IPv6, bracketed), on IPv4, IPv6 and dual-stack
// listeners; a socket it cannot find is -1, which peer_connected takes for a client still there.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "server/client_socket.h"

namespace ds::server {
namespace {

int port_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port)
                                : ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
}

// A listener on `listen_host`, a client connected to it from `client_host`, and the accepted socket.
struct Connection {
  int listener = -1, client = -1, accepted = -1;
  int server_port = -1, client_port = -1;
  bool ok = false;

  Connection(const std::string& listen_host, const std::string& client_host) {
    sockaddr_storage at{};
    socklen_t at_len = 0;
    if (!address(listen_host, 0, at, at_len)) return;
    listener = socket(at.ss_family, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&at), at_len) != 0 ||
        listen(listener, 4) != 0)
      return;
    socklen_t len = sizeof(at);
    getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len);
    server_port = port_of(at);
    sockaddr_storage to{};
    socklen_t to_len = 0;
    if (!address(client_host, server_port, to, to_len)) return;
    client = socket(to.ss_family, SOCK_STREAM, 0);
    if (client < 0 || connect(client, reinterpret_cast<sockaddr*>(&to), to_len) != 0) return;
    accepted = accept(listener, nullptr, nullptr);
    sockaddr_storage mine{};
    len = sizeof(mine);
    getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len);
    client_port = port_of(mine);
    ok = accepted >= 0;
  }
  ~Connection() {
    for (int fd : {accepted, client, listener})
      if (fd >= 0) close(fd);
  }
  static bool address(const std::string& host, int port, sockaddr_storage& out, socklen_t& len) {
    out = {};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in);
      return true;
    }
    if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in6);
      return true;
    }
    return false;
  }
};

bool has_ipv6_loopback() {
  Connection c("::1", "::1");
  return c.ok;
}

bool dual_stack() {
  std::ifstream v6only("/proc/sys/net/ipv6/bindv6only");
  int only = 0;
  return has_ipv6_loopback() && !(v6only >> only && only != 0);
}

TEST(RequestSocket, FindsAnIpv4PeerInAnySpelling) {
  Connection c("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(c.ok);
  for (const std::string peer :
       {"127.0.0.1", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "0:0:0:0:0:ffff:7f00:1"})
    EXPECT_EQ(request_socket({"127.0.0.1", c.server_port, peer, c.client_port}), c.accepted) << peer;
  EXPECT_EQ(request_socket({"", c.server_port, "", c.client_port}), c.accepted) << "addresses unknown";
  EXPECT_EQ(request_socket({"::ffff:127.0.0.1", c.server_port, "127.0.0.1", c.client_port}), c.accepted);
}

TEST(RequestSocket, FindsAnIpv6Peer) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  Connection c("::1", "::1");
  ASSERT_TRUE(c.ok);
  for (const std::string peer : {"::1", "[::1]", "0:0:0:0:0:0:0:1", "::1%lo"})
    EXPECT_EQ(request_socket({"::1", c.server_port, peer, c.client_port}), c.accepted) << peer;
  EXPECT_EQ(request_socket({"::1", c.server_port, "127.0.0.1", c.client_port}), -1) << "another peer";
}

// A listener on "::" sees an IPv4 client as ::ffff:127.0.0.1; the plain IPv4 spelling finds it too.
TEST(RequestSocket, FindsAnIpv4PeerOfADualStackListener) {
  if (!dual_stack()) GTEST_SKIP() << "no dual-stack IPv6 loopback on this machine";
  Connection c("::", "127.0.0.1");
  ASSERT_TRUE(c.ok);
  for (const std::string peer : {"127.0.0.1", "::ffff:127.0.0.1"})
    for (const std::string local : {"127.0.0.1", "::ffff:127.0.0.1", ""})
      EXPECT_EQ(request_socket({local, c.server_port, peer, c.client_port}), c.accepted)
          << peer << " " << local;
}

// Another peer or port is not found: -1, and then the client counts as there (a reply is never cancelled on a
// guess). A found socket reports its client leaving.
TEST(RequestSocket, NotFoundIsTakenForAClientStillThere) {
  Connection c("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(c.ok);
  // The client's socket (same process) has the mirrored ends: asked for the server's, never it.
  EXPECT_EQ(request_socket({"127.0.0.1", c.client_port, "127.0.0.1", c.server_port}), c.client);
  EXPECT_EQ(request_socket({"127.0.0.1", c.server_port, "127.0.0.2", c.client_port}), -1) << "another peer";
  EXPECT_EQ(request_socket({"127.0.0.1", c.server_port, "127.0.0.1", c.client_port + 1}), -1);
  EXPECT_EQ(request_socket({"127.0.0.1", -1, "127.0.0.1", c.client_port}), -1) << "ports unknown";
  EXPECT_TRUE(peer_connected(-1));
  const int fd = request_socket({"127.0.0.1", c.server_port, "127.0.0.1", c.client_port});
  ASSERT_EQ(fd, c.accepted);
  EXPECT_TRUE(peer_connected(fd));
  close(c.client);
  c.client = -1;
  EXPECT_FALSE(peer_connected(fd));
}

// A socket not found is logged once per process, only with DS_DEBUG set.
TEST(RequestSocket, NotFoundIsLoggedOnceAtDebugLevel) {
  unsetenv("DS_DEBUG");
  testing::internal::CaptureStderr();
  EXPECT_EQ(request_socket({"127.0.0.1", 1, "127.0.0.1", 1}), -1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  setenv("DS_DEBUG", "1", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(request_socket({"127.0.0.1", 1, "127.0.0.1", 1}), -1);
  EXPECT_EQ(request_socket({"127.0.0.1", 2, "127.0.0.1", 2}), -1);
  const std::string log = testing::internal::GetCapturedStderr();
  unsetenv("DS_DEBUG");
  EXPECT_NE(log.find("debug: the socket of a request from 127.0.0.1:1 to 127.0.0.1:1 was not found"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("debug:", 1), std::string::npos) << "logged once: " << log;
}

}  // namespace
}  // namespace ds::server
