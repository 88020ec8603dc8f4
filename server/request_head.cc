#include "server/request_head.h"

#include <cctype>
#include <limits>

namespace siesta::server {
namespace {

constexpr std::string_view kTokenSymbols = "!#$%&'*+-.^_`|~";

bool is_token_char(unsigned char c) {
  return std::isalnum(c) != 0 || kTokenSymbols.find(static_cast<char>(c)) != std::string_view::npos;
}

constexpr std::string_view kVersionName = "HTTP/";
constexpr std::string_view kRequestLineSyntax =
    "the request line must be METHOD SP TARGET SP HTTP-VERSION";

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

}  // namespace

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

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

const FramedHead& HeadFramer::feed(std::string_view more) {
  for (const char c : more) {
    if (outcome_.kind != FramedHead::Kind::kIncomplete) break;
    ++consumed_;
    judge(static_cast<unsigned char>(c));
    // Every byte counts against the head's limit, the empty lines before it too; a byte
    // refused for its own sake keeps that reason, and a head ending here was judged in
    // complete().
    if (outcome_.kind == FramedHead::Kind::kIncomplete && consumed_ > limits_.max_head_bytes) {
      refuse_long_head();
    }
  }
  return outcome_;
}

// After a CR only its LF may come. Any other byte is judged in this order: its line's length,
// the bytes no line may hold, then the rule of the part it falls in.
void HeadFramer::judge(unsigned char c) {
  switch (part_) {
    case Part::kLeadingLf:
    case Part::kLineLf:
    case Part::kBlankLf:
      if (c != '\n') {
        refuse_syntax("a CR not followed by LF");
      } else if (part_ == Part::kLeadingLf) {
        skip_empty_line();
      } else if (part_ == Part::kLineLf) {
        end_line();
      } else {
        complete();
      }
      return;
    default: break;
  }
  if (!judge_line_length(c)) return;
  if (c == 0) return refuse_syntax("a NUL byte in the request head");
  if (c == '\n') return refuse_syntax("a line ends in LF without CR");
  if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
    return refuse_syntax("a control byte in the request head");
  }
  ++line_bytes_;
  if (line_number_ == 0) {
    judge_request_line(c);
  } else {
    judge_header_line(c);
  }
}

// A line may hold max_line_bytes with its CRLF: refused at the first byte that leaves no room
// for the rest (this byte, then the CRLF still to come, unless this is the CR).
bool HeadFramer::judge_line_length(unsigned char c) {
  if (line_bytes_ + (c == '\r' ? 2 : 3) <= limits_.max_line_bytes) return true;
  const std::string limit = std::to_string(limits_.max_line_bytes);
  if (line_number_ == 0) {
    refuse(414, "the request line is longer than " + limit + " bytes", "uri_too_long");
  } else {
    refuse(431, "a header line is longer than " + limit + " bytes", "header_too_large");
  }
  return false;
}

void HeadFramer::judge_request_line(unsigned char c) {
  RequestHead& head = outcome_.head;
  switch (part_) {
    case Part::kLeading:
      if (c == '\r') {
        part_ = Part::kLeadingLf;
        return;
      }
      part_ = Part::kMethod;
      [[fallthrough]];
    case Part::kMethod:
      if (is_token_char(c)) {
        head.method += static_cast<char>(c);
      } else if (c == ' ' && !head.method.empty()) {
        part_ = Part::kTarget;
      } else if (c == '\r' && !head.method.empty()) {
        refuse_syntax(std::string(kRequestLineSyntax));
      } else {
        refuse_syntax("the method is not a token");
      }
      return;
    case Part::kTarget:
      if (c > 0x20 && c < 0x7f) {
        head.target += static_cast<char>(c);
      } else if (c == ' ' && !head.target.empty()) {
        part_ = Part::kVersion;
      } else if (c == ' ' || c == '\r') {  // a second space, or no version
        refuse_syntax(std::string(kRequestLineSyntax));
      } else {
        refuse_syntax("the request target has a byte outside visible ASCII");
      }
      return;
    case Part::kVersion: judge_version(c); return;
    default: return;  // not a part of the request line
  }
}

// "HTTP/" DIGIT "." DIGIT: its last digit completes it (one digit each, RFC 9112 section 2.3),
// so a version other than 1.0 and 1.1 is refused there; only the line's CR may follow.
void HeadFramer::judge_version(unsigned char c) {
  const size_t at = version_bytes_++;
  const bool digit = c >= '0' && c <= '9';
  if (at < kVersionName.size()) {
    if (c == static_cast<unsigned char>(kVersionName[at])) return;
  } else if (at == kVersionName.size()) {
    if (digit) {
      version_major_ = static_cast<char>(c);
      return;
    }
  } else if (at == kVersionName.size() + 1) {
    if (c == '.') return;
  } else if (at == kVersionName.size() + 2) {
    if (digit) {
      if (version_major_ == '1' && (c == '0' || c == '1')) {
        outcome_.head.http11 = c == '1';
      } else {
        refuse(505, "HTTP version not supported: this server speaks HTTP/1.1 and 1.0",
               "http_version_not_supported");
      }
      return;
    }
  } else if (c == '\r') {
    part_ = Part::kLineLf;
    return;
  }
  refuse_syntax(c == ' ' ? std::string(kRequestLineSyntax)
                         : "the request line does not end in HTTP/1.1 or HTTP/1.0");
}

void HeadFramer::judge_header_line(unsigned char c) {
  switch (part_) {
    case Part::kLineStart:
      if (c == '\r') {
        part_ = Part::kBlankLf;
        return;
      }
      if (c == ' ' || c == '\t') {
        return refuse_syntax("a folded header line (obsolete line folding is not accepted)");
      }
      if (!is_token_char(c)) return refuse_syntax("a header line is not NAME: VALUE");
      // A header line has begun, and there is no room for it.
      if (outcome_.head.fields.size() == limits_.max_fields) {
        return refuse(431, "more than " + std::to_string(limits_.max_fields) + " header lines",
                      "header_too_large");
      }
      part_ = Part::kName;
      [[fallthrough]];
    case Part::kName:
      if (is_token_char(c)) {
        name_ += static_cast<char>(c);
      } else if (c == ':') {
        part_ = Part::kValue;
      } else {
        refuse_syntax("a header line is not NAME: VALUE");
      }
      return;
    case Part::kValue:
      if (c == '\r') {
        part_ = Part::kLineLf;
      } else if (!value_.empty() || (c != ' ' && c != '\t')) {  // leading spaces are not kept
        value_ += static_cast<char>(c);
      }
      return;
    default: return;  // not a part of a header line
  }
}

void HeadFramer::skip_empty_line() {
  outcome_.head.skipped_bytes = consumed_;
  line_bytes_ = 0;
  part_ = Part::kLeading;
  if (consumed_ > limits_.max_head_bytes) refuse_syntax("too many empty lines before the request");
}

void HeadFramer::end_line() {
  if (line_number_ > 0) {
    while (!value_.empty() && (value_.back() == ' ' || value_.back() == '\t')) value_.pop_back();
    outcome_.head.fields.emplace_back(std::move(name_), std::move(value_));
    name_.clear();
    value_.clear();
  }
  ++line_number_;
  line_bytes_ = 0;
  part_ = Part::kLineStart;
}

void HeadFramer::refuse(int status, std::string message, std::string code) {
  outcome_.kind = FramedHead::Kind::kRefused;
  outcome_.refusal = {status, std::move(message), std::move(code)};
}

void HeadFramer::refuse_syntax(std::string message) {
  refuse(400, "malformed request: " + std::move(message), "bad_request");
}

void HeadFramer::refuse_long_head() {
  refuse(431,
         "the request head is longer than " + std::to_string(limits_.max_head_bytes) + " bytes",
         "header_too_large");
}

// The blank line's LF: the head's size, then the rules that need every field: Host,
// Content-Length, Transfer-Encoding, Connection, Expect.
void HeadFramer::complete() {
  RequestHead& head = outcome_.head;
  head.head_bytes = consumed_ - head.skipped_bytes;
  if (consumed_ > limits_.max_head_bytes) return refuse_long_head();
  head.keep_alive = head.http11;  // until a Connection header says otherwise
  size_t hosts = 0;
  bool has_length = false;
  for (const auto& [name, value] : head.fields) {
    if (equals_ignoring_case(name, "Host")) {
      ++hosts;
    } else if (equals_ignoring_case(name, "Content-Length")) {
      uint64_t length = 0;
      if (!parse_length(value, &length)) {
        return refuse_syntax("Content-Length must be a decimal number of bytes");
      }
      if (has_length && length != head.content_length) {
        return refuse_syntax("two different Content-Length values");
      }
      has_length = true;
      head.content_length = length;
    } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
      return refuse(411,
                    "Transfer-Encoding is not accepted (chunked request bodies cannot be held "
                    "to --max-body-bytes): send the body with a Content-Length",
                    "length_required");
    } else if (equals_ignoring_case(name, "Connection")) {
      std::string_view rest = value;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view option = trim_optional_whitespace(rest.substr(0, comma));
        if (equals_ignoring_case(option, "close")) head.keep_alive = false;
        if (equals_ignoring_case(option, "keep-alive") && !head.http11) head.keep_alive = true;
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (equals_ignoring_case(name, "Expect")) {
      head.expect_continue = equals_ignoring_case(value, "100-continue");
    }
  }
  if (head.http11 ? hosts != 1 : hosts > 1) {
    return refuse_syntax(head.http11 ? "an HTTP/1.1 request needs exactly one Host header"
                                     : "more than one Host header");
  }
  if (!has_length && (head.method == "POST" || head.method == "PUT" || head.method == "PATCH")) {
    return refuse(411,
                  "malformed request: a " + head.method +
                      " needs a Content-Length header (0 for an empty body)",
                  "length_required");
  }
  outcome_.kind = FramedHead::Kind::kComplete;
}

FramedHead frame_request_head(std::string_view received, const HeadLimits& limits) {
  HeadFramer framer(limits);
  return framer.feed(received);
}

}  // namespace siesta::server
