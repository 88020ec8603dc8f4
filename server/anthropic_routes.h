// Anthropic's Messages API routes (anthropic_json.h has the fields):
//   POST /v1/messages               200 a "message"; with "stream": true, Anthropic's events
//   POST /v1/messages/count_tokens  200 {"input_tokens": N}
// Errors are Anthropic's shape ({"type": "error", "error": {"type", "message"}}), with the
// status api_error.h maps (400 bad input, 503 + Retry-After for memory...). Generation is
// served by generation_stream.h, as OpenAI's is: the same cancellation, the same conversation
// routing by the prompt's prefix.
//
// Thread rule: the handlers run on the HTTP workers; `app` must outlive the routes.
#pragma once

#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/route.h"
#include "server/server_app.h"

namespace siesta::server {

std::vector<Route> anthropic_routes(ServerApp& app);

// Sets `response` to `error` in Anthropic's shape (status, body, Retry-After when asked).
void set_anthropic_error(httplib::Response& response, const ApiError& error);

// True for the paths whose errors take Anthropic's shape (the request policy's refusals too).
bool is_anthropic_path(std::string_view path);

}  // namespace siesta::server
