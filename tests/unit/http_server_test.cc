// HttpServer's lifecycle (stop before, during and after run, with idle connections open; a port
// that is taken), the connection loop's handling of Expect and HEAD, the routes' answers and
// the CORS headers of --cors-origin (a preflight 204 on a kept connection),
// in process on a loopback port.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "core/base/clock.h"
#include "server/cache_dir.h"
#include "server/server_app.h"
#include "tests/support/temp_dir.h"

namespace siesta::server {
namespace {

using ::siesta::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<ServerApp> make_app(const ManualClock& clock, ServerConfig config = {}) {
  config.backend = runtime::BackendKind::kSim;
  config.model = "synthetic:tiny";
  Result<std::unique_ptr<ServerApp>> app = ServerApp::start(std::move(config), clock, nullptr);
  EXPECT_TRUE(app.ok()) << app.status().to_string();
  return app.ok() ? std::move(app).value() : nullptr;
}

// Runs `http` on a thread; the future holds run()'s status.
std::future<Status> run_async(HttpServer& http) {
  return std::async(std::launch::async, [&http] { return http.run(); });
}

TEST(HttpServerTest, HttpUrl) {
  EXPECT_EQ(http_url("127.0.0.1", 8080), "http://127.0.0.1:8080");
  EXPECT_EQ(http_url("::1", 80), "http://[::1]:80");
}

TEST(HttpServerTest, StopBeforeRunMakesRunReturnAtOnce) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer http(*app);
  ASSERT_TRUE(http.bind("127.0.0.1", 0).ok());
  http.stop();
  EXPECT_TRUE(http.run().ok());
}

TEST(HttpServerTest, DestroyedWithoutRunning) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer bound(*app);
  ASSERT_TRUE(bound.bind("127.0.0.1", 0).ok());
  HttpServer unbound(*app);
}

TEST(HttpServerTest, StopWhileRunningAndAgain) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer http(*app);
  Result<int> port = http.bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  std::future<Status> served = run_async(http);
  httplib::Client client("127.0.0.1", *port);
  httplib::Result health = client.Get("/health");  // answered only once run() serves
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // Several stops, from several threads, one of them racing the others: each returns once
  // run() has, and none trips cpp-httplib's "stop once" assertion.
  std::thread other([&http] { http.stop(); });
  http.stop();
  other.join();
  http.stop();
  EXPECT_TRUE(served.get().ok());
}

TEST(HttpServerTest, StopRacingTheStartOfRun) {
  // stop() right after run() was started: whichever side wins, run() returns OK.
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  for (int i = 0; i < 20; ++i) {
    HttpServer http(*app);
    ASSERT_TRUE(http.bind("127.0.0.1", 0).ok());
    std::future<Status> served = run_async(http);
    http.stop();
    EXPECT_TRUE(served.get().ok());
  }
}

TEST(HttpServerTest, APortInUseIsRefused) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer first(*app);
  Result<int> port = first.bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  HttpServer second(*app);
  Result<int> again = second.bind("127.0.0.1", *port);
  EXPECT_EQ(again.status().code(), StatusCode::kIoError);
  EXPECT_THAT(again.status().message(), HasSubstr("cannot listen on http://127.0.0.1:"));
}

TEST(HttpServerTest, StatusReadsTheAppAndUptimeFollowsTheClock) {
  ManualClock clock;  // moved 42 s below: short of the idle time, so it stays resident
  TempDir temp;
  ServerConfig config;
  config.offload.idle_seconds = 100;
  config.offload.disk_dir = temp.file("cache");
  ASSERT_TRUE(prepare_cache_dir(config.offload.disk_dir, nullptr).ok());
  auto app = make_app(clock, config);
  ASSERT_NE(app, nullptr);
  HttpServer http(*app);
  Result<int> port = http.bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::future<Status> served = run_async(http);
  clock.advance(std::chrono::seconds(42));
  httplib::Client client("127.0.0.1", *port);
  httplib::Result status = client.Get("/v1/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  const nlohmann::json body = nlohmann::json::parse(status->body);
  EXPECT_EQ(body["server"]["uptime_seconds"], 42);
  EXPECT_EQ(body["backend"]["name"], "sim");
  EXPECT_EQ(body["cache"]["state"], "resident");
  EXPECT_EQ(body["cache"]["idle_seconds"], 100);
  http.stop();
  EXPECT_TRUE(served.get().ok());
}

TEST(HttpServerTest, ErrorsAreOpenAiShaped) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer http(*app);
  Result<int> port = http.bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::future<Status> served = run_async(http);
  httplib::Client client("127.0.0.1", *port);

  httplib::Result missing = client.Get("/v1/no-such-thing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  nlohmann::json body = nlohmann::json::parse(missing->body);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["message"], "no such endpoint: GET /v1/no-such-thing");

  for (const char* path : {"/health", "/v1/status", "/metrics"}) {
    httplib::Result put = client.Put(path, "x", "text/plain");
    ASSERT_TRUE(put);
    EXPECT_EQ(put->status, 405);
    EXPECT_EQ(put->get_header_value("Allow"), "GET, HEAD");
    body = nlohmann::json::parse(put->body);
    EXPECT_EQ(body["error"]["code"], "method_not_allowed");
    EXPECT_THAT(body["error"]["message"].get<std::string>(),
                HasSubstr(std::string("PUT is not allowed on ") + path));
    httplib::Result patch = client.Patch(path, "x", "text/plain");
    ASSERT_TRUE(patch);
    EXPECT_EQ(patch->status, 405) << path;
    httplib::Result options = client.Options(path);
    ASSERT_TRUE(options);
    EXPECT_EQ(options->status, 405) << path;
  }
  // A regex metacharacter in a path does not match a route by accident.
  httplib::Result dotted = client.Get("/v1xstatus");
  ASSERT_TRUE(dotted);
  EXPECT_EQ(dotted->status, 404);

  http.stop();
  EXPECT_TRUE(served.get().ok());
}

// Sends `request` whole on a fresh loopback connection and returns what the server sent back
// until `until` appears in it, the server closes, or 5 s pass ("" when the connection failed).
// The sending side stays open: cpp-httplib 0.11 drops a chunked request, unanswered, whose
// client has already shut down its sending side.
std::string raw_exchange(int port, const std::string& request, const std::string& until) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{.tv_sec = 5, .tv_usec = 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    while (answer.find(until) == std::string::npos) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      answer.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return answer;
}

// Runs an app's routes on a loopback port for the length of a test.
class Served {
 public:
  explicit Served(ServerApp& app) : http_(app) {
    Result<int> port = http_.bind("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << port.status().to_string();
    port_ = port.ok() ? *port : 0;
    served_ = run_async(http_);
  }
  ~Served() {
    http_.stop();
    EXPECT_TRUE(served_.get().ok());
  }
  httplib::Client client() const { return httplib::Client("127.0.0.1", port_); }
  int port() const { return port_; }

 private:
  HttpServer http_;
  int port_ = 0;
  std::future<Status> served_;
};

TEST(HttpServerTest, MetricsIsPrometheusText) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Result metrics = served.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_cache_state{state=\"disabled\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("# TYPE siesta_cache_save_duration_seconds histogram"));
}

TEST(HttpServerTest, OffloadRequestWithOffloadOffIs400) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Result offload = served.client().Post("/v1/cache/offload", "", "application/json");
  ASSERT_TRUE(offload);
  EXPECT_EQ(offload->status, 400);
  const nlohmann::json body = nlohmann::json::parse(offload->body);
  EXPECT_EQ(body["error"]["code"], "offload_disabled");
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("--cache-idle-seconds"));
  httplib::Result get = served.client().Get("/v1/cache/offload");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
}

TEST(HttpServerTest, OffloadRequestSavesTheSession) {
  TempDir temp;
  ServerConfig config;
  config.offload.idle_seconds = 600;  // only the request offloads
  config.offload.disk_dir = temp.file("cache");
  config.offload.ram_bytes = uint64_t{64} << 20;  // a RAM tier: the snapshot waits in memory
  ASSERT_TRUE(prepare_cache_dir(config.offload.disk_dir, nullptr).ok());
  config.backend = runtime::BackendKind::kSim;
  config.model = "synthetic:tiny";
  Result<std::unique_ptr<ServerApp>> app =
      ServerApp::start(config, SystemClock::instance(), nullptr);
  ASSERT_TRUE(app.ok()) << app.status().to_string();
  Served served(**app);
  httplib::Result offload = served.client().Post("/v1/cache/offload", "", "application/json");
  ASSERT_TRUE(offload);
  EXPECT_EQ(offload->status, 200) << offload->body;
  const std::string state = nlohmann::json::parse(offload->body)["state"];
  EXPECT_TRUE(state == "resident" || state == "saving" || state == "ram") << state;
  // The save the request posted has run once the executor is idle; with the RAM tier, the
  // snapshot is in host memory.
  ASSERT_TRUE((*app)->stack().wait_offload_idle(std::chrono::seconds(20)));
  EXPECT_EQ((*app)->status().cache.state, OffloadState::kRam);
  // Again while offloaded: nothing to do, still 200.
  offload = served.client().Post("/v1/cache/offload", "", "application/json");
  ASSERT_TRUE(offload);
  EXPECT_EQ(offload->status, 200);
  EXPECT_EQ(nlohmann::json::parse(offload->body)["state"], "ram");
}

TEST(HttpServerTest, OversizedBodyIs413OpenAiShaped) {
  ManualClock clock;
  ServerConfig config;
  config.max_body_bytes = 1024;
  auto app = make_app(clock, config);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Result small =
      served.client().Post("/v1/cache/offload", std::string(1024, 'x'), "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 400) << "at the limit the handler runs (offload is off)";
  httplib::Result big =
      served.client().Post("/v1/cache/offload", std::string(1025, 'x'), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  const nlohmann::json body = nlohmann::json::parse(big->body);
  EXPECT_EQ(body["error"]["code"], "request_too_large");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("1024 bytes"));
  // A chunked body cannot slip past the limit: refused (411) before it is read. Sent over a
  // raw socket, whole, before the answer is read: httplib's client could still be writing
  // chunks when the server answers, and report a write error instead.
  const std::string answer = raw_exchange(served.port(),
                                          "POST /v1/cache/offload HTTP/1.1\r\n"
                                          "Host: 127.0.0.1\r\n"
                                          "Content-Type: application/json\r\n"
                                          "Transfer-Encoding: chunked\r\n\r\n"
                                          "5\r\nhello\r\n0\r\n\r\n",
                                          "length_required");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 411"));
  EXPECT_THAT(answer, HasSubstr("\"length_required\""));
}

TEST(HttpServerTest, ApiKeyGuardsEverythingButHealth) {
  ManualClock clock;
  ServerConfig config;
  config.api_key = "sekrit-123";
  auto app = make_app(clock, config);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Client client = served.client();
  httplib::Result health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (const char* path : {"/v1/status", "/metrics", "/v1/no-such-thing"}) {
    httplib::Result refused = client.Get(path);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401) << path;
    EXPECT_THAT(refused->body, Not(HasSubstr("sekrit"))) << path;
  }
  httplib::Result offload = client.Post("/v1/cache/offload", "", "application/json");
  ASSERT_TRUE(offload);
  EXPECT_EQ(offload->status, 401);
  client.set_bearer_token_auth("sekrit-123");
  httplib::Result status = client.Get("/v1/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

// Connects to 127.0.0.1:`port`; -1 on failure.
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{.tv_sec = 5, .tv_usec = 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until `until` is in what came, the peer closes, or the 5 s receive timeout.
std::string read_until(int fd, const std::string& until) {
  std::string answer;
  char buffer[4096];
  while (until.empty() || answer.find(until) == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  return answer;
}

TEST(HttpServerTest, StopDoesNotWaitForIdleConnections) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  HttpServer http(*app);
  Result<int> port = http.bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::future<Status> served = run_async(http);
  const int idle = connect_loopback(*port);
  const int partial = connect_loopback(*port);
  ASSERT_GE(idle, 0);
  ASSERT_GE(partial, 0);
  ASSERT_EQ(::send(partial, "GET /hea", 8, MSG_NOSIGNAL), 8);
  // A request answered on a third connection: by then the loop has accepted all three.
  EXPECT_THAT(raw_exchange(*port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "\"ok\""),
              ::testing::StartsWith("HTTP/1.1 200"));
  http.stop();  // returns although neither connection ever sends a request
  EXPECT_TRUE(served.get().ok());
  EXPECT_EQ(read_until(idle, ""), "") << "closed without an answer";
  EXPECT_EQ(read_until(partial, ""), "");
  ::close(idle);
  ::close(partial);
}

TEST(HttpServerTest, ExpectContinueIsAnsweredOnceBeforeTheBody) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  const int fd = connect_loopback(served.port());
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt": "Hi", "max_tokens": 2})";
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  // The body is sent only once the server asked for it, as curl does.
  const std::string interim = read_until(fd, "\r\n\r\n");
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, body.data(), body.size(), MSG_NOSIGNAL), static_cast<ssize_t>(body.size()));
  const std::string answer = read_until(fd, "");
  ::close(fd);
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 200")) << "exactly one 100 Continue";
  EXPECT_THAT(answer, HasSubstr("text_completion"));
}

TEST(HttpServerTest, HeadAnswersWithoutABody) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  const std::string answer = raw_exchange(
      served.port(), "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "\x01");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\n"));
}

// The head of the first answer in `answers` (up to its blank line).
std::string first_head(const std::string& answers) {
  return answers.substr(0, answers.find("\r\n\r\n") + 2);
}

TEST(HttpServerTest, CorsHeadersOnEveryAnswerToAListedOrigin) {
  ManualClock clock;
  ServerConfig config;
  config.api_key = "sekrit-123";
  config.cors_origins = {"http://ui.example:3000"};
  auto app = make_app(clock, config);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Client client = served.client();
  const httplib::Headers from_ui = {{"Origin", "http://ui.example:3000"}};
  // Routed (cpp-httplib writes it) and refused by the loop's screen (the loop writes it).
  for (const char* path : {"/health", "/v1/status"}) {
    httplib::Result answer = client.Get(path, from_ui);
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, std::string(path) == "/health" ? 200 : 401) << path;
    EXPECT_EQ(answer->get_header_value("Access-Control-Allow-Origin"), "http://ui.example:3000")
        << path;
    EXPECT_EQ(answer->get_header_value("Vary"), "Origin") << path;
    EXPECT_FALSE(answer->has_header("Access-Control-Allow-Methods")) << path;
  }
  // Refused by the body's screen.
  const std::string nul_body("{\"prompt\": \"\0\"}", 15);
  const std::string refused = raw_exchange(
      served.port(),
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://ui.example:3000\r\n"
      "Authorization: Bearer sekrit-123\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(nul_body.size()) + "\r\nConnection: close\r\n\r\n" + nul_body,
      "\x01");
  EXPECT_THAT(refused, ::testing::StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(refused, HasSubstr("\r\nAccess-Control-Allow-Origin: http://ui.example:3000\r\n"));
  // Another origin: only Vary.
  httplib::Result other = client.Get("/health", {{"Origin", "http://evil.example"}});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  EXPECT_EQ(other->get_header_value("Vary"), "Origin");
}

TEST(HttpServerTest, APreflightIs204AndKeepsItsConnection) {
  ManualClock clock;
  ServerConfig config;
  config.api_key = "sekrit-123";
  config.cors_origins = {"http://ui.example:3000"};
  auto app = make_app(clock, config);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  // The preflight, without the key, then the request it allows on the same connection.
  const std::string answers = raw_exchange(
      served.port(),
      "OPTIONS /v1/status HTTP/1.1\r\nHost: x\r\nOrigin: http://ui.example:3000\r\n"
      "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: authorization\r\n"
      "\r\n"
      "GET /v1/status HTTP/1.1\r\nHost: x\r\nOrigin: http://ui.example:3000\r\n"
      "Authorization: Bearer sekrit-123\r\nConnection: close\r\n\r\n",
      "\x01");
  const std::string preflight = first_head(answers);
  EXPECT_THAT(preflight, ::testing::StartsWith("HTTP/1.1 204 No Content\r\n"));
  EXPECT_THAT(preflight, HasSubstr("\r\nAccess-Control-Allow-Origin: http://ui.example:3000\r\n"));
  EXPECT_THAT(preflight,
              HasSubstr("\r\nAccess-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"));
  EXPECT_THAT(preflight, HasSubstr("\r\nAccess-Control-Allow-Headers: Authorization, X-Api-Key, "
                                   "Content-Type, anthropic-version, anthropic-beta\r\n"));
  EXPECT_THAT(preflight, HasSubstr("\r\nAccess-Control-Max-Age: 7200\r\n"));
  EXPECT_THAT(preflight, HasSubstr("\r\nVary: Origin\r\n"));
  EXPECT_THAT(preflight, Not(HasSubstr("Content-Length"))) << "a 204 has none (RFC 9110 8.6)";
  EXPECT_THAT(preflight, Not(HasSubstr("Connection: close")));
  const std::string rest = answers.substr(preflight.size() + 2);
  EXPECT_THAT(rest, ::testing::StartsWith("HTTP/1.1 200")) << answers;
  EXPECT_THAT(rest, HasSubstr("\r\nAccess-Control-Allow-Origin: http://ui.example:3000\r\n"));
  EXPECT_THAT(rest, HasSubstr("\"cache\""));
}

TEST(HttpServerTest, NoCorsHeadersWithoutListedOrigins) {
  ManualClock clock;
  auto app = make_app(clock);
  ASSERT_NE(app, nullptr);
  Served served(*app);
  httplib::Result health = served.client().Get("/health", {{"Origin", "http://ui.example"}});
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_FALSE(health->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(health->has_header("Vary"));
  const std::string preflight =
      raw_exchange(served.port(),
                   "OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://ui.example\r\n"
                   "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n",
                   "\x01");
  EXPECT_THAT(preflight, ::testing::StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(preflight, Not(HasSubstr("Access-Control")));
}

}  // namespace
}  // namespace siesta::server
