// Framing one HTTP/1.1 request (RFC 9112) from the bytes a connection receives, before
// cpp-httplib parses it: the connection loop must know where a request ends to read exactly
// its body, hand a whole request to a worker and keep the bytes after it (a pipelined next
// request), and must refuse what it cannot frame at once instead of waiting for bytes.
//
// HeadFramer judges each byte once, as it arrives, and refuses a head at the first byte that
// cannot start or continue a valid one: a method byte that is not a token character, a target
// byte outside visible ASCII, a version byte that cannot continue "HTTP/" DIGIT "." DIGIT, a
// second space where one belongs, a header name byte that is not a token character before
// its colon, a header line that starts with a space or tab (folding), a bare LF, a CR not
// followed by LF, a NUL or other control byte but HTAB. So a bare-LF head, a TLS handshake or
// random bytes are refused at their first bad byte, not when the deadline passes. The limits
// too: a line's (414 for the request line, 431 for a header line) at the byte that leaves no
// room for its CRLF, the field count's at the first byte of one field too many (431), the
// head's at its byte max_head_bytes + 1 (431).
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
// before the request line are skipped (RFC 9112 section 2.2). The rules on Content-Length,
// Transfer-Encoding, Host and a body's method need every field: they are judged at the blank
// line.
//
// Thread rule: a HeadFramer is used by one thread at a time (the connection loop keeps one per
// connection); the free functions are pure.
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

// `text` without the spaces and tabs around it (RFC 9110's optional whitespace, OWS).
std::string_view trim_optional_whitespace(std::string_view text);

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

// Frames one request head from its bytes as they arrive, each byte judged once (a client
// sending one byte at a time costs O(n) in all). Outcomes:
// kIncomplete: the head has not ended yet and no byte so far breaks a rule (a head longer
// than max_head_bytes is refused with 431, so kIncomplete never holds more than that).
// kComplete: the head ended with the blank line's LF and follows every rule above; the bytes
// after it (its body, a pipelined request) were not looked at.
// kRefused: 400 (syntax, framing), 411 (Transfer-Encoding, or a POST/PUT/PATCH without
// Content-Length), 414 (request line too long), 431 (a header line, the field count or the
// head too long), 505 (a complete version HTTP/d.d other than 1.0 and 1.1: refused at its
// last digit). Refused at the first byte that broke a rule: the rules on a line's bytes and
// the limits at once, those on fields (Host, Content-Length, Transfer-Encoding) at the blank
// line's LF, when every field is known. The bytes after it were not looked at.
class HeadFramer {
 public:
  explicit HeadFramer(const HeadLimits& limits = {}) : limits_(limits) {}

  // Judges `more`, the bytes received after those fed so far, stopping at the first that
  // decides the outcome. Returns the outcome; once it is kComplete or kRefused, later calls
  // return it unchanged without looking at their bytes (until reset()).
  // The reference is valid until the next feed() or reset().
  const FramedHead& feed(std::string_view more);

  const FramedHead& outcome() const { return outcome_; }

  // Whether a byte of the request line has been fed (empty lines before it do not count): a
  // connection that ends or times out before then had not begun a request.
  bool began_request() const { return part_ != Part::kLeading && part_ != Part::kLeadingLf; }

  // Bytes judged so far: up to and including the deciding byte once decided.
  size_t consumed() const { return consumed_; }

  // Forgets everything fed: the next byte starts a new request.
  void reset() { *this = HeadFramer(limits_); }

 private:
  // Where the next byte falls.
  enum class Part {
    kLeading,    // before the request line: an empty line's CR, or the method's first byte
    kLeadingLf,  // the LF of an empty line before the request line
    kMethod,
    kTarget,
    kVersion,    // "HTTP/" DIGIT "." DIGIT, then the line's CR
    kLineStart,  // a header line's first byte, or the blank line's CR
    kName,
    kValue,
    kLineLf,   // the LF after the CR of the request line or of a header line
    kBlankLf,  // the LF of the blank line that ends the head
  };

  void judge(unsigned char c);
  // False when the byte makes its line too long (then refused).
  bool judge_line_length(unsigned char c);
  void judge_request_line(unsigned char c);
  void judge_version(unsigned char c);
  void judge_header_line(unsigned char c);
  void skip_empty_line();
  void end_line();
  void complete();
  void refuse(int status, std::string message, std::string code);
  void refuse_syntax(std::string message);
  void refuse_long_head();

  HeadLimits limits_;
  FramedHead outcome_;  // its head is filled in as the bytes come
  Part part_ = Part::kLeading;
  size_t consumed_ = 0;
  size_t line_number_ = 0;  // 0: the request line
  size_t line_bytes_ = 0;   // of the current line, before its CR
  size_t version_bytes_ = 0;
  char version_major_ = 0;
  std::string name_;
  std::string value_;
};

// Frames the request at the start of `received` all at once: the outcome of a HeadFramer fed
// `received`. kComplete's body may not all be there yet (head.end() > received.size()).
FramedHead frame_request_head(std::string_view received, const HeadLimits& limits = {});

}  // namespace siesta::server
