// The one mapping from Status codes to HTTP statuses and OpenAI-style error bodies.
#include "server/api_error.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace siesta::server {
namespace {

TEST(ApiErrorTest, EveryCodeMapsToItsHttpStatus) {
  EXPECT_EQ(http_status_for(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status_for(StatusCode::kForeign), 400);
  EXPECT_EQ(http_status_for(StatusCode::kNotFound), 404);
  EXPECT_EQ(http_status_for(StatusCode::kExpired), 404);
  EXPECT_EQ(http_status_for(StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(http_status_for(StatusCode::kOutOfMemory), 503);
  EXPECT_EQ(http_status_for(StatusCode::kUnavailable), 503);
  EXPECT_EQ(http_status_for(StatusCode::kCancelled), 503);
  EXPECT_EQ(http_status_for(StatusCode::kNoSpace), 507);
  EXPECT_EQ(http_status_for(StatusCode::kUnsupported), 501);
  for (StatusCode code : {StatusCode::kCorrupt, StatusCode::kTruncated, StatusCode::kIoError,
                          StatusCode::kDeviceError, StatusCode::kInternal}) {
    EXPECT_EQ(http_status_for(code), 500) << status_code_name(code);
  }
}

TEST(ApiErrorTest, ClientErrorsAreInvalidRequestsWithTheDetail) {
  const ApiError error = api_error_from_status(
      InvalidArgument("max_tokens: expected an integer, got string"), {"max_tokens", ""});
  EXPECT_EQ(error.http_status, 400);
  EXPECT_EQ(error.type, "invalid_request_error");
  EXPECT_EQ(error.param, "max_tokens");
  EXPECT_EQ(error.code, "invalid_argument");
  EXPECT_EQ(error.retry_after_seconds, 0);
  const nlohmann::json body = api_error_json(error);
  EXPECT_EQ(body["error"]["message"], "max_tokens: expected an integer, got string");
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_EQ(body["error"]["code"], "invalid_argument");
}

TEST(ApiErrorTest, ADetailCodeReplacesTheStatusName) {
  const ApiError error =
      api_error_from_status(NotFound("no such model"), {"model", "model_not_found"});
  EXPECT_EQ(error.http_status, 404);
  EXPECT_EQ(error.code, "model_not_found");
}

// Busy (a full queue, every session in use) is its own code, so a client is not told that
// memory ran out when it did not; retryable like a lack of memory.
TEST(ApiErrorTest, UnavailableIsRetryableAndSaysSo) {
  const ApiError error = api_error_from_status(Unavailable("64 requests are waiting already"));
  EXPECT_EQ(error.http_status, 503);
  EXPECT_EQ(error.code, "unavailable");
  EXPECT_EQ(error.retry_after_seconds, kRetryAfterSeconds);
}

TEST(ApiErrorTest, OutOfMemoryIsRetryableServerError) {
  const ApiError error = api_error_from_status(OutOfMemory("restore refused"));
  EXPECT_EQ(error.http_status, 503);
  EXPECT_EQ(error.type, "server_error");
  EXPECT_EQ(error.retry_after_seconds, kRetryAfterSeconds);
  httplib::Response response;
  set_api_error(response, error);
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(response.get_header_value("Retry-After"), "1");
  const nlohmann::json body = nlohmann::json::parse(response.body);
  EXPECT_EQ(body["error"]["code"], "out_of_memory");
  EXPECT_TRUE(body["error"]["param"].is_null());
}

TEST(ApiErrorTest, OtherErrorsSendNoRetryAfter) {
  httplib::Response response;
  set_api_error(response, api_error_from_status(NoSpace("disk full")));
  EXPECT_EQ(response.status, 507);
  EXPECT_FALSE(response.has_header("Retry-After"));
}

TEST(ApiErrorTest, AnOkStatusBecomesAnInternalError) {
  const ApiError error = api_error_from_status(Status::Ok());
  EXPECT_EQ(error.http_status, 500);
  EXPECT_EQ(error.code, "internal");
}

TEST(ApiErrorTest, OperationalShapeHasANullParam) {
  const nlohmann::json body =
      api_error_json("no such endpoint", "invalid_request_error", "not_found");
  EXPECT_TRUE(body["error"].contains("param"));
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(body["error"]["code"], "not_found");
}

TEST(ApiErrorTest, InvalidUtf8InAMessageIsReplacedNotThrown) {
  httplib::Response response;
  set_api_error(response, 404, "no such endpoint: /\xff", "invalid_request_error", "not_found");
  EXPECT_EQ(response.status, 404);
  EXPECT_TRUE(nlohmann::json::accept(response.body));
}

}  // namespace
}  // namespace siesta::server
