// Framing a request head (request_head.h): where a request ends, and what is refused at once
// rather than waited on. The HeadFramer tests feed the bytes one at a time and check that a
// head is refused at exactly its first bad byte and never before, and that how the bytes are
// split into reads never changes the outcome.
#include "server/request_head.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace siesta::server {
namespace {

using Kind = FramedHead::Kind;
using ::testing::HasSubstr;

FramedHead frame(const std::string& text, HeadLimits limits = {}) {
  return frame_request_head(text, limits);
}

// The refusal's status, or 0 when the head was not refused.
int refused_with(const std::string& text, HeadLimits limits = {}) {
  const FramedHead framed = frame(text, limits);
  return framed.kind == Kind::kRefused ? framed.refusal.http_status : 0;
}

TEST(RequestHeadTest, ASimpleGet) {
  const std::string text = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const FramedHead framed = frame(text + "GET /next");
  ASSERT_EQ(framed.kind, Kind::kComplete);
  EXPECT_EQ(framed.head.method, "GET");
  EXPECT_EQ(framed.head.target, "/health");
  EXPECT_TRUE(framed.head.http11);
  EXPECT_TRUE(framed.head.keep_alive);
  EXPECT_EQ(framed.head.head_bytes, text.size());
  EXPECT_EQ(framed.head.end(), text.size()) << "the pipelined bytes after it are not its own";
  ASSERT_NE(framed.head.field("host"), nullptr);
  EXPECT_EQ(*framed.head.field("HOST"), "x");
}

TEST(RequestHeadTest, APostWithItsBody) {
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length:  12 \r\n"
      "Expect: 100-Continue\r\n\r\n";
  const FramedHead framed = frame(head);  // the body has not come yet
  ASSERT_EQ(framed.kind, Kind::kComplete);
  EXPECT_EQ(framed.head.content_length, 12u);
  EXPECT_EQ(framed.head.end(), head.size() + 12);
  EXPECT_TRUE(framed.head.expect_continue);
}

TEST(RequestHeadTest, IncompleteUntilTheBlankLine) {
  const std::string text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_EQ(frame(text.substr(0, n)).kind, Kind::kIncomplete) << n << " bytes";
  }
  EXPECT_EQ(frame(text).kind, Kind::kComplete);
}

TEST(RequestHeadTest, EmptyLinesBeforeTheRequestAreSkipped) {
  const FramedHead framed = frame("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(framed.kind, Kind::kComplete);
  EXPECT_EQ(framed.head.skipped_bytes, 4u);
  EXPECT_EQ(framed.head.method, "GET");
}

TEST(RequestHeadTest, ContentLengthRules) {
  const std::string start = "POST / HTTP/1.1\r\nHost: x\r\n";
  EXPECT_EQ(refused_with(start + "Content-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(refused_with(start + "Content-Length: +5\r\n\r\n"), 400);
  EXPECT_EQ(refused_with(start + "Content-Length: 5x\r\n\r\n"), 400);
  EXPECT_EQ(refused_with(start + "Content-Length: 0x10\r\n\r\n"), 400);
  EXPECT_EQ(refused_with(start + "Content-Length: \r\n\r\n"), 400);
  EXPECT_EQ(refused_with(start + "Content-Length: 5, 5\r\n\r\n"), 400);
  const FramedHead two_different = frame(start + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n");
  ASSERT_EQ(two_different.kind, Kind::kRefused);
  EXPECT_THAT(two_different.refusal.message, HasSubstr("two different Content-Length"));
  const FramedHead the_same = frame(start + "Content-Length: 5\r\ncontent-length: 05\r\n\r\n");
  ASSERT_EQ(the_same.kind, Kind::kComplete);
  EXPECT_EQ(the_same.head.content_length, 5u);
  // Beyond 64 bits: saturated, so any body limit refuses it (413 is the policy's answer).
  const FramedHead huge = frame(start + "Content-Length: 99999999999999999999999\r\n\r\n");
  ASSERT_EQ(huge.kind, Kind::kComplete);
  EXPECT_EQ(huge.head.content_length, UINT64_MAX);
}

TEST(RequestHeadTest, BodiesNeedAContentLength) {
  for (const char* method : {"POST", "PUT", "PATCH"}) {
    const FramedHead framed = frame(std::string(method) + " / HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_EQ(framed.kind, Kind::kRefused) << method;
    EXPECT_EQ(framed.refusal.http_status, 411);
    EXPECT_THAT(framed.refusal.message, HasSubstr("needs a Content-Length"));
  }
  EXPECT_EQ(frame("GET / HTTP/1.1\r\nHost: x\r\n\r\n").head.content_length, 0u);
  EXPECT_EQ(refused_with("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"), 411);
  EXPECT_EQ(refused_with("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n"),
            411);
}

TEST(RequestHeadTest, BytesThatAreRefusedAtOnce) {
  // Refused as soon as the byte is there, without waiting for the end of the head.
  EXPECT_EQ(
      refused_with("GET / HTTP/1.1\r\nAuthorization: Bearer k" + std::string(1, '\0') + "junk"),
      400);
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nHost: x\n"), 400);   // LF without CR
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nHost: x\rX"), 400);  // CR without LF
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nX: a\x01"
                         "b"),
            400);  // a control byte
  // HTAB and obs-text are fine in a value.
  EXPECT_EQ(frame("GET / HTTP/1.1\r\nHost: x\r\nX: a\tb \xc3\xa9\r\n\r\n").kind, Kind::kComplete);
}

TEST(RequestHeadTest, LineSyntax) {
  EXPECT_EQ(refused_with("GET  / HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("GET / HTTP/1.1 \r\nHost: x\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("G(T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
  EXPECT_EQ(refused_with("GET / FTP/1.1\r\nHost: x\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nHost : x\r\n\r\n"), 400);  // space before ':'
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nno colon\r\n\r\n"), 400);
}

TEST(RequestHeadTest, Host) {
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
  EXPECT_EQ(frame("GET / HTTP/1.0\r\n\r\n").kind, Kind::kComplete);
}

TEST(RequestHeadTest, ConnectionAndVersion) {
  EXPECT_FALSE(frame("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(frame("GET / HTTP/1.1\r\nHost: x\r\nConnection: te, close\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(frame("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
  const FramedHead old = frame("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_TRUE(old.head.keep_alive);
  EXPECT_FALSE(old.head.http11);
}

TEST(RequestHeadTest, Limits) {
  HeadLimits limits;
  limits.max_line_bytes = 64;
  limits.max_head_bytes = 256;
  limits.max_fields = 3;
  EXPECT_EQ(refused_with("GET /" + std::string(80, 'a'), limits), 414);  // before its end
  EXPECT_EQ(refused_with("GET / HTTP/1.1\r\nX: " + std::string(80, 'a'), limits), 431);
  std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 3; ++i) many += "X" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(refused_with(many + "\r\n", limits), 431);
  std::string long_head = "GET / HTTP/1.1\r\n";
  while (long_head.size() <= limits.max_head_bytes)
    long_head += "X: " + std::string(40, 'b') + "\r\n";
  limits.max_fields = 100;
  EXPECT_EQ(refused_with(long_head, limits), 431);
}

// ---- HeadFramer: one byte at a time --------------------------------------------------------

// What feeding a text one byte at a time gives: the outcome, and how many bytes had been fed
// when it was decided (0: never).
struct Fed {
  FramedHead outcome;
  size_t decided_at = 0;
};

Fed feed_bytewise(std::string_view text, const HeadLimits& limits = {}) {
  HeadFramer framer(limits);
  for (size_t i = 0; i < text.size(); ++i) {
    const FramedHead& outcome = framer.feed(text.substr(i, 1));
    if (outcome.kind != Kind::kIncomplete) return {outcome, i + 1};
  }
  return {framer.outcome(), 0};
}

// `valid_prefix` then `bad` then more bytes (which must not matter): refused with `status` at
// `bad`'s first byte, not a byte earlier, and the message says `message_part`.
void expect_refused_at(const std::string& valid_prefix, const std::string& bad, int status,
                       std::string_view message_part, const HeadLimits& limits = {}) {
  SCOPED_TRACE(::testing::PrintToString(valid_prefix + bad));
  const Fed fed = feed_bytewise(valid_prefix + bad + "\r\nHost: x\r\n\r\n", limits);
  ASSERT_EQ(fed.outcome.kind, Kind::kRefused) << "refused nowhere";
  EXPECT_EQ(fed.decided_at, valid_prefix.size() + 1) << fed.outcome.refusal.message;
  EXPECT_EQ(fed.outcome.refusal.http_status, status);
  EXPECT_THAT(fed.outcome.refusal.message, HasSubstr(std::string(message_part)));
  // The same when it all comes in one read.
  const FramedHead whole = frame(valid_prefix + bad, limits);
  ASSERT_EQ(whole.kind, Kind::kRefused);
  EXPECT_EQ(whole.refusal.message, fed.outcome.refusal.message);
}

const std::string kRequestLine = "GET / HTTP/1.1\r\n";

TEST(HeadFramerTest, AMethodByteThatIsNotATokenCharacter) {
  expect_refused_at("G", "(", 400, "the method is not a token");
  expect_refused_at("GET", "\x80", 400, "the method is not a token");
  expect_refused_at("GET", "\t", 400, "the method is not a token");
  expect_refused_at("", " ", 400, "the method is not a token");  // no method before the space
  expect_refused_at("GET", "\r", 400, "METHOD SP TARGET SP HTTP-VERSION");
}

TEST(HeadFramerTest, ATargetByteOutsideVisibleAscii) {
  expect_refused_at("GET /a", "\x80", 400, "outside visible ASCII");
  expect_refused_at("GET /a", "\t", 400, "outside visible ASCII");
  expect_refused_at("GET /a", "\r", 400, "METHOD SP TARGET SP HTTP-VERSION");  // no version
}

TEST(HeadFramerTest, AVersionByteThatCannotContinueHttpDigitDotDigit) {
  expect_refused_at("GET / ", "h", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP", "S", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP/", "x", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP/1", ",", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP/1.", "x", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP/1.1", "1", 400, "does not end in HTTP/1.1 or HTTP/1.0");
  expect_refused_at("GET / HTTP/1", "\r", 400, "does not end in HTTP/1.1 or HTTP/1.0");
}

TEST(HeadFramerTest, AnUnsupportedVersionIs505AtItsLastDigit) {
  // One digit each side of the dot: the last digit completes the version.
  expect_refused_at("GET / HTTP/2.", "0", 505, "HTTP version not supported");
  expect_refused_at("GET / HTTP/1.", "2", 505, "HTTP version not supported");
  expect_refused_at("GET / HTTP/0.", "9", 505, "HTTP version not supported");
}

TEST(HeadFramerTest, AnExtraSpace) {
  expect_refused_at("GET ", " ", 400, "METHOD SP TARGET SP HTTP-VERSION");
  expect_refused_at("GET / ", " ", 400, "METHOD SP TARGET SP HTTP-VERSION");
  expect_refused_at("GET / HTTP/1.1", " ", 400, "METHOD SP TARGET SP HTTP-VERSION");
  expect_refused_at("GET / HTTP/1", " ", 400, "METHOD SP TARGET SP HTTP-VERSION");
}

TEST(HeadFramerTest, AHeaderNameByteThatIsNotATokenCharacter) {
  expect_refused_at(kRequestLine + "Ho", " ", 400, "not NAME: VALUE");
  expect_refused_at(kRequestLine + "Host", " ", 400, "not NAME: VALUE");  // space before ':'
  expect_refused_at(kRequestLine + "Ho", "(", 400, "not NAME: VALUE");
  expect_refused_at(kRequestLine + "Host", "\xff", 400, "not NAME: VALUE");
  expect_refused_at(kRequestLine, ":", 400, "not NAME: VALUE");            // an empty name
  expect_refused_at(kRequestLine + "Host", "\r", 400, "not NAME: VALUE");  // no colon
}

TEST(HeadFramerTest, AFoldedLine) {
  expect_refused_at(kRequestLine + "Host: x\r\n", " ", 400, "folded");
  expect_refused_at(kRequestLine + "Host: x\r\n", "\t", 400, "folded");
  expect_refused_at(kRequestLine, " ", 400, "folded");  // even the first header line
}

TEST(HeadFramerTest, ABareLf) {
  expect_refused_at("", "\n", 400, "LF without CR");
  expect_refused_at("\r\n", "\n", 400, "LF without CR");  // after an empty line
  expect_refused_at("GET /health HTTP/1.1", "\n", 400, "LF without CR");
  expect_refused_at("GET /hea", "\n", 400, "LF without CR");
  expect_refused_at(kRequestLine + "Host: x", "\n", 400, "LF without CR");
  expect_refused_at(kRequestLine + "Ho", "\n", 400, "LF without CR");
  expect_refused_at(kRequestLine + "Host: x\r\n", "\n", 400, "LF without CR");  // the blank line
}

TEST(HeadFramerTest, ACrNotFollowedByLf) {
  expect_refused_at("\r", "X", 400, "CR not followed by LF");
  expect_refused_at("GET / HTTP/1.1\r", "X", 400, "CR not followed by LF");
  expect_refused_at(kRequestLine + "Host: x\r", "\r", 400, "CR not followed by LF");
  expect_refused_at(kRequestLine + "Host: x\r\n\r", "X", 400, "CR not followed by LF");
}

TEST(HeadFramerTest, NulAndControlBytes) {
  expect_refused_at("", std::string(1, '\0'), 400, "NUL");
  expect_refused_at("GET /", std::string(1, '\0'), 400, "NUL");
  expect_refused_at(kRequestLine + "X: a", std::string(1, '\0'), 400, "NUL");
  expect_refused_at("GET /", "\x01", 400, "control byte");
  expect_refused_at(kRequestLine + "X: a", "\x7f", 400, "control byte");
  expect_refused_at(kRequestLine + "X: a", "\x1b", 400, "control byte");
  // A TLS ClientHello's first byte (a handshake record): refused before the second arrives.
  expect_refused_at("", "\x16\x03\x01", 400, "control byte");
}

TEST(HeadFramerTest, LimitsAtTheFirstByteBeyondThem) {
  HeadLimits limits;
  limits.max_line_bytes = 16;  // with CRLF: "GET / HTTP/1.1" just fits
  limits.max_fields = 2;
  // A line of 14 bytes fits with its CRLF; its 15th byte cannot.
  expect_refused_at("GET /" + std::string(9, 'a'), "a", 414, "request line is longer", limits);
  expect_refused_at(kRequestLine + "X: " + std::string(11, 'a'), "a", 431, "header line", limits);
  EXPECT_EQ(
      feed_bytewise(kRequestLine + "X: " + std::string(11, 'a') + "\r\nHost: x\r\n\r\n", limits)
          .outcome.kind,
      Kind::kComplete);
  // A third header line is refused at its first byte.
  expect_refused_at(kRequestLine + "Host: x\r\nX: y\r\n", "Z", 431, "more than 2 header lines",
                    limits);
  limits.max_head_bytes = 40;
  const std::string head = kRequestLine + "Host: x\r\nX: yyyyyyyyyy\r\n";  // 40 bytes
  ASSERT_EQ(head.size(), 40u);
  expect_refused_at(head, "\r", 431, "request head is longer than 40", limits);
}

TEST(HeadFramerTest, AValidHeadByteByByteIsTheWholeHead) {
  const std::string text =
      "\r\nPOST /v1/completions?x=1 HTTP/1.1\r\nHost: example\r\nContent-Length:  12 \r\n"
      "X-Value:\t a \xc3\xa9 b\t \r\nConnection: close\r\nExpect: 100-continue\r\n\r\n";
  const Fed fed = feed_bytewise(text + "body bytes..");
  ASSERT_EQ(fed.outcome.kind, Kind::kComplete) << fed.outcome.refusal.message;
  EXPECT_EQ(fed.decided_at, text.size()) << "complete at the blank line's LF, not before";
  const FramedHead whole = frame(text);
  ASSERT_EQ(whole.kind, Kind::kComplete);
  const RequestHead& a = fed.outcome.head;
  const RequestHead& b = whole.head;
  EXPECT_EQ(a.skipped_bytes, 2u);
  EXPECT_EQ(a.skipped_bytes, b.skipped_bytes);
  EXPECT_EQ(a.head_bytes, text.size() - 2);
  EXPECT_EQ(a.head_bytes, b.head_bytes);
  EXPECT_EQ(a.method, "POST");
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.target, "/v1/completions?x=1");
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.http11, b.http11);
  EXPECT_EQ(a.fields, b.fields);
  ASSERT_NE(a.field("x-value"), nullptr);
  EXPECT_EQ(*a.field("x-value"), "a \xc3\xa9 b") << "spaces and tabs around a value are not kept";
  EXPECT_EQ(a.content_length, 12u);
  EXPECT_EQ(a.content_length, b.content_length);
  EXPECT_FALSE(a.keep_alive);
  EXPECT_EQ(a.keep_alive, b.keep_alive);
  EXPECT_TRUE(a.expect_continue);
  EXPECT_EQ(a.expect_continue, b.expect_continue);
}

TEST(HeadFramerTest, NoByteIsLookedAtAfterTheOutcome) {
  HeadFramer framer;
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(framer.feed(head + std::string(1, '\0')).kind, Kind::kComplete);
  EXPECT_EQ(framer.consumed(), head.size());
  EXPECT_EQ(framer.feed("\n\n\n").kind, Kind::kComplete) << "decided: later bytes do not count";
  EXPECT_EQ(framer.consumed(), head.size());
  EXPECT_EQ(framer.outcome().head.target, "/");

  HeadFramer refused;
  EXPECT_EQ(refused.feed("G\nET").kind, Kind::kRefused);
  EXPECT_EQ(refused.consumed(), 2u);
  EXPECT_EQ(refused.feed("ET / HTTP/1.1\r\nHost: x\r\n\r\n").kind, Kind::kRefused);
}

TEST(HeadFramerTest, ResetStartsTheNextRequest) {
  HeadFramer framer;
  EXPECT_FALSE(framer.began_request());
  EXPECT_EQ(framer.feed("\r\n\r").kind, Kind::kIncomplete);
  EXPECT_FALSE(framer.began_request()) << "empty lines before a request are not one";
  EXPECT_EQ(framer.feed("\nG").kind, Kind::kIncomplete);
  EXPECT_TRUE(framer.began_request());
  EXPECT_EQ(framer.feed("ET / HTTP/1.1\r\nHost: a\r\n\r\n").kind, Kind::kComplete);
  framer.reset();
  EXPECT_FALSE(framer.began_request());
  EXPECT_EQ(framer.consumed(), 0u);
  const FramedHead& next = framer.feed("HEAD /b HTTP/1.0\r\n\r\n");
  ASSERT_EQ(next.kind, Kind::kComplete);
  EXPECT_EQ(next.head.method, "HEAD");
  EXPECT_EQ(next.head.target, "/b");
  EXPECT_TRUE(next.head.fields.empty()) << "nothing of the request before";
  EXPECT_EQ(next.head.skipped_bytes, 0u);
}

// The outcome of a head never depends on how its bytes were split into reads.
TEST(HeadFramerTest, EverySplitGivesTheSameOutcome) {
  HeadLimits limits;
  limits.max_line_bytes = 48;
  limits.max_head_bytes = 96;
  limits.max_fields = 3;
  const std::vector<std::string> texts = {
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /next",
      "\r\n\r\nPOST /v1/completions HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
      "GET /a HTTP/1.1\r\nHost: x\r\nX: a\tb \xc3\xa9\r\n\r\n",
      "GET /health HTTP/1.1\nHost: x\n\n",
      std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),
      "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET /" + std::string(60, 'a') + " HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\n" + std::string(3, 'X') + ": " + std::string(40, 'y') +
          "\r\nZ: " + std::string(40, 'z') + "\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x",  // incomplete
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(::testing::PrintToString(text));
    const FramedHead whole = frame(text, limits);
    for (size_t split = 0; split <= text.size(); ++split) {
      HeadFramer framer(limits);
      framer.feed(std::string_view(text).substr(0, split));
      const FramedHead& parts = framer.feed(std::string_view(text).substr(split));
      ASSERT_EQ(parts.kind, whole.kind) << "split at " << split;
      EXPECT_EQ(parts.refusal.http_status, whole.refusal.http_status) << "split at " << split;
      EXPECT_EQ(parts.refusal.message, whole.refusal.message) << "split at " << split;
      EXPECT_EQ(parts.head.fields, whole.head.fields) << "split at " << split;
      EXPECT_EQ(parts.head.head_bytes, whole.head.head_bytes) << "split at " << split;
    }
    const Fed fed = feed_bytewise(text, limits);
    EXPECT_EQ(fed.outcome.kind, whole.kind);
    EXPECT_EQ(fed.outcome.refusal.message, whole.refusal.message);
  }
}

}  // namespace
}  // namespace siesta::server
