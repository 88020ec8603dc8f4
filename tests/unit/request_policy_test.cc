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

}  // namespace
}  // namespace siesta::server
