#include "server/request_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace siesta::server {
namespace {

void numeric_address(const sockaddr_storage& address, socklen_t length, std::string& ip,
                     int& port) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host),
                    service, sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(service);
}

}  // namespace

void read_connection_addresses(int fd, ConnectionAddresses& addresses) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    numeric_address(address, length, addresses.remote_ip, addresses.remote_port);
  }
  length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    numeric_address(address, length, addresses.local_ip, addresses.local_port);
  }
}

bool RequestStream::wait_writable() const {
  pollfd entry{fd_, POLLOUT, 0};
  for (;;) {
    const int ready = ::poll(&entry, 1, static_cast<int>(write_stall_.count()));
    if (ready < 0 && errno == EINTR) continue;
    return ready > 0 && (entry.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }
}

bool RequestStream::is_writable() const { return !write_failed_ && wait_writable(); }

ssize_t RequestStream::read(char* ptr, size_t size) {
  const size_t n = std::min(size, request_.size() - position_);
  std::memcpy(ptr, request_.data() + position_, n);
  position_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t RequestStream::write(const char* ptr, size_t size) {
  if (write_failed_ || (watch_ != nullptr && watch_->garbled())) {
    write_failed_ = true;
    return -1;
  }
  if (size == 0) return 0;
  if (watch_ != nullptr) watch_->answer_started();
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::send(fd_, ptr + written, size - written, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable()) continue;
    write_failed_ = true;
    return -1;
  }
  return static_cast<ssize_t>(size);
}

void RequestStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = addresses_.remote_ip;
  port = addresses_.remote_port;
}

void RequestStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = addresses_.local_ip;
  port = addresses_.local_port;
}

}  // namespace siesta::server
