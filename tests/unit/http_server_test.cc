// HttpServer's lifecycle around cpp-httplib (stop before, during and after run; a port that
// is taken) and the routes' answers, in process on a loopback port.
#include "server/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "backends/sim/sim_backend.h"
#include "core/clock.h"
#include "server/server_app.h"

namespace siesta::server {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<ServerApp> make_app(const ManualClock& clock, OffloadConfig offload = {}) {
  Result<std::unique_ptr<SimBackend>> backend = SimBackend::create(SimBackendOptions{});
  EXPECT_TRUE(backend.ok()) << backend.status().to_string();
  if (!backend.ok()) return nullptr;
  ServerConfig config;
  config.offload = std::move(offload);
  return std::make_unique<ServerApp>(config, std::move(backend).value(), nullptr, clock);
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
  ManualClock clock;
  OffloadConfig offload;
  offload.idle_seconds = 5;
  offload.disk_dir = "/unused";
  auto app = make_app(clock, offload);
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
  EXPECT_EQ(body["cache"]["idle_seconds"], 5);
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

  httplib::Result missing = client.Get("/v1/models");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  nlohmann::json body = nlohmann::json::parse(missing->body);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["message"], "no such endpoint: GET /v1/models");

  for (const char* path : {"/health", "/v1/status"}) {
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

}  // namespace
}  // namespace siesta::server
