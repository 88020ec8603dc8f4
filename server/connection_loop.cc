#include "server/connection_loop.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string_view>

#include "core/base/os_error.h"
#include "server/api_error.h"

namespace siesta::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;
constexpr std::chrono::milliseconds kAcceptPause{100};
constexpr size_t kReadChunk = size_t{64} << 10;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

std::string_view reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 500 ? "Client Error" : "Server Error";
  }
}

// A response the loop writes itself: always the last on its connection.
std::string serialize(const httplib::Response& response) {
  std::string out = "HTTP/1.1 ";
  out += std::to_string(response.status);
  out += ' ';
  out += reason_phrase(response.status);
  out += "\r\n";
  for (const auto& [name, value] : response.headers) {
    if (name == "Content-Length" || name == "Connection") continue;
    out.append(name).append(": ").append(value).append("\r\n");
  }
  out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += response.body;
  return out;
}

// What the screen sees: the head as cpp-httplib would parse it (path decoded, query split
// off), without the body.
httplib::Request head_request(const RequestHead& head, const ConnectionAddresses& addresses) {
  httplib::Request request;
  request.method = head.method;
  request.target = head.target;
  request.version = head.http11 ? "HTTP/1.1" : "HTTP/1.0";
  const size_t query = head.target.find('?');
  request.path = httplib::detail::decode_url(head.target.substr(0, query), false);
  if (query != std::string::npos) {
    httplib::detail::parse_query_text(head.target.substr(query + 1), request.params);
  }
  for (const auto& [name, value] : head.fields) request.headers.emplace(name, value);
  request.remote_addr = addresses.remote_ip;
  request.remote_port = addresses.remote_port;
  request.local_addr = addresses.local_ip;
  request.local_port = addresses.local_port;
  return request;
}

// Best effort, never blocking: a refusal or an interim answer is small, and the connection
// is new or has been answered, so its send buffer has room.
void send_now(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

struct ConnectionLoop::Connection {
  explicit Connection(const HeadLimits& head_limits) : framer(head_limits) {}

  uint64_t id = 0;
  UniqueFd fd;
  State state = State::kWaitingHead;
  std::string in;              // received, not yet consumed
  HeadFramer framer;           // the head of the request at the start of `in` (kWaitingHead)
  size_t fed = 0;              // bytes of `in` the framer has been given
  bool peer_finished = false;  // the peer's FIN was read
  bool registered = false;     // in the epoll set
  uint32_t served = 0;         // requests answered
  RequestHead head;            // kWaitingBody and kBusy
  httplib::Request screened;   // the head as the screen saw it (kWaitingBody)
  ConnectionAddresses addresses;
  Clock::time_point deadline{};
  bool has_deadline = false;
};

Result<std::unique_ptr<ConnectionLoop>> ConnectionLoop::create(UniqueFd listener,
                                                               ConnectionLimits limits,
                                                               ConnectionCallbacks callbacks) {
  // A bound socket's backlog may be set again: cpp-httplib's is 5, so that a burst of clients
  // would wait for SYN retransmissions (a second each) while the loop could accept them.
  if (::listen(listener.get(), kListenBacklog) != 0) return status_from_errno(errno, "listen()");
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return status_from_errno(errno, "making the listening socket non-blocking");
  }
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return status_from_errno(errno, "epoll_create1()");
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return status_from_errno(errno, "eventfd()");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeId;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &event) != 0) {
    return status_from_errno(errno, "epoll_ctl()");
  }
  event.data.u64 = kListenerId;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listener.get(), &event) != 0) {
    return status_from_errno(errno, "epoll_ctl()");
  }
  return std::unique_ptr<ConnectionLoop>(new ConnectionLoop(
      std::move(listener), std::move(epoll), std::move(wake), limits, std::move(callbacks)));
}

ConnectionLoop::ConnectionLoop(UniqueFd listener, UniqueFd epoll, UniqueFd wake,
                               ConnectionLimits limits, ConnectionCallbacks callbacks)
    : listener_(std::move(listener)),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      limits_(limits),
      callbacks_(std::move(callbacks)),
      pool_(limits.max_connections) {}

ConnectionLoop::~ConnectionLoop() { pool_.shutdown(); }

void ConnectionLoop::stop() {
  stop_requested_.store(true);
  const uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof one);
}

// ---- Registration and deadlines --------------------------------------------------------------

void ConnectionLoop::watch(Connection& c, bool on) {
  if (on == c.registered) return;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = c.id;
  (void)::epoll_ctl(epoll_.get(), on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c.fd.get(), &event);
  c.registered = on;
}

void ConnectionLoop::set_deadline(Connection& c, Clock::time_point when) {
  if (c.has_deadline) deadlines_.erase({c.deadline, c.id});
  c.deadline = when;
  c.has_deadline = true;
  deadlines_.insert({when, c.id});
}

int ConnectionLoop::next_timeout_ms() const {
  Clock::time_point next = Clock::time_point::max();
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (listener_paused_) next = std::min(next, listener_resumes_);
  if (next == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60000));
}

// ---- Accepting -------------------------------------------------------------------------------

void ConnectionLoop::accept_all() {
  while (listener_.valid()) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(UniqueFd(fd));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // The pending connection stays queued (the listener stays readable): do not spin on it.
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
      listener_paused_ = true;
      listener_resumes_ = Clock::now() + kAcceptPause;
    }
    return;  // EAGAIN, or an error accept() will report again
  }
}

void ConnectionLoop::admit(UniqueFd fd) {
  int one = 1;
  // Streamed answers are many small writes; Nagle's algorithm would hold each one back.
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto c = std::make_unique<Connection>(limits_.head);
  c->id = next_id_++;
  c->fd = std::move(fd);
  Connection& connection = *c;
  connections_.emplace(c->id, std::move(c));
  if (active_ >= limits_.max_connections) {
    refused_.fetch_add(1);
    ++active_;  // refuse() moves it to closing
    refuse(connection, 503,
           "too many connections: the server holds its limit of " +
               std::to_string(limits_.max_connections) +
               " open connections (--http-max-connections); retry shortly",
           "too_many_connections");
    return;
  }
  ++active_;
  read_connection_addresses(connection.fd.get(), connection.addresses);
  set_deadline(connection, Clock::now() + limits_.request_timeout);
  watch(connection, true);
}

// ---- Reading and framing ---------------------------------------------------------------------

void ConnectionLoop::on_readable(Connection& c) {
  if (c.state == State::kClosing) {
    char scratch[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_now(c);  // the client's end (or an error): nothing is left to drain
      return;
    }
  }
  read_more(c);
}

void ConnectionLoop::read_more(Connection& c) {
  // Read no further than the request needs (the head's limit, then its end): what follows
  // stays in the kernel until the request has been answered.
  const uint64_t limit =
      c.state == State::kWaitingBody ? c.head.end() : uint64_t{limits_.head.max_head_bytes} + 1;
  while (c.in.size() < limit) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kReadChunk, limit - c.in.size()));
    const size_t old_size = c.in.size();
    c.in.resize(old_size + want);
    const ssize_t n = ::recv(c.fd.get(), c.in.data() + old_size, want, MSG_DONTWAIT);
    c.in.resize(old_size + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n == 0) {
      c.peer_finished = true;
      watch(c, false);  // a FIN stays readable: epoll would report it for ever
      break;
    }
    close_now(c);  // a reset or another error: nobody to answer
    return;
  }
  progress(c);
}

void ConnectionLoop::progress(Connection& c) {
  if (c.state == State::kWaitingHead) {
    // Only the bytes that came since the last call: the framer judges each byte once, so a
    // head sent a byte at a time costs its length, and a bad byte is refused as it comes.
    const FramedHead& framed = c.framer.feed(std::string_view(c.in).substr(c.fed));
    c.fed = c.in.size();
    if (framed.kind == FramedHead::Kind::kIncomplete) {
      if (c.peer_finished) end_unfinished_head(c);
      return;
    }
    if (framed.kind == FramedHead::Kind::kRefused) {
      refuse(c, framed.refusal.http_status, framed.refusal.message, framed.refusal.code);
      return;
    }
    c.head = framed.head;
    c.screened = head_request(c.head, c.addresses);
    httplib::Response response;
    if (callbacks_.screen && !callbacks_.screen(c.screened, response)) {
      send_refusal(c, response);
      return;
    }
    if (c.head.content_length > limits_.max_body_bytes) {
      refuse(c, 413,
             "request body too large: the limit is " + std::to_string(limits_.max_body_bytes) +
                 " bytes (--max-body-bytes)",
             "request_too_large");
      return;
    }
    c.state = State::kWaitingBody;
    set_deadline(c, Clock::now() + limits_.request_timeout);
    if (c.head.expect_continue && c.head.http11 && c.in.size() < c.head.end()) {
      send_now(c.fd.get(), kContinue);
    }
  }
  if (c.state == State::kWaitingBody) {
    if (c.in.size() >= c.head.end()) {
      httplib::Response response;
      const std::string_view body(c.in.data() + c.head.skipped_bytes + c.head.head_bytes,
                                  c.head.content_length);
      if (callbacks_.screen_body && !callbacks_.screen_body(c.screened, body, response)) {
        send_refusal(c, response);
        return;
      }
      c.screened = httplib::Request();
      dispatch(c);
    } else if (c.peer_finished) {
      close_now(c);
    } else if (!c.registered) {
      watch(c, true);
    }
  }
}

// ---- Serving ---------------------------------------------------------------------------------

void ConnectionLoop::dispatch(Connection& c) {
  watch(c, false);
  if (c.has_deadline) {
    deadlines_.erase({c.deadline, c.id});
    c.has_deadline = false;
  }
  c.state = State::kBusy;
  ++busy_;
  const bool close_after = !c.head.keep_alive || c.served + 1 >= limits_.max_requests;
  Connection* connection = &c;
  Status submitted =
      pool_.submit([this, connection, close_after] { serve_on_worker(connection, close_after); });
  if (!submitted.ok()) {
    --busy_;
    refuse(c, 503, "the server cannot serve this request now: " + submitted.message(),
           "unavailable");
  }
}

void ConnectionLoop::serve_on_worker(Connection* c, bool close_after) {
  // The loop does not touch a busy connection: its bytes and descriptor are this worker's.
  const std::string_view request(c->in.data() + c->head.skipped_bytes,
                                 c->head.head_bytes + c->head.content_length);
  ClientWatch client(c->fd.get(), c->head.http11, c->peer_finished);
  RequestStream stream(c->fd.get(), request, limits_.request_timeout, c->addresses, &client);
  bool keep = false;
  {
    ScopedClientWatch current(&client);
    try {
      keep = callbacks_.serve(stream, close_after);
    } catch (const std::exception&) {
      keep = false;  // cpp-httplib's own handler catches what handlers throw; this is a guard
    }
  }
  keep = keep && !close_after && !stream.write_failed() && !client.garbled();
  {
    MutexLock lock(returned_mutex_);
    returned_.emplace_back(c->id, keep);
  }
  const uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof one);
}

void ConnectionLoop::on_returned(uint64_t id, bool keep) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  --busy_;
  ++c.served;
  c.in.erase(0, static_cast<size_t>(c.head.end()));
  if (c.in.capacity() > 4 * kReadChunk) c.in.shrink_to_fit();
  c.head = RequestHead();
  c.framer.reset();  // the next request's head starts at the start of `in`, not yet fed
  c.fed = 0;
  if (!keep || stopping_) {
    finish(c);
    return;
  }
  c.state = State::kWaitingHead;
  set_deadline(c, Clock::now() + limits_.request_timeout);
  if (!c.peer_finished) watch(c, true);
  progress(c);  // a pipelined request may be here already
}

// ---- Ending ----------------------------------------------------------------------------------

void ConnectionLoop::on_deadline(Connection& c) {
  c.has_deadline = false;
  switch (c.state) {
    case State::kWaitingHead:
      if (!c.framer.began_request()) {
        close_now(c);  // idle (empty lines before a request are not one): nothing to answer
        return;
      }
      [[fallthrough]];
    case State::kWaitingBody:
      refuse(c, 408,
             "request timeout: the request was not received whole within " +
                 std::to_string(limits_.request_timeout.count() / 1000) +
                 " s (--http-request-timeout-seconds)",
             "request_timeout");
      return;
    case State::kClosing: close_now(c); return;
    case State::kBusy: return;  // never has a deadline
  }
}

void ConnectionLoop::end_unfinished_head(Connection& c) {
  if (!c.framer.began_request()) {
    close_now(c);  // no request was begun: nothing to answer
    return;
  }
  // The client can still read (a half-close): tell it the head it sent can never be framed,
  // rather than leave it guessing from a silent close.
  refuse(c, 400, "malformed request: the request ended before its head did", "bad_request");
}

void ConnectionLoop::refuse(Connection& c, int status, const std::string& message,
                            const std::string& code) {
  httplib::Response response;
  set_api_error(response, status, message, status >= 500 ? "server_error" : "invalid_request_error",
                code);
  if (status == 503) response.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
  send_refusal(c, response);
}

void ConnectionLoop::send_refusal(Connection& c, const httplib::Response& response) {
  send_now(c.fd.get(), serialize(response));
  finish(c);
}

void ConnectionLoop::finish(Connection& c) {
  if (c.state != State::kClosing) {
    --active_;
    ++closing_;
  }
  c.state = State::kClosing;
  (void)::shutdown(c.fd.get(), SHUT_WR);
  // Nothing more can come (the FIN was read), or too many are draining already.
  if (c.peer_finished || stopping_ || closing_ > limits_.max_connections) {
    close_now(c);
    return;
  }
  set_deadline(c, Clock::now() + limits_.linger);
  watch(c, true);
}

void ConnectionLoop::close_now(Connection& c) {
  watch(c, false);
  if (c.has_deadline) deadlines_.erase({c.deadline, c.id});
  if (c.state == State::kClosing) {
    --closing_;
  } else {
    --active_;
  }
  connections_.erase(c.id);  // closes the descriptor
}

void ConnectionLoop::begin_stop() {
  stopping_ = true;
  if (listener_.valid()) {
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
    // Shut down, not just closed: another descriptor may share the socket (HttpServer keeps
    // cpp-httplib's), and only shutdown() stops it listening. The kernel refuses new
    // connections from here on.
    (void)::shutdown(listener_.get(), SHUT_RDWR);
    listener_.reset();
  }
  std::vector<uint64_t> idle;
  for (const auto& [id, c] : connections_) {
    if (c->state != State::kBusy) idle.push_back(id);
  }
  for (uint64_t id : idle) close_now(*connections_.at(id));
}

// ---- The loop --------------------------------------------------------------------------------

Status ConnectionLoop::run() {
  Status result = Status::Ok();
  epoll_event events[64];
  for (;;) {
    if (stop_requested_.load() && !stopping_) begin_stop();
    if (stopping_ && busy_ == 0) break;
    const int n = ::epoll_wait(epoll_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      result = status_from_errno(errno, "epoll_wait()");
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        uint64_t count = 0;
        (void)::read(wake_.get(), &count, sizeof count);
      } else if (id == kListenerId) {
        accept_all();
      } else if (auto it = connections_.find(id); it != connections_.end()) {
        on_readable(*it->second);
      }
    }
    std::vector<std::pair<uint64_t, bool>> returned;
    {
      MutexLock lock(returned_mutex_);
      returned.swap(returned_);
    }
    for (const auto& [id, keep] : returned) on_returned(id, keep);
    const Clock::time_point now = Clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const uint64_t id = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      if (auto it = connections_.find(id); it != connections_.end()) on_deadline(*it->second);
    }
    if (listener_paused_ && now >= listener_resumes_ && listener_.valid()) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u64 = kListenerId;
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &event);
      listener_paused_ = false;
    }
  }
  // An epoll failure leaves requests at workers: they finish before their connections go.
  pool_.shutdown();
  connections_.clear();
  listener_.reset();
  return result;
}

}  // namespace siesta::server
