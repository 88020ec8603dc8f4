// Error responses in the shape OpenAI clients parse:
//   {"error": {"message": str, "type": str, "code": str}}
// Every error the server sends uses this, so a client library reports our message instead of
// failing to parse the body.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace siesta::server {

nlohmann::json api_error_json(std::string_view message, std::string_view type,
                              std::string_view code);

// Sets `response` to `http_status` with the error body. `type` follows OpenAI's names
// ("invalid_request_error", "server_error"); `code` is a stable snake_case word for programs
// ("not_found", "method_not_allowed"). Throws nothing but std::bad_alloc, which the HTTP
// server's exception handler turns into a 500.
void set_api_error(httplib::Response& response, int http_status, std::string_view message,
                   std::string_view type, std::string_view code);

// Sets `response` to a JSON body, serialised without ever throwing: invalid UTF-8 (a request
// path echoed into a message, say) is replaced rather than raised.
void set_json(httplib::Response& response, const nlohmann::json& body);

}  // namespace siesta::server
