#include "server/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace siesta::server {
namespace {

std::string numeric_address(const sockaddr_storage& address, socklen_t length, int* port) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host),
                    service, sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {};
  }
  *port = std::atoi(service);
  return host;
}

bool socket_matches(int fd, const httplib::Request& request) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int port = -1;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6) return false;
  if (numeric_address(address, length, &port) != request.local_addr || port != request.local_port) {
    return false;
  }
  length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  return numeric_address(address, length, &port) == request.remote_addr &&
         port == request.remote_port;
}

}  // namespace

// The descriptor of `request`'s connection, or -1 when none matches (then only a failed
// write reveals a departed client).
int find_connection(const httplib::Request& request) {
  if (request.remote_port <= 0 || request.local_port <= 0) return -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat info {};
    if (::fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    if (socket_matches(static_cast<int>(fd), request)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// True when the peer closed or reset the connection. Bytes waiting to be read (a pipelined
// next request) are left where they are.
bool connection_gone(int fd) {
  if (fd < 0) return false;
  pollfd entry{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) <= 0) return false;
  if ((entry.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) != 0) return true;
  if ((entry.revents & POLLIN) == 0) return false;
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace siesta::server
