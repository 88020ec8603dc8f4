// Framing one HTTP/1.1 request (RFC 9112) from the bytes a connection has received so far,
// before cpp-httplib parses it: the connection loop must know where a request ends to read
// exactly its body, hand a whole request to a worker and keep the bytes after it (a pipelined
// next request), and must refuse what it cannot frame at once instead of waiting for bytes.
//
// The rules are stricter than cpp-httplib's own parser, so that the two can never disagree on
// where a request ends: every line ends in CRLF (a bare CR or LF is refused; cpp-httplib
// would skip such a header line); no NUL or other control byte but HTAB anywhere in the head
// (cpp-httplib reads header values as C strings, so "Bearer KEY\0junk" would lose its tail);
// no folded lines; header names are tokens with the colon right after them. Content-Length
// is decimal digits only: a negative, signed or non-numeric one, or two different ones, are
// refused (400); repeated identical ones are one. Transfer-Encoding is not accepted (411:
// the body limit holds only for a Content-Length body) and POST, PUT and PATCH need a
// Content-Length (411). HTTP/1.1 needs exactly one Host, HTTP/1.0 at most one. Empty lines
// before the request line are skipped (RFC 9112 section 2.2).
//
// Thread rule: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace siesta::server {

// HTTP field names (and tokens such as "Bearer" or "close") compare without regard to case
// (RFC 9110): ASCII letters only, byte for byte otherwise.
bool equals_ignoring_case(std::string_view a, std::string_view b);

struct HeadLimits {
  size_t max_head_bytes = size_t{32} << 10;  // request line, headers and the blank line
  size_t max_line_bytes = size_t{8} << 10;   // one line with its CRLF (cpp-httplib's own limit)
  size_t max_fields = 100;
};

// A framed request head. Names keep their case; values are trimmed of spaces and tabs.
struct RequestHead {
  size_t skipped_bytes = 0;  // empty lines before the request line
  size_t head_bytes = 0;     // the request line through the blank line
  std::string method;
  std::string target;  // as sent: path and query, not decoded
  bool http11 = true;  // else HTTP/1.0
  std::vector<std::pair<std::string, std::string>> fields;
  uint64_t content_length = 0;  // 0 when absent
  bool keep_alive = true;       // HTTP/1.1 without "Connection: close", 1.0 with keep-alive
  bool expect_continue = false;

  // Where the request's bytes end in the buffer it was framed from (its body included).
  // May exceed SIZE_MAX's worth for a huge Content-Length; compare before narrowing.
  uint64_t end() const { return uint64_t{skipped_bytes} + head_bytes + content_length; }
  // The first value of the field `name` (ASCII case-insensitive), or nullptr.
  const std::string* field(std::string_view name) const;
};

// A request that cannot be framed: the status to answer it with and why. The connection is
// closed after the answer (what follows in it cannot be framed either).
struct HeadRefusal {
  int http_status = 400;
  std::string message;
  std::string code;  // OpenAI-style error code
};

struct FramedHead {
  enum class Kind { kIncomplete, kComplete, kRefused };
  Kind kind = Kind::kIncomplete;
  RequestHead head;     // kComplete
  HeadRefusal refusal;  // kRefused
};

// Frames the request at the start of `received`.
// kIncomplete: the head has not ended yet and nothing so far breaks a rule (a head longer
// than max_head_bytes is refused with 431, so kIncomplete never needs more than that).
// kComplete: the head ended and follows every rule above; its body may not all be there yet
// (head.end() > received.size()). kRefused: 400 (syntax, framing), 411 (Transfer-Encoding, or
// a POST/PUT/PATCH without Content-Length), 414 (request line too long), 431 (a header line,
// the field count or the head too long), 505 (an HTTP version other than 1.0 and 1.1).
FramedHead frame_request_head(std::string_view received, const HeadLimits& limits = {});

}  // namespace siesta::server
