#include "server/api_error.h"

#include <exception>
#include <string>

namespace siesta::server {
namespace {

nlohmann::json string_or_null(const std::string& text) {
  return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
}

}  // namespace

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kForeign: return 400;
    case StatusCode::kNotFound:
    case StatusCode::kExpired: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kOutOfMemory:
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled: return 503;
    case StatusCode::kNoSpace: return 507;
    case StatusCode::kUnsupported: return 501;
    default: return 500;
  }
}

ApiError api_error_from_status(const Status& status, const ErrorDetail& detail) {
  ApiError error;
  if (status.ok()) {
    error.message = "internal error: an error was reported without a cause";
    error.code = "internal";
    return error;
  }
  error.http_status = http_status_for(status.code());
  error.message = status.message();
  error.type = !detail.type.empty()      ? detail.type
               : error.http_status < 500 ? "invalid_request_error"
                                         : "server_error";
  error.param = detail.param;
  error.extra = detail.extra;
  error.code = detail.code.empty() ? std::string(status_code_name(status.code())) : detail.code;
  if (status.code() == StatusCode::kOutOfMemory || status.code() == StatusCode::kUnavailable) {
    error.retry_after_seconds = kRetryAfterSeconds;
  }
  return error;
}

nlohmann::json api_error_json(const ApiError& error) {
  nlohmann::json object = {{"message", error.message},
                           {"type", error.type},
                           {"param", string_or_null(error.param)},
                           {"code", string_or_null(error.code)}};
  if (error.extra.is_object()) {
    for (const auto& [name, value] : error.extra.items()) object[name] = value;
  }
  return {{"error", std::move(object)}};
}

nlohmann::json api_error_json(std::string_view message, std::string_view type,
                              std::string_view code) {
  ApiError error;
  error.message = std::string(message);
  error.type = std::string(type);
  error.code = std::string(code);
  return api_error_json(error);
}

std::string dump_json(const nlohmann::json& body) {
  try {
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception&) {
    return "{}";  // only allocation can fail here
  }
}

void set_json(httplib::Response& response, const nlohmann::json& body) {
  std::string text;
  try {
    text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception&) {
    // Only allocation can fail here; answer with a fixed body rather than let it escape.
    response.status = 500;
    text =
        R"({"error":{"message":"response too large","type":"server_error","param":null,"code":"internal"}})";
  }
  response.set_content(text + "\n", "application/json");
}

void set_api_error(httplib::Response& response, const ApiError& error) {
  response.status = error.http_status;
  if (error.retry_after_seconds > 0) {
    response.set_header("Retry-After", std::to_string(error.retry_after_seconds));
  }
  set_json(response, api_error_json(error));
}

void set_api_error(httplib::Response& response, int http_status, std::string_view message,
                   std::string_view type, std::string_view code) {
  response.status = http_status;
  set_json(response, api_error_json(message, type, code));
}

}  // namespace siesta::server
