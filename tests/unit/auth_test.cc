// API key checks: the Bearer and X-Api-Key headers, /health left open, 401 answers in OpenAI's
// shape.
#include "server/auth.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace siesta::server {
namespace {

httplib::Request request_for(const std::string& path, const std::string& authorization = "") {
  httplib::Request request;
  request.method = "GET";
  request.path = path;
  if (!authorization.empty()) request.set_header("Authorization", authorization);
  return request;
}

ServerConfig with_key(const std::string& key) {
  ServerConfig config;
  config.api_key = key;
  return config;
}

void expect_refused(const httplib::Response& response, const std::string& code) {
  EXPECT_EQ(response.status, 401);
  EXPECT_EQ(response.get_header_value("WWW-Authenticate"), "Bearer");
  const nlohmann::json body = nlohmann::json::parse(response.body);
  EXPECT_EQ(body["error"]["type"], "authentication_error");
  EXPECT_EQ(body["error"]["code"], code);
  // The message never echoes the presented key.
  EXPECT_EQ(response.body.find("wrong-key"), std::string::npos);
}

TEST(AuthTest, WithoutAKeyEverythingIsAllowed) {
  httplib::Response response;
  EXPECT_TRUE(authorize(request_for("/v1/completions"), response, ServerConfig{}));
  EXPECT_EQ(response.status, -1);
}

TEST(AuthTest, TheRightBearerKeyIsAllowed) {
  httplib::Response response;
  EXPECT_TRUE(authorize(request_for("/v1/status", "Bearer s3cret"), response, with_key("s3cret")));
  EXPECT_EQ(response.status, -1);
}

TEST(AuthTest, TheSchemeIsCaseInsensitive) {
  httplib::Response response;
  EXPECT_TRUE(authorize(request_for("/metrics", "bearer s3cret"), response, with_key("s3cret")));
}

TEST(AuthTest, HealthNeedsNoKey) {
  httplib::Response response;
  EXPECT_TRUE(authorize(request_for("/health"), response, with_key("s3cret")));
}

TEST(AuthTest, EveryOtherPathNeedsTheKey) {
  for (const char* path : {"/v1/status", "/metrics", "/v1/models", "/slots/0", "/health/",
                           "/webui.json", "/index.html"}) {
    httplib::Response response;
    EXPECT_FALSE(authorize(request_for(path), response, with_key("s3cret"))) << path;
    expect_refused(response, "missing_api_key");
  }
}

// The page's own files hold no data: a GET of them goes without the key while the page is on,
// so that the page can ask for it. Nothing else does: another method, or the page turned off.
TEST(AuthTest, ThePagesFilesAreOpenToAGetWhileThePageIsOn) {
  ServerConfig config = with_key("s3cret");
  for (const char* path : {"/", "/webui.js", "/webui.css"}) {
    httplib::Response response;
    EXPECT_TRUE(authorize(request_for(path), response, config)) << path;
    httplib::Request posted = request_for(path);
    posted.method = "POST";
    EXPECT_FALSE(authorize(posted, response, config)) << path;
  }
  config.webui = false;
  httplib::Response response;
  EXPECT_FALSE(authorize(request_for("/"), response, config));
  expect_refused(response, "missing_api_key");
}

TEST(AuthTest, WrongKeysAndSchemesAreRefused) {
  for (const char* header : {"Bearer wrong-key", "Bearer s3cret ", "Bearer s3cre", "Bearer s3cretx",
                             "Basic s3cret", "s3cret", "Bearer", "Bearer  s3cret"}) {
    httplib::Response response;
    EXPECT_FALSE(authorize(request_for("/v1/models", header), response, with_key("s3cret")))
        << header;
    expect_refused(response, "invalid_api_key");
  }
}

// The header's whole value is compared: a C-string view of it would end at the NUL and let
// "Bearer KEY\0junk" through.
TEST(AuthTest, BytesAfterANulAreStillPartOfTheKey) {
  httplib::Response response;
  EXPECT_FALSE(authorize(request_for("/v1/models", std::string("Bearer s3cret\0junk", 18)),
                         response, with_key("s3cret")));
  expect_refused(response, "invalid_api_key");
}

TEST(AuthTest, TwoAuthorizationHeadersAreRefused) {
  httplib::Request request = request_for("/v1/models", "Bearer s3cret");
  request.headers.emplace("Authorization", "Bearer s3cret");
  httplib::Response response;
  EXPECT_FALSE(authorize(request, response, with_key("s3cret")));
  expect_refused(response, "invalid_api_key");
}

// Anthropic's and llama-server's clients send the key as X-Api-Key.
TEST(AuthTest, AnXApiKeyHeaderIsAcceptedLikeABearerOne) {
  httplib::Request request = request_for("/v1/messages");
  request.set_header("x-api-key", "s3cret");  // header names compare without case
  httplib::Response response;
  EXPECT_TRUE(authorize(request, response, with_key("s3cret")));
  EXPECT_EQ(response.status, -1);
  for (const char* wrong : {"wrong-key", "s3cre", "Bearer s3cret", ""}) {
    httplib::Request bad = request_for("/v1/messages");
    bad.set_header("X-Api-Key", wrong);
    httplib::Response refused;
    EXPECT_FALSE(authorize(bad, refused, with_key("s3cret"))) << wrong;
    expect_refused(refused, "invalid_api_key");
  }
}

// Both kinds sent: both must hold the key; two of one kind are refused.
TEST(AuthTest, BothHeadersMustHoldTheKeyAndNeitherTwice) {
  httplib::Request both = request_for("/v1/models", "Bearer s3cret");
  both.set_header("X-Api-Key", "s3cret");
  httplib::Response ok;
  EXPECT_TRUE(authorize(both, ok, with_key("s3cret")));
  httplib::Request mixed = request_for("/v1/models", "Bearer s3cret");
  mixed.set_header("X-Api-Key", "wrong-key");
  httplib::Response refused;
  EXPECT_FALSE(authorize(mixed, refused, with_key("s3cret")));
  expect_refused(refused, "invalid_api_key");
  httplib::Request twice = request_for("/v1/models");
  twice.headers.emplace("X-Api-Key", "s3cret");
  twice.headers.emplace("X-Api-Key", "s3cret");
  httplib::Response refused_twice;
  EXPECT_FALSE(authorize(twice, refused_twice, with_key("s3cret")));
  expect_refused(refused_twice, "invalid_api_key");
}

TEST(AuthTest, KeyComparison) {
  EXPECT_TRUE(api_key_matches("abc", "abc"));
  EXPECT_FALSE(api_key_matches("abd", "abc"));
  EXPECT_FALSE(api_key_matches("ab", "abc"));
  EXPECT_FALSE(api_key_matches("abcd", "abc"));
  EXPECT_FALSE(api_key_matches("", "abc"));
  EXPECT_TRUE(api_key_matches(std::string(1000, 'k'), std::string(1000, 'k')));
  EXPECT_TRUE(api_key_matches(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(api_key_matches(std::string("a\0b", 3), std::string("a\0c", 3)));
}

}  // namespace
}  // namespace siesta::server
