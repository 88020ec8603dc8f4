// The request policy (request_policy.h): which heads are refused before their body is read,
// with which status, in which order; and the body check.
#include "server/request_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace siesta::server {
namespace {

using ::testing::HasSubstr;

httplib::Request request(const std::string& method, const std::string& path,
                         const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  httplib::Request r;
  r.method = method;
  r.path = path;
  for (const auto& [name, value] : headers) r.headers.emplace(name, value);
  return r;
}

class RequestPolicyTest : public ::testing::Test {
 protected:
  RequestPolicyTest() { config_.max_body_bytes = 1000; }
  RequestPolicy policy() const { return RequestPolicy(config_, {"/v1/completions"}); }
  // The refusal's status and code, or {0, ""} when admitted.
  std::pair<int, std::string> judge(const httplib::Request& r) const {
    httplib::Response response;
    if (policy().admit(r, response)) return {0, ""};
    const nlohmann::json body = nlohmann::json::parse(response.body);
    return {response.status, body["error"]["code"].get<std::string>()};
  }
  ServerConfig config_;
};

TEST_F(RequestPolicyTest, AnOrdinaryRequestIsAdmitted) {
  EXPECT_EQ(judge(request("POST", "/v1/completions",
                          {{"Host", "127.0.0.1:8080"},
                           {"Content-Type", "application/json"},
                           {"Content-Length", "20"}}))
                .first,
            0);
  EXPECT_EQ(judge(request("GET", "/v1/models", {{"Host", "h"}})).first, 0);
}

TEST_F(RequestPolicyTest, CrossOriginWrites) {
  const auto from = [](std::string origin, std::string host = "127.0.0.1:8080") {
    return request("POST", "/v1/cache/offload", {{"Host", host}, {"Origin", std::move(origin)}});
  };
  EXPECT_FALSE(is_cross_origin_write(from("http://127.0.0.1:8080")));
  EXPECT_FALSE(is_cross_origin_write(from("HTTP://LOCALHOST:8080", "localhost:8080")));
  EXPECT_FALSE(is_cross_origin_write(from("http://localhost", "localhost:80")));
  EXPECT_FALSE(is_cross_origin_write(from("https://api.example", "api.example")));  // a TLS proxy
  EXPECT_FALSE(is_cross_origin_write(from("http://[::1]:8080", "[::1]:8080")));
  EXPECT_TRUE(is_cross_origin_write(from("http://evil.example")));
  EXPECT_TRUE(is_cross_origin_write(from("http://127.0.0.1:3000")));  // another port
  EXPECT_TRUE(is_cross_origin_write(from("null")));
  EXPECT_TRUE(is_cross_origin_write(from("http://127.0.0.1:8080/path")));
  EXPECT_TRUE(is_cross_origin_write(from("file://")));
  httplib::Request no_host = from("http://127.0.0.1:8080");
  no_host.headers.erase("Host");
  EXPECT_TRUE(is_cross_origin_write(no_host));
  EXPECT_TRUE(is_cross_origin_write(request("DELETE", "/x", {{"Sec-Fetch-Site", "cross-site"}})));
  EXPECT_FALSE(is_cross_origin_write(request("PUT", "/x", {{"Sec-Fetch-Site", "same-origin"}})));
  // Reads stay open, and a client that sends neither header is not a browser.
  EXPECT_FALSE(is_cross_origin_write(request("GET", "/x", {{"Origin", "http://evil.example"}})));
  EXPECT_FALSE(is_cross_origin_write(request("POST", "/x", {{"Host", "h"}})));
  EXPECT_EQ(judge(from("http://evil.example")),
            std::make_pair(403, std::string("cross_origin_request")));
}

TEST_F(RequestPolicyTest, JsonMediaType) {
  EXPECT_TRUE(is_json_media_type("application/json"));
  EXPECT_TRUE(is_json_media_type("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(is_json_media_type(" application/json "));
  EXPECT_FALSE(is_json_media_type("text/plain"));
  EXPECT_FALSE(is_json_media_type("application/json-patch+json"));
  EXPECT_FALSE(is_json_media_type(""));
  const auto post = [](std::vector<std::pair<std::string, std::string>> headers) {
    headers.emplace_back("Host", "h");
    return request("POST", "/v1/completions", headers);
  };
  EXPECT_EQ(judge(post({{"Content-Length", "5"}, {"Content-Type", "text/plain"}})),
            std::make_pair(415, std::string("unsupported_media_type")));
  EXPECT_EQ(judge(post({{"Content-Length", "5"}})).first, 415);
  EXPECT_EQ(judge(post({{"Content-Length", "0"}})).first, 0) << "no body, nothing to parse";
  // Only the routes that read JSON care (405 and 404 come from routing).
  EXPECT_EQ(
      judge(request("PUT", "/health", {{"Content-Length", "1"}, {"Content-Type", "x/y"}})).first,
      0);
}

TEST_F(RequestPolicyTest, BodyLimitsAndChunks) {
  EXPECT_EQ(judge(request("POST", "/v1/completions",
                          {{"Content-Length", "1001"}, {"Content-Type", "application/json"}})),
            std::make_pair(413, std::string("request_too_large")));
  // Exactly the limit is admitted (guards a limit off by one).
  EXPECT_EQ(judge(request("POST", "/v1/completions",
                          {{"Content-Length", "1000"}, {"Content-Type", "application/json"}}))
                .first,
            0);
  EXPECT_EQ(judge(request("POST", "/v1/completions", {{"Transfer-Encoding", "gzip, chunked"}})),
            std::make_pair(411, std::string("length_required")));
}

TEST_F(RequestPolicyTest, TheKeyComesFirst) {
  config_.api_key = "k";
  // Everything wrong at once: the unauthenticated client learns only that it needs the key.
  const httplib::Request r = request("POST", "/v1/completions",
                                     {{"Origin", "http://evil.example"},
                                      {"Content-Length", "999999"},
                                      {"Content-Type", "text/plain"}});
  EXPECT_EQ(judge(r).first, 401);
}

TEST_F(RequestPolicyTest, ABodyWithANul) {
  httplib::Response response;
  const httplib::Request r = request("POST", "/v1/completions");
  EXPECT_TRUE(policy().admit_body(r, "{\"prompt\": \"x\"}", response));
  EXPECT_FALSE(policy().admit_body(r, std::string("{}\0junk", 7), response));
  EXPECT_EQ(response.status, 400);
  EXPECT_THAT(response.body, HasSubstr("NUL byte at offset 2"));
  httplib::Response other;
  EXPECT_TRUE(policy().admit_body(request("POST", "/other"), std::string("\0", 1), other));
}

// ---- Cross-origin access (--cors-origin) ------------------------------------------------------

class CorsPolicyTest : public RequestPolicyTest {
 protected:
  CorsPolicyTest() { config_.cors_origins = {"http://localhost:3000", "https://ui.example"}; }
  // The CORS headers of the answer to `r`, as name: value lines.
  std::vector<std::string> headers_of(const httplib::Request& r) const {
    std::vector<std::string> out;
    for (const auto& [name, value] : policy().cors_headers(r)) out.push_back(name + ": " + value);
    return out;
  }
};

httplib::Request write_from(const std::string& origin) {
  return request("POST", "/v1/completions",
                 {{"Host", "127.0.0.1:8080"},
                  {"Origin", origin},
                  {"Sec-Fetch-Site", "cross-site"},
                  {"Content-Type", "application/json"},
                  {"Content-Length", "20"}});
}

httplib::Request preflight_from(const std::string& origin, const std::string& path = "/v1/chat") {
  return request("OPTIONS", path,
                 {{"Host", "127.0.0.1:8080"},
                  {"Origin", origin},
                  {"Access-Control-Request-Method", "POST"},
                  {"Access-Control-Request-Headers", "authorization, content-type"}});
}

TEST_F(RequestPolicyTest, WithoutListedOriginsNothingChanges) {
  config_.api_key = "k";
  EXPECT_TRUE(policy().cors_headers(write_from("http://localhost:3000")).empty());
  EXPECT_FALSE(policy().is_preflight(preflight_from("http://localhost:3000")));
  // A preflight needs the key as any request (so the browser goes no further).
  EXPECT_EQ(judge(preflight_from("http://localhost:3000")).first, 401);
  config_.api_key.clear();
  EXPECT_EQ(judge(preflight_from("http://localhost:3000")).first, 0) << "routed: 405";
  EXPECT_EQ(judge(write_from("http://localhost:3000")),
            std::make_pair(403, std::string("cross_origin_request")));
}

TEST_F(CorsPolicyTest, AListedOriginMayWrite) {
  EXPECT_EQ(judge(write_from("http://localhost:3000")).first, 0);
  EXPECT_EQ(judge(write_from("https://ui.example")).first, 0);
  httplib::Request without_fetch_site = write_from("https://ui.example");
  without_fetch_site.headers.erase("Sec-Fetch-Site");
  EXPECT_EQ(judge(without_fetch_site).first, 0);
  // The rest of the policy still holds for it.
  httplib::Request form = write_from("http://localhost:3000");
  form.headers.erase("Content-Type");
  form.headers.emplace("Content-Type", "text/plain");
  EXPECT_EQ(judge(form).first, 415);
}

TEST_F(CorsPolicyTest, AnyOtherOriginIsRefusedAsBefore) {
  // Byte for byte, as a browser sends its origin: another port, scheme, case, a trailing
  // slash, the opaque origin, a listed origin's host alone.
  for (const char* origin :
       {"http://localhost:3001", "https://localhost:3000", "http://ui.example",
        "HTTP://LOCALHOST:3000", "http://localhost:3000/", "null", "localhost:3000", "",
        "http://localhost:3000.evil.example", "http://evil.example"}) {
    EXPECT_EQ(judge(write_from(origin)), std::make_pair(403, std::string("cross_origin_request")))
        << origin;
    EXPECT_THAT(headers_of(write_from(origin)), ::testing::ElementsAre("Vary: Origin")) << origin;
  }
  // Two Origin headers name no origin, even when one of them is listed.
  httplib::Request twice = write_from("http://localhost:3000");
  twice.headers.emplace("Origin", "http://evil.example");
  EXPECT_EQ(judge(twice).first, 403);
  EXPECT_FALSE(policy().is_preflight([] {
    httplib::Request r = preflight_from("http://localhost:3000");
    r.headers.emplace("Origin", "http://localhost:3000");
    return r;
  }()));
  // A Sec-Fetch-Site: cross-site write without an Origin stays refused.
  EXPECT_EQ(judge(request("DELETE", "/x", {{"Sec-Fetch-Site", "cross-site"}})).first, 403);
}

TEST_F(CorsPolicyTest, AListedOriginsAnswersCarryItsHeaders) {
  EXPECT_THAT(
      headers_of(write_from("https://ui.example")),
      ::testing::ElementsAre("Vary: Origin", "Access-Control-Allow-Origin: https://ui.example"));
  // Reads too, and an answer to a request without an Origin says it depends on one.
  EXPECT_THAT(
      headers_of(request("GET", "/health", {{"Origin", " http://localhost:3000 "}})),
      ::testing::ElementsAre("Vary: Origin", "Access-Control-Allow-Origin: http://localhost:3000"));
  EXPECT_THAT(headers_of(request("GET", "/health")), ::testing::ElementsAre("Vary: Origin"));
}

TEST_F(CorsPolicyTest, APreflightIsAnswered204WithoutTheKey) {
  config_.api_key = "k";
  for (const char* path : {"/v1/chat/completions", "/v1/messages", "/health", "/no/such/path"}) {
    SCOPED_TRACE(path);
    const httplib::Request r = preflight_from("http://localhost:3000", path);
    EXPECT_TRUE(policy().is_preflight(r));
    httplib::Response response;
    EXPECT_FALSE(policy().admit(r, response));
    EXPECT_EQ(response.status, 204);
    EXPECT_EQ(response.body, "") << "not an error, in no API's shape";
    EXPECT_TRUE(response.headers.empty()) << "the HTTP layer writes the headers";
    EXPECT_THAT(headers_of(r),
                ::testing::ElementsAre(
                    "Vary: Origin", "Access-Control-Allow-Origin: http://localhost:3000",
                    "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS",
                    "Access-Control-Allow-Headers: Authorization, X-Api-Key, Content-Type, "
                    "anthropic-version, anthropic-beta",
                    "Access-Control-Max-Age: 7200"));
  }
  // The request after it needs the key, and a refusal of it carries the origin's headers.
  EXPECT_EQ(judge(write_from("http://localhost:3000")).first, 401);
  httplib::Request keyed = write_from("http://localhost:3000");
  keyed.headers.emplace("Authorization", "Bearer k");
  EXPECT_EQ(judge(keyed).first, 0);
}

TEST_F(CorsPolicyTest, WhatIsNotAPreflight) {
  config_.api_key = "k";
  // From an origin not listed: as before, the key first.
  const httplib::Request other = preflight_from("http://evil.example");
  EXPECT_FALSE(policy().is_preflight(other));
  EXPECT_EQ(judge(other).first, 401);
  // An OPTIONS without Access-Control-Request-Method, or another method with it.
  httplib::Request plain = preflight_from("http://localhost:3000");
  plain.headers.erase("Access-Control-Request-Method");
  EXPECT_FALSE(policy().is_preflight(plain));
  EXPECT_EQ(judge(plain).first, 401);
  httplib::Request get = preflight_from("http://localhost:3000");
  get.method = "GET";
  EXPECT_FALSE(policy().is_preflight(get));
  EXPECT_EQ(judge(get).first, 401);
  EXPECT_THAT(headers_of(get), ::testing::SizeIs(2)) << "no Allow-Methods outside a preflight";
}

}  // namespace
}  // namespace siesta::server
