#include "server/request_head.h"

#include <cctype>
#include <limits>

namespace siesta::server {
namespace {

constexpr std::string_view kTokenSymbols = "!#$%&'*+-.^_`|~";

bool is_token_char(unsigned char c) {
  return std::isalnum(c) != 0 || kTokenSymbols.find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_token_char(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

FramedHead refused(int status, std::string message, std::string code) {
  FramedHead out;
  out.kind = FramedHead::Kind::kRefused;
  out.refusal = {status, std::move(message), std::move(code)};
  return out;
}

FramedHead bad(std::string message) {
  return refused(400, "malformed request: " + std::move(message), "bad_request");
}

// "HTTP/1.1" -> http11; the version's syntax without a version we serve -> 505.
FramedHead parse_request_line(std::string_view line, RequestHead& head) {
  const size_t first = line.find(' ');
  const size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return bad("the request line must be METHOD SP TARGET SP HTTP-VERSION");
  }
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (!is_token(method)) return bad("the method is not a token");
  if (target.empty()) return bad("the request target is empty");
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return bad("the request target has a byte outside visible ASCII");
  }
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    head.http11 = version == "HTTP/1.1";
  } else if (version.size() == 8 && version.starts_with("HTTP/") &&
             std::isdigit(static_cast<unsigned char>(version[5])) != 0 && version[6] == '.' &&
             std::isdigit(static_cast<unsigned char>(version[7])) != 0) {
    return refused(505, "HTTP version not supported: this server speaks HTTP/1.1 and 1.0",
                   "http_version_not_supported");
  } else {
    return bad("the request line does not end in HTTP/1.1 or HTTP/1.0");
  }
  head.method = std::string(method);
  head.target = std::string(target);
  return {};
}

// Digits only, at most uint64's range (more saturates: it is over any body limit anyway).
bool parse_length(std::string_view text, uint64_t* value) {
  if (text.empty()) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    v = v > (std::numeric_limits<uint64_t>::max() - digit) / 10
            ? std::numeric_limits<uint64_t>::max()
            : v * 10 + digit;
  }
  *value = v;
  return true;
}

// The rules that need every field: Host, Content-Length, Transfer-Encoding, Connection,
// Expect.
FramedHead finish(RequestHead& head) {
  head.keep_alive = head.http11;  // until a Connection header says otherwise
  size_t hosts = 0;
  bool has_length = false;
  for (const auto& [name, value] : head.fields) {
    if (equals_ignoring_case(name, "Host")) {
      ++hosts;
    } else if (equals_ignoring_case(name, "Content-Length")) {
      uint64_t length = 0;
      if (!parse_length(value, &length)) {
        return bad("Content-Length must be a decimal number of bytes");
      }
      if (has_length && length != head.content_length) {
        return bad("two different Content-Length values");
      }
      has_length = true;
      head.content_length = length;
    } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
      return refused(411,
                     "Transfer-Encoding is not accepted (chunked request bodies cannot be held "
                     "to --max-body-bytes): send the body with a Content-Length",
                     "length_required");
    } else if (equals_ignoring_case(name, "Connection")) {
      std::string_view rest = value;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view option = trim(rest.substr(0, comma));
        if (equals_ignoring_case(option, "close")) head.keep_alive = false;
        if (equals_ignoring_case(option, "keep-alive") && !head.http11) head.keep_alive = true;
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (equals_ignoring_case(name, "Expect")) {
      head.expect_continue = equals_ignoring_case(value, "100-continue");
    }
  }
  if (head.http11 ? hosts != 1 : hosts > 1) {
    return bad(head.http11 ? "an HTTP/1.1 request needs exactly one Host header"
                           : "more than one Host header");
  }
  if (!has_length && (head.method == "POST" || head.method == "PUT" || head.method == "PATCH")) {
    return refused(411,
                   "malformed request: a " + head.method +
                       " needs a Content-Length header (0 for an empty body)",
                   "length_required");
  }
  FramedHead out;
  out.kind = FramedHead::Kind::kComplete;
  out.head = std::move(head);
  return out;
}

}  // namespace

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

const std::string* RequestHead::field(std::string_view name) const {
  for (const auto& [field_name, value] : fields) {
    if (equals_ignoring_case(field_name, name)) return &value;
  }
  return nullptr;
}

FramedHead frame_request_head(std::string_view received, const HeadLimits& limits) {
  RequestHead head;
  size_t skipped = 0;
  while (received.size() - skipped >= 2 && received.substr(skipped, 2) == "\r\n") {
    skipped += 2;
    if (skipped > limits.max_head_bytes) return bad("too many empty lines before the request");
  }
  head.skipped_bytes = skipped;
  const std::string_view rest = received.substr(skipped);
  auto too_long = [&](size_t line_number) {
    return line_number == 0 ? refused(414,
                                      "the request line is longer than " +
                                          std::to_string(limits.max_line_bytes) + " bytes",
                                      "uri_too_long")
                            : refused(431,
                                      "a header line is longer than " +
                                          std::to_string(limits.max_line_bytes) + " bytes",
                                      "header_too_large");
  };
  size_t line_start = 0;
  for (size_t line_number = 0;; ++line_number) {
    // Every byte is judged as it arrives, so a refusal does not wait for the end of the head.
    size_t i = line_start;
    for (; i < rest.size(); ++i) {
      const auto c = static_cast<unsigned char>(rest[i]);
      if (i - line_start + 2 > limits.max_line_bytes) return too_long(line_number);
      if (c == '\r') {
        if (i + 1 == rest.size()) break;  // its LF may be on the way
        if (rest[i + 1] != '\n') return bad("a CR not followed by LF");
        break;
      }
      if (c == '\n') return bad("a line ends in LF without CR");
      if (c == 0) return bad("a NUL byte in the request head");
      if ((c < 0x20 && c != '\t') || c == 0x7f) return bad("a control byte in the request head");
    }
    if (i + 1 >= rest.size()) {  // the line has not ended yet
      if (skipped + rest.size() > limits.max_head_bytes) {
        return refused(
            431,
            "the request head is longer than " + std::to_string(limits.max_head_bytes) + " bytes",
            "header_too_large");
      }
      return {};
    }
    const std::string_view line = rest.substr(line_start, i - line_start);
    const size_t next = i + 2;
    if (skipped + next > limits.max_head_bytes) {
      return refused(
          431,
          "the request head is longer than " + std::to_string(limits.max_head_bytes) + " bytes",
          "header_too_large");
    }
    if (line_number == 0) {
      FramedHead parsed = parse_request_line(line, head);
      if (parsed.kind == FramedHead::Kind::kRefused) return parsed;
    } else if (line.empty()) {
      head.head_bytes = next;
      return finish(head);
    } else {
      if (line.front() == ' ' || line.front() == '\t') {
        return bad("a folded header line (obsolete line folding is not accepted)");
      }
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
        return bad("a header line is not NAME: VALUE");
      }
      if (head.fields.size() == limits.max_fields) {
        return refused(431, "more than " + std::to_string(limits.max_fields) + " header lines",
                       "header_too_large");
      }
      head.fields.emplace_back(std::string(line.substr(0, colon)),
                               std::string(trim(line.substr(colon + 1))));
    }
    line_start = next;
  }
}

}  // namespace siesta::server
