// Error responses in the shape OpenAI clients parse:
//   {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}
// (an error may add members after these: llama-server's context error adds n_prompt_tokens
// and n_ctx).
// Every error the server sends uses this, so a client library reports our message instead of
// failing to parse the body.
//
// One mapping turns a Status into an HTTP status (api_error_from_status), so every route
// answers the same code for the same failure:
//   InvalidArgument      400  the request can never work as sent
//   Foreign              400  a file of another model or configuration
//   NotFound / Expired   404  (an expired export is as gone as a missing one)
//   FailedPrecondition   409  not now (a command running, offload off...)
//   OutOfMemory          503  + Retry-After: 1 (the snapshot is kept; retry)
//   Cancelled            503  only a request still connected reads this, and that means the
//                             server is shutting down (a client that left reads nothing)
//   NoSpace              507
//   Unsupported          501
//   anything else        500
// `type` is "invalid_request_error" for 4xx and "server_error" for 5xx (401 uses
// "authentication_error" through auth.h); `code` defaults to status_code_name() of the code.
//
// Thread rule: pure functions; set_* write only the response they are given.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace siesta::server {

// Seconds a client is told to wait (Retry-After) after a 503 for memory.
inline constexpr int kRetryAfterSeconds = 1;

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type = "server_error";
  std::string param;            // OpenAI's `param`: the request field at fault; empty: null
  std::string code;             // stable snake_case word; empty: null
  int retry_after_seconds = 0;  // > 0: a Retry-After header is sent
  // More members of the error object, after the four above (an object; null: none).
  nlohmann::json extra{};
};

// What a route adds to a Status when it turns it into an error: the field at fault and a
// more precise code ("model_not_found", "context_length_exceeded"). Empty: the defaults.
// `type` replaces the type the HTTP status gives (llama-server's "exceed_context_size_error")
// and `extra` is ApiError::extra; both are left empty by every API but llama-server's.
// (clang-tidy's exception-escape check flags its default constructor, through json's, which
// for a null value allocates nothing and cannot throw.)
struct ErrorDetail {  // NOLINT(bugprone-exception-escape)
  std::string param;
  std::string code;
  std::string type{};
  nlohmann::json extra{};
};

// The mapping above. REQUIRES: !status.ok() (an OK status gives a 500 "internal" error).
ApiError api_error_from_status(const Status& status, const ErrorDetail& detail = {});

// The HTTP status the mapping above gives `code`.
int http_status_for(StatusCode code);

nlohmann::json api_error_json(const ApiError& error);
// Kept for the operational routes: param null.
nlohmann::json api_error_json(std::string_view message, std::string_view type,
                              std::string_view code);

// Sets `response` to the error: status, body, and Retry-After when asked. Throws nothing but
// std::bad_alloc, which the HTTP server's exception handler turns into a 500.
void set_api_error(httplib::Response& response, const ApiError& error);
void set_api_error(httplib::Response& response, int http_status, std::string_view message,
                   std::string_view type, std::string_view code);

// Sets `response` to a JSON body, serialised without ever throwing: invalid UTF-8 (a request
// path echoed into a message, say) is replaced rather than raised.
void set_json(httplib::Response& response, const nlohmann::json& body);

// `body` serialised the same way (compact, invalid UTF-8 replaced); "{}" only if allocation
// fails.
std::string dump_json(const nlohmann::json& body);

}  // namespace siesta::server
