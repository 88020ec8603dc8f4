// ConnectionLoop's keep-alive rules, on the loop alone over loopback with a serve callback that
// answers every request "ok" (no routes, no app): an idle connection gets its request
// deadline again after every answer, so an idle keep-alive connection is closed, silently,
// however many requests it carried; and a connection carries exactly max_requests requests,
// the last answer saying "Connection: close". Every read waits with poll() up to a deadline
// that fails the test; nothing sleeps.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/unique_fd.h"
#include "server/connection_loop.h"

namespace siesta::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kReadDeadline{10000};

// A listening TCP socket on 127.0.0.1 (any port), and its port.
std::pair<UniqueFd, int> listen_on_loopback() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid()) << "socket: errno " << errno;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t size = sizeof address;
  const bool listening = fd.valid() &&
                         ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), size) == 0 &&
                         ::listen(fd.get(), 16) == 0 &&
                         ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0;
  EXPECT_TRUE(listening) << "bind/listen: errno " << errno;
  return {std::move(fd), listening ? ntohs(address.sin_port) : 0};
}

// A ConnectionLoop on its own thread whose serve callback answers "ok", saying "Connection:
// close" when told the connection closes after it, and records what it was told.
class OkLoop {
 public:
  explicit OkLoop(ConnectionLimits limits) {
    auto [listener, port] = listen_on_loopback();
    port_ = port;
    ConnectionCallbacks callbacks;
    callbacks.serve = [this](RequestStream& stream, bool close_after) {
      {
        MutexLock lock(mutex_);
        close_after_.push_back(close_after);
      }
      const std::string answer = std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n") +
                                 (close_after ? "Connection: close" : "Connection: keep-alive") +
                                 "\r\n\r\nok";
      const ssize_t written = stream.write(answer.data(), answer.size());
      return written == static_cast<ssize_t>(answer.size()) && !close_after;
    };
    Result<std::unique_ptr<ConnectionLoop>> loop =
        ConnectionLoop::create(std::move(listener), limits, std::move(callbacks));
    EXPECT_TRUE(loop.ok()) << loop.status().to_string();
    if (!loop.ok()) return;
    loop_ = std::move(loop).value();
    thread_ = std::thread([this] { served_ = loop_->run(); });
  }
  ~OkLoop() {
    if (loop_ == nullptr) return;
    loop_->stop();
    thread_.join();
    EXPECT_TRUE(served_.ok()) << served_.to_string();
  }
  OkLoop(const OkLoop&) = delete;
  OkLoop& operator=(const OkLoop&) = delete;

  bool ok() const { return loop_ != nullptr && port_ != 0; }
  int port() const { return port_; }
  // The close_after of every request served, in order.
  std::vector<bool> close_after() const {
    MutexLock lock(mutex_);
    return close_after_;
  }

 private:
  int port_ = 0;
  std::unique_ptr<ConnectionLoop> loop_;
  std::thread thread_;
  Status served_;
  mutable Mutex mutex_;
  std::vector<bool> close_after_ SIESTA_GUARDED_BY(mutex_);
};

// One client connection to the loop.
class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = fd_.valid() &&
                 ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  bool connected() const { return connected_; }

  bool send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads until `in_` holds one whole answer (ours end with the body "ok"), and takes it out.
  // "" when the deadline passes or the connection ends first.
  std::string read_answer() {
    const auto deadline = Clock::now() + kReadDeadline;
    for (;;) {
      const size_t end = in_.find("\r\n\r\nok");
      if (end != std::string::npos) {
        std::string answer = in_.substr(0, end + 6);
        in_.erase(0, end + 6);
        return answer;
      }
      if (read_some(deadline) <= 0) return "";
    }
  }

  // Waits for the server to close the connection. Success: the bytes that came before the end
  // of the stream. Failure: what came, and `closed` false, when the deadline passed first.
  std::string read_to_end(bool& closed) {
    const auto deadline = Clock::now() + kReadDeadline;
    ssize_t n = 1;
    while (n > 0) n = read_some(deadline);
    closed = n == 0;
    return std::exchange(in_, "");
  }

 private:
  // Bytes read into in_; 0 at the end of the stream; -1 at the deadline or on an error.
  ssize_t read_some(Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return -1;
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return -1;
      char buffer[4096];
      const ssize_t n = ::recv(fd_.get(), buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) in_.append(buffer, static_cast<size_t>(n));
      return n;
    }
  }

  UniqueFd fd_;
  bool connected_ = false;
  std::string in_;
};

const std::string kRequest = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

// Guards: the request deadline not armed again when an answered connection comes back to the
// loop, so that an idle keep-alive connection is held open for ever (a descriptor each,
// until the connection limit refuses every new client).
TEST(ConnectionLoopKeepAliveTest, AnIdleKeepAliveConnectionIsClosedAfterEveryAnswer) {
  ConnectionLimits limits;
  limits.request_timeout = milliseconds(1000);
  OkLoop loop(limits);
  ASSERT_TRUE(loop.ok());
  for (int requests : {1, 2}) {
    SCOPED_TRACE(std::to_string(requests) + " request(s) on the connection");
    Client client(loop.port());
    ASSERT_TRUE(client.connected());
    for (int i = 0; i < requests; ++i) {
      ASSERT_TRUE(client.send(kRequest));
      const std::string answer = client.read_answer();
      ASSERT_NE(answer.find("Connection: keep-alive"), std::string::npos) << answer;
    }
    // Idle from the last answer on: closed once the request deadline passes, without a word.
    bool closed = false;
    const std::string rest = client.read_to_end(closed);
    EXPECT_TRUE(closed) << "an idle keep-alive connection was still open after "
                        << kReadDeadline.count() << " ms (request timeout 1000 ms)";
    EXPECT_EQ(rest, "") << "an idle connection gets no answer it did not ask for";
  }
}

// Guards: max_requests off by one either way (the limit counted from 0 or compared with >):
// a connection carries exactly max_requests requests, the last one answered with "Connection:
// close" and the connection then closed, a request after it never served.
TEST(ConnectionLoopKeepAliveTest, AConnectionCarriesExactlyMaxRequests) {
  ConnectionLimits limits;
  limits.max_requests = 3;
  OkLoop loop(limits);
  ASSERT_TRUE(loop.ok());
  Client client(loop.port());
  ASSERT_TRUE(client.connected());
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(client.send(kRequest));
    const std::string answer = client.read_answer();
    ASSERT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
    EXPECT_NE(answer.find(i < 3 ? "Connection: keep-alive" : "Connection: close"),
              std::string::npos)
        << answer;
  }
  (void)client.send(kRequest);  // refused by the kernel or left unread: never served
  bool closed = false;
  const std::string rest = client.read_to_end(closed);
  EXPECT_TRUE(closed) << "the connection stayed open after its last request";
  EXPECT_EQ(rest, "") << "a request past max_requests was answered";
  EXPECT_EQ(loop.close_after(), (std::vector<bool>{false, false, true}));
}

}  // namespace
}  // namespace siesta::server
