#include "server/client_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

namespace ds::server {

namespace {

// An address as IPv6 bytes: IPv4 as its v4-mapped form (::ffff:a.b.c.d), which is what a dual-stack
// listener's getpeername reports for an IPv4 client.
using Address = std::array<unsigned char, 16>;

Address mapped(const in_addr& v4) {
  Address a{};
  a[10] = a[11] = 0xff;
  std::memcpy(a.data() + 12, &v4, 4);
  return a;
}

// A numeric host string; brackets ("[::1]") and a zone ("fe80::1%eth0") are allowed. nullopt: unreadable.
std::optional<Address> parse_address(std::string s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (auto zone = s.find('%'); zone != std::string::npos) s.resize(zone);
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) return mapped(v4);
  Address v6{};
  if (inet_pton(AF_INET6, s.c_str(), v6.data()) == 1) return v6;
  return std::nullopt;
}

struct End {
  Address address{};
  int port = -1;
};

std::optional<End> socket_end(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    return End{mapped(in.sin_addr), ntohs(in.sin_port)};
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    End e;
    std::memcpy(e.address.data(), &in6.sin6_addr, 16);
    e.port = ntohs(in6.sin6_port);
    return e;
  }
  return std::nullopt;
}

void debug_once(const ConnectionEnds& ends, const char* why) {
  const char* debug = std::getenv("DS_DEBUG");
  if (debug == nullptr || *debug == '\0') return;
  static std::atomic<bool> logged{false};
  if (logged.exchange(true)) return;
  std::fprintf(stderr,
               "debug: the socket of a request from %s:%d to %s:%d was not found (%s): a whole reply whose "
               "client leaves runs to its end (logged once)\n",
               ends.remote_addr.c_str(), ends.remote_port, ends.local_addr.c_str(), ends.local_port, why);
}

}  // namespace

// A TCP connection is unique by its two ends. The server's side is told from a client's in the same process
// by which end is local. The true socket is always among the descriptors whose ports match (the route runs
// while the HTTP library holds the connection open, so the descriptor stays this socket until it returns);
// the addresses, where they parse, only tell it from other connections that share the ports.
int request_socket(const ConnectionEnds& ends) {
  if (ends.local_port <= 0 || ends.remote_port <= 0) {
    debug_once(ends, "the connection's ports are unknown");
    return -1;
  }
  const std::optional<Address> local = parse_address(ends.local_addr);
  const std::optional<Address> remote = parse_address(ends.remote_addr);
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) {
    debug_once(ends, "/proc/self/fd cannot be read");
    return -1;
  }
  std::vector<int> found;
  while (dirent* d = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(d->d_name, &end, 10);
    if (end == d->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    const int s = static_cast<int>(fd);
    int type = 0;
    socklen_t type_len = sizeof(type);
    if (getsockopt(s, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage mine{}, peer{};
    socklen_t mine_len = sizeof(mine), peer_len = sizeof(peer);
    if (getsockname(s, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
        getpeername(s, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;
    const std::optional<End> a = socket_end(mine), b = socket_end(peer);
    if (!a || !b || a->port != ends.local_port || b->port != ends.remote_port) continue;
    if ((local && a->address != *local) || (remote && b->address != *remote)) continue;
    found.push_back(s);
  }
  closedir(dir);
  if (found.size() == 1) return found[0];
  debug_once(ends, found.empty() ? "no socket has these ends" : "more than one socket has these ends");
  return -1;
}

bool peer_connected(int fd) {
  if (fd < 0) return true;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return false;
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

}  // namespace ds::server
