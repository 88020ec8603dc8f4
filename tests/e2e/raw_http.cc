#include "tests/e2e/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <system_error>

#include "core/base/os_error.h"
#include "tests/e2e/poll_deadline.h"

namespace siesta::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return std::string(text);
}

}  // namespace

std::string http_request_text(const std::string& method, const std::string& path,
                              const std::string& body,
                              const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string text = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!body.empty()) text += "Content-Type: application/json\r\n";
  text += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : headers) text += name + ": " + value + "\r\n";
  text += "\r\n";
  text += body;
  return text;
}

Result<RawConnection> RawConnection::connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return status_from_errno(errno, "socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return status_from_errno(errno, "connect to 127.0.0.1:" + std::to_string(port));
  }
  const int one = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return RawConnection(std::move(fd));
}

void RawConnection::shutdown_send() { (void)::shutdown(fd_.get(), SHUT_WR); }

Status RawConnection::send_all(std::string_view bytes, std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  while (!bytes.empty()) {
    pollfd entry{fd_.get(), POLLOUT, 0};
    const int ready = ::poll(&entry, 1, poll_timeout_ms(deadline));
    if (ready < 0 && errno != EINTR) return status_from_errno(errno, "poll");
    if (ready == 0) return Internal("send: deadline passed");
    const ssize_t sent = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return status_from_errno(errno, "send");
    }
    bytes.remove_prefix(static_cast<size_t>(sent));
  }
  return Status::Ok();
}

Result<bool> RawConnection::read_some(std::string& out, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&entry, 1, poll_timeout_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return status_from_errno(errno, "poll");
    }
    if (ready == 0) return Internal("read: deadline passed");
    char buffer[8192];
    const ssize_t got = ::recv(fd_.get(), buffer, sizeof buffer, 0);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return status_from_errno(errno, "recv");
    }
    if (got == 0) return false;
    out.append(buffer, static_cast<size_t>(got));
    return true;
  }
}

Result<std::string> RawConnection::read_to_end(std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  std::string out;
  while (true) {
    SIESTA_ASSIGN_OR_RETURN(bool more, read_some(out, deadline));
    if (!more) return out;
  }
}

void RawConnection::reset() {
  if (!fd_.valid()) return;
  linger abort_on_close{1, 0};
  (void)::setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
  fd_.reset();
}

std::string ResponseHead::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return "";
}

Result<SseStream> SseStream::open(int port, const std::string& path, const std::string& body,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  SIESTA_ASSIGN_OR_RETURN(RawConnection connection, RawConnection::connect(port));
  SIESTA_RETURN_IF_ERROR(connection.send_all(http_request_text("POST", path, body, headers)));
  SseStream stream(std::move(connection));
  size_t end = std::string::npos;
  while ((end = stream.wire_.find("\r\n\r\n")) == std::string::npos) {
    SIESTA_ASSIGN_OR_RETURN(bool more, stream.connection_.read_some(stream.wire_, deadline));
    if (!more) return Internal("the server closed before a response head: " + stream.wire_);
  }
  const std::string head_text = stream.wire_.substr(0, end);
  stream.wire_.erase(0, end + 4);
  size_t line_end = head_text.find("\r\n");
  const std::string status_line = head_text.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) {
    return Internal("malformed status line: " + status_line);
  }
  stream.head_.status = std::atoi(status_line.c_str() + 9);
  while (line_end != std::string::npos) {
    const size_t next = head_text.find("\r\n", line_end + 2);
    const std::string line = head_text.substr(line_end + 2, next - line_end - 2);
    line_end = next;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    stream.head_.headers.emplace_back(lower(trim(line.substr(0, colon))),
                                      trim(line.substr(colon + 1)));
  }
  stream.chunked_ =
      lower(stream.head_.header("transfer-encoding")).find("chunked") != std::string::npos;
  const std::string length = stream.head_.header("content-length");
  if (!stream.chunked_ && !length.empty()) stream.content_length_ = std::stoull(length);
  SIESTA_RETURN_IF_ERROR(stream.decode());
  return stream;
}

Status SseStream::decode() {
  if (!chunked_) {
    body_ += wire_;
    body_total_ += wire_.size();
    wire_.clear();
    if (content_length_ && body_total_ >= *content_length_) ended_ = true;
    return Status::Ok();
  }
  while (!ended_) {
    const size_t line_end = wire_.find("\r\n");
    if (line_end == std::string::npos) return Status::Ok();
    const std::string size_text = wire_.substr(0, line_end);
    char* parsed_end = nullptr;
    const unsigned long long size = std::strtoull(size_text.c_str(), &parsed_end, 16);
    if (parsed_end == size_text.c_str()) return Internal("malformed chunk size: " + size_text);
    if (size == 0) {
      ended_ = true;  // trailers, if any, are not needed
      wire_.clear();
      return Status::Ok();
    }
    if (wire_.size() < line_end + 2 + size + 2) return Status::Ok();  // chunk not complete
    body_.append(wire_, line_end + 2, size);
    body_total_ += size;
    wire_.erase(0, line_end + 2 + size + 2);
  }
  return Status::Ok();
}

Result<bool> SseStream::pull(Clock::time_point deadline) {
  if (ended_) return false;
  SIESTA_ASSIGN_OR_RETURN(bool more, connection_.read_some(wire_, deadline));
  if (!more) {
    SIESTA_RETURN_IF_ERROR(decode());
    if (chunked_ && !ended_) return Internal("the stream ended inside a chunked body");
    ended_ = true;
    return false;
  }
  SIESTA_RETURN_IF_ERROR(decode());
  return true;
}

Result<std::optional<std::string>> SseStream::next_data(std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  while (true) {
    // Events end with a blank line ("\n\n"; "\r\n\r\n" is normalised first).
    size_t crlf;
    while ((crlf = body_.find('\r')) != std::string::npos) body_.erase(crlf, 1);
    const size_t end = body_.find("\n\n");
    if (end != std::string::npos) {
      const std::string event = body_.substr(0, end);
      body_.erase(0, end + 2);
      std::string data;
      bool has_data = false;
      size_t start = 0;
      while (start <= event.size()) {
        size_t stop = event.find('\n', start);
        if (stop == std::string::npos) stop = event.size();
        std::string_view line(event.data() + start, stop - start);
        if (line.rfind("data:", 0) == 0) {
          line.remove_prefix(5);
          if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
          if (has_data) data += '\n';
          data += line;
          has_data = true;
        }
        start = stop + 1;
      }
      if (has_data) return std::optional<std::string>(std::move(data));
      continue;  // a comment or a field other than data
    }
    SIESTA_ASSIGN_OR_RETURN(bool more, pull(deadline));
    if (!more) {
      if (trim(body_).empty()) return std::optional<std::string>();
      body_ += "\n\n";  // a last event without its blank line
    }
  }
}

Result<std::string> SseStream::read_rest(std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  while (true) {
    SIESTA_ASSIGN_OR_RETURN(bool more, pull(deadline));
    if (!more) break;
  }
  std::string rest = std::move(body_);
  body_.clear();
  return rest;
}

}  // namespace siesta::testing
