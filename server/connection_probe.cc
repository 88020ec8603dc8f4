#include "server/connection_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <string_view>

namespace siesta::server {
namespace {

thread_local ClientWatch* current = nullptr;

constexpr std::string_view kInterimAnswer = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

bool ClientWatch::gone() {
  if (gone_ || fd_ < 0) return gone_;
  pollfd entry{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) < 0) return false;
  if ((entry.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    gone_ = true;
    return true;
  }
  if ((entry.revents & POLLRDHUP) != 0) peer_finished_ = true;
  if (!peer_finished_ || answer_started_ || probed_) return false;
  if (!http11_) {
    gone_ = true;
    return true;
  }
  probed_ = true;
  const ssize_t sent =
      ::send(fd_, kInterimAnswer.data(), kInterimAnswer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) gone_ = true;
  // Only behind an earlier answer the client has not read can the few bytes not fit.
  if (sent >= 0 && static_cast<size_t>(sent) < kInterimAnswer.size()) garbled_ = gone_ = true;
  // No room at all: it has sent its FIN and does not read what it was sent before.
  if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) gone_ = true;
  return gone_;
}

ClientWatch* current_client() { return current; }

ScopedClientWatch::ScopedClientWatch(ClientWatch* watch) : previous_(current) { current = watch; }

ScopedClientWatch::~ScopedClientWatch() { current = previous_; }

}  // namespace siesta::server
