// --cors-origin on the real binary, over raw sockets, with the headers a browser sends: without
// the flag a page's cross-origin write is refused as before and no answer carries a CORS
// header; with it, a listed origin's requests are served and every answer to them carries
// Access-Control-Allow-Origin and Vary (GET /health, a chat completion plain and streamed,
// a refusal), its preflight is answered 204 without the key while --api-key is set (the
// request after it needs the key), an origin not listed is refused as before, the flag
// repeats, and a bad value stops the server at start-up.
//
// Every exchange reads the server's whole answer (Connection: close) or the stream's events;
// nothing waits on time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr std::string_view kUi = "http://localhost:5173";
constexpr std::string_view kKey = "cors-e2e-key";

// One answer read whole: its head (header names lower-cased) and body.
struct Answer {
  ResponseHead head;
  std::string body;
  std::string text;  // the bytes as they came, for failure messages
};

// Sends `method path` with `body` and `headers` on a new connection (Connection: close) and
// reads the answer to its end.
Answer exchange(int port, const std::string& method, const std::string& path,
                const std::string& body, const Headers& headers) {
  Answer answer;
  Result<RawConnection> connection = RawConnection::connect(port);
  EXPECT_TRUE(connection.ok()) << connection.status().to_string();
  if (!connection.ok()) return answer;
  Status sent = connection->send_all(http_request_text(method, path, body, headers));
  EXPECT_TRUE(sent.ok()) << sent.to_string();
  Result<std::string> text = connection->read_to_end();
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return answer;
  answer.text = *text;
  const size_t head_end = answer.text.find("\r\n\r\n");
  EXPECT_NE(head_end, std::string::npos) << answer.text;
  if (head_end == std::string::npos || !answer.text.starts_with("HTTP/1.1 ")) return answer;
  answer.head.status = std::stoi(answer.text.substr(9, 3));
  answer.body = answer.text.substr(head_end + 4);
  size_t line = answer.text.find("\r\n") + 2;
  while (line < head_end) {
    const size_t next = answer.text.find("\r\n", line);
    const std::string field = answer.text.substr(line, next - line);
    line = next + 2;
    const size_t colon = field.find(':');
    if (colon == std::string::npos) continue;
    std::string name = field.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t value = field.find_first_not_of(' ', colon + 1);
    answer.head.headers.emplace_back(name, value == std::string::npos ? "" : field.substr(value));
  }
  return answer;
}

// How many headers named `lower_name` the answer has.
size_t count(const ResponseHead& head, std::string_view lower_name) {
  size_t n = 0;
  for (const auto& [name, value] : head.headers) n += name == lower_name ? 1 : 0;
  return n;
}

// What a browser page at `origin` sends with a request to another origin.
Headers from(std::string_view origin, Headers more = {}) {
  more.emplace_back("Origin", std::string(origin));
  more.emplace_back("Sec-Fetch-Site", "cross-site");
  more.emplace_back("Sec-Fetch-Mode", "cors");
  return more;
}

// A browser's preflight for a POST with a key and a JSON body.
Headers preflight_from(std::string_view origin) {
  return from(origin, {{"Access-Control-Request-Method", "POST"},
                       {"Access-Control-Request-Headers", "authorization,content-type"}});
}

std::string chat_body(bool stream) {
  return json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 4},
               {"stream", stream}})
      .dump();
}

// The answer carries the listed origin's headers (and no preflight's).
void expect_allowed(const Answer& answer, std::string_view origin) {
  EXPECT_EQ(answer.head.header("access-control-allow-origin"), origin) << answer.text;
  EXPECT_EQ(count(answer.head, "access-control-allow-origin"), 1u) << answer.text;
  EXPECT_EQ(answer.head.header("vary"), "Origin") << answer.text;
  EXPECT_EQ(count(answer.head, "access-control-allow-methods"), 0u) << answer.text;
}

// The 403 a browser's cross-origin write gets, without a header that would let the page read it.
void expect_refused_cross_origin(const Answer& answer) {
  EXPECT_EQ(answer.head.status, 403) << answer.text;
  EXPECT_EQ(json::parse(answer.body, nullptr, false)["error"]["code"], "cross_origin_request")
      << answer.text;
  EXPECT_EQ(count(answer.head, "access-control-allow-origin"), 0u) << answer.text;
}

TEST(ServerCorsE2eTest, WithoutTheFlagNothingChanges) {
  std::unique_ptr<ServerProcess> server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const Answer write =
      exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false), from(kUi));
  expect_refused_cross_origin(write);
  EXPECT_EQ(count(write.head, "vary"), 0u) << write.text;
  // Reads are served as before, without a CORS header: the page cannot read them.
  const Answer health = exchange(server->port(), "GET", "/health", "", from(kUi));
  EXPECT_EQ(health.head.status, 200) << health.text;
  EXPECT_EQ(count(health.head, "access-control-allow-origin"), 0u) << health.text;
  EXPECT_EQ(count(health.head, "vary"), 0u) << health.text;
  // The preflight is routed as any OPTIONS: 405, so the browser sends nothing more.
  const Answer preflight =
      exchange(server->port(), "OPTIONS", "/v1/chat/completions", "", preflight_from(kUi));
  EXPECT_EQ(preflight.head.status, 405) << preflight.text;
  EXPECT_EQ(count(preflight.head, "access-control-allow-origin"), 0u) << preflight.text;
}

TEST(ServerCorsE2eTest, AListedOriginIsServedWithItsHeaders) {
  std::unique_ptr<ServerProcess> server =
      start_or_die(with(kTinyModel, {"--cors-origin", std::string(kUi)}));
  ASSERT_NE(server, nullptr);
  const Answer health = exchange(server->port(), "GET", "/health", "", from(kUi));
  EXPECT_EQ(health.head.status, 200) << health.text;
  EXPECT_EQ(json::parse(health.body, nullptr, false)["status"], "ok") << health.text;
  expect_allowed(health, kUi);

  const Answer chat =
      exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false), from(kUi));
  ASSERT_EQ(chat.head.status, 200) << chat.text;
  const json body = json::parse(chat.body, nullptr, false);
  EXPECT_EQ(body["object"], "chat.completion") << chat.text;
  EXPECT_EQ(body["usage"]["completion_tokens"], 4) << chat.text;
  expect_allowed(chat, kUi);

  // A request without an Origin (curl, an SDK) is served as before; its answer says that it
  // depends on the Origin, for any cache in between.
  const Answer plain = exchange(server->port(), "GET", "/health", "", {});
  EXPECT_EQ(plain.head.status, 200) << plain.text;
  EXPECT_EQ(count(plain.head, "access-control-allow-origin"), 0u) << plain.text;
  EXPECT_EQ(plain.head.header("vary"), "Origin") << plain.text;
}

TEST(ServerCorsE2eTest, AStreamedAnswerCarriesTheHeaders) {
  std::unique_ptr<ServerProcess> server =
      start_or_die(with(kTinyModel, {"--cors-origin", std::string(kUi)}));
  ASSERT_NE(server, nullptr);
  Result<SseStream> stream =
      SseStream::open(server->port(), "/v1/chat/completions", chat_body(true), from(kUi));
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->head().status, 200);
  EXPECT_THAT(stream->head().header("content-type"), HasSubstr("text/event-stream"));
  EXPECT_EQ(stream->head().header("access-control-allow-origin"), kUi);
  EXPECT_EQ(stream->head().header("vary"), "Origin");
  // The stream itself is whole: chunks, then [DONE].
  std::vector<std::string> events;
  for (;;) {
    Result<std::optional<std::string>> data = stream->next_data();
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    if (!data->has_value()) break;
    events.push_back(**data);
  }
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events.front(), nullptr, false)["object"], "chat.completion.chunk")
      << events.front();
}

TEST(ServerCorsE2eTest, APreflightNeedsNoKeyTheRequestDoes) {
  std::unique_ptr<ServerProcess> server = start_or_die(
      with(kTinyModel, {"--cors-origin", std::string(kUi), "--api-key", std::string(kKey)}));
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/v1/chat/completions", "/v1/messages", "/v1/models"}) {
    SCOPED_TRACE(path);
    const Answer preflight = exchange(server->port(), "OPTIONS", path, "", preflight_from(kUi));
    EXPECT_EQ(preflight.head.status, 204) << preflight.text;
    EXPECT_EQ(preflight.body, "") << preflight.text;
    EXPECT_EQ(count(preflight.head, "content-length"), 0u) << preflight.text;
    EXPECT_EQ(preflight.head.header("access-control-allow-origin"), kUi) << preflight.text;
    EXPECT_EQ(preflight.head.header("vary"), "Origin") << preflight.text;
    EXPECT_EQ(preflight.head.header("access-control-allow-methods"), "GET, POST, DELETE, OPTIONS")
        << preflight.text;
    EXPECT_EQ(preflight.head.header("access-control-allow-headers"),
              "Authorization, X-Api-Key, Content-Type, anthropic-version, anthropic-beta")
        << preflight.text;
    EXPECT_EQ(preflight.head.header("access-control-max-age"), "7200") << preflight.text;
  }
  // The request itself without the key: 401, which the page can read.
  const Answer keyless =
      exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false), from(kUi));
  EXPECT_EQ(keyless.head.status, 401) << keyless.text;
  expect_allowed(keyless, kUi);
  // With the key, as the page sends it: served.
  const Answer keyed = exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false),
                                from(kUi, {{"Authorization", "Bearer " + std::string(kKey)}}));
  EXPECT_EQ(keyed.head.status, 200) << keyed.text;
  expect_allowed(keyed, kUi);
  // Another origin's preflight needs the key as before, and gets no CORS header.
  const Answer other = exchange(server->port(), "OPTIONS", "/v1/chat/completions", "",
                                preflight_from("http://evil.example"));
  EXPECT_EQ(other.head.status, 401) << other.text;
  EXPECT_EQ(count(other.head, "access-control-allow-origin"), 0u) << other.text;
}

TEST(ServerCorsE2eTest, AnOriginNotListedIsRefusedAsBefore) {
  std::unique_ptr<ServerProcess> server =
      start_or_die(with(kTinyModel, {"--cors-origin", std::string(kUi)}));
  ASSERT_NE(server, nullptr);
  // Another port, scheme or host; the listed one with a trailing slash or in capitals (no
  // browser sends either); the opaque origin.
  for (const char* origin :
       {"http://localhost:5174", "https://localhost:5173", "http://evil.example",
        "http://localhost:5173/", "HTTP://LOCALHOST:5173", "null"}) {
    SCOPED_TRACE(origin);
    expect_refused_cross_origin(
        exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false), from(origin)));
    const Answer preflight =
        exchange(server->port(), "OPTIONS", "/v1/chat/completions", "", preflight_from(origin));
    EXPECT_EQ(preflight.head.status, 405) << preflight.text;
    EXPECT_EQ(count(preflight.head, "access-control-allow-origin"), 0u) << preflight.text;
    const Answer read = exchange(server->port(), "GET", "/health", "", from(origin));
    EXPECT_EQ(read.head.status, 200) << read.text;
    EXPECT_EQ(count(read.head, "access-control-allow-origin"), 0u) << read.text;
  }
}

TEST(ServerCorsE2eTest, TheFlagRepeats) {
  constexpr std::string_view kOther = "https://chat.example";
  // The second written with its default port and in capitals: kept as a browser sends it.
  std::unique_ptr<ServerProcess> server = start_or_die(with(
      kTinyModel, {"--cors-origin", std::string(kUi), "--cors-origin=HTTPS://Chat.Example:443"}));
  ASSERT_NE(server, nullptr);
  for (std::string_view origin : {kUi, kOther}) {
    SCOPED_TRACE(origin);
    const Answer chat =
        exchange(server->port(), "POST", "/v1/chat/completions", chat_body(false), from(origin));
    EXPECT_EQ(chat.head.status, 200) << chat.text;
    expect_allowed(chat, origin);
    const Answer preflight =
        exchange(server->port(), "OPTIONS", "/v1/chat/completions", "", preflight_from(origin));
    EXPECT_EQ(preflight.head.status, 204) << preflight.text;
    EXPECT_EQ(preflight.head.header("access-control-allow-origin"), origin) << preflight.text;
  }
  expect_refused_cross_origin(exchange(server->port(), "POST", "/v1/chat/completions",
                                       chat_body(false), from("https://third.example")));
}

TEST(ServerCorsE2eTest, ABadValueStopsTheStart) {
  for (const auto& [value, rule] : std::vector<std::pair<std::string, std::string>>{
           {"*", "is refused: name each origin"},
           {"http://localhost:5173/", "must not end in a slash"},
           {"localhost:5173", "must be scheme://host[:port]"}}) {
    Result<ProcessExit> run =
        ServerProcess::run_to_exit(with(kTinyModel, {"--cors-origin", value}));
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    EXPECT_EQ(run->exit_code, 2) << run->describe() << "\nstderr: " << run->stderr_text;
    EXPECT_THAT(run->stderr_text, StartsWith("siesta-server: --cors-origin \"" + value + "\" "));
    EXPECT_THAT(run->stderr_text, HasSubstr(rule));
    EXPECT_EQ(run->stdout_text, "");
  }
}

}  // namespace
}  // namespace siesta::testing
