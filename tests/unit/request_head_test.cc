// Framing a request head (request_head.h): where a request ends, and what is refused at once
// rather than waited on.
#include "server/request_head.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace siesta::server
