// Raw HTTP/1.1 over a loopback socket, for what an HTTP client library hides: reading a
// server-sent-event stream incrementally (event by event, while the server still writes),
// and hanging up abruptly (a TCP reset, or a request cut in the middle).
//
// Synchronisation is by events: every read waits with poll() for bytes, end of stream or a
// deadline; nothing sleeps.
//
// Thread rule: one object per thread; different objects may be used on different threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/unique_fd.h"

namespace siesta::testing {

inline constexpr std::chrono::milliseconds kRawDeadline{30000};

// A request as bytes: "<method> <path> HTTP/1.1", Host, Content-Type (when a body is given),
// Content-Length, "Connection: close", the extra headers, then the body.
std::string http_request_text(const std::string& method, const std::string& path,
                              const std::string& body = "",
                              const std::vector<std::pair<std::string, std::string>>& headers = {});

class RawConnection {
 public:
  // Connects to 127.0.0.1:`port`. Failure: Internal with the errno text.
  static Result<RawConnection> connect(int port);

  RawConnection(RawConnection&&) = default;
  RawConnection& operator=(RawConnection&&) = default;
  ~RawConnection() = default;  // an orderly close if still open

  // Writes all of `bytes`. Failure: Internal (the peer closed, or the deadline passed).
  Status send_all(std::string_view bytes, std::chrono::milliseconds deadline = kRawDeadline);
  // Appends what arrives to `out`, waiting up to `deadline` for at least one byte.
  // Success: true when bytes came, false at end of stream. Failure: Internal at the deadline
  // or on a read error (a reset included).
  Result<bool> read_some(std::string& out, std::chrono::steady_clock::time_point deadline);
  // Reads until the end of the stream. Success: everything received.
  Result<std::string> read_to_end(std::chrono::milliseconds deadline = kRawDeadline);

  // Closes with SO_LINGER 0: the server sees a reset instead of an orderly end.
  void reset();
  // Closes normally (FIN).
  void close() { fd_.reset(); }
  // Shuts down the sending side only (a FIN), and keeps reading: a half-close.
  void shutdown_send();
  bool open() const { return fd_.valid(); }

 private:
  explicit RawConnection(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// An HTTP response head: status code and headers (names lower-cased).
struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view lower_name) const;  // "" when absent
};

// One POST whose response is read event by event (text/event-stream), chunked or not.
class SseStream {
 public:
  // Connects, sends POST `path` with `body` (and `headers`), and reads the response head.
  // Success: the stream, whatever its status (check head().status; a non-200 body is then
  // read_rest()). Failure: Internal (connection, deadline, a malformed head).
  static Result<SseStream> open(int port, const std::string& path, const std::string& body,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                std::chrono::milliseconds deadline = kRawDeadline);

  const ResponseHead& head() const { return head_; }

  // The next event's data (the text after "data: ", lines joined by '\n').
  // Success: the data, or nullopt when the response ended without another event.
  // Failure: Internal at the deadline, on a read error, or a malformed chunked body.
  Result<std::optional<std::string>> next_data(std::chrono::milliseconds deadline = kRawDeadline);

  // The rest of the body, decoded (for a non-200 answer). Failure as next_data.
  Result<std::string> read_rest(std::chrono::milliseconds deadline = kRawDeadline);

  // Hangs up with a reset in the middle of the stream.
  void disconnect() { connection_.reset(); }

 private:
  explicit SseStream(RawConnection connection) : connection_(std::move(connection)) {}
  // Decodes what `wire_` holds into `body_`; sets `ended_` at the last chunk.
  Status decode();
  // Reads more bytes (decoded). Success: false at end of stream.
  Result<bool> pull(std::chrono::steady_clock::time_point deadline);

  RawConnection connection_;
  ResponseHead head_;
  bool chunked_ = false;
  std::optional<uint64_t> content_length_;
  std::string wire_;  // received, not yet decoded
  std::string body_;  // decoded, not yet returned
  uint64_t body_total_ = 0;
  bool ended_ = false;
};

}  // namespace siesta::testing
