// API key authentication (other servers shipped admin endpoints without any).
//
// With ServerConfig::api_key set, every request except `/health` (a load balancer's probe
// carries no secret) and, while the web page is on, GETs of the page's own files (constant,
// no data: the page asks for the key and sends it itself; webui_routes.h) must carry
// `Authorization: Bearer <key>` or `X-Api-Key: <key>` (how Anthropic's and llama-server's
// clients send it); the scheme is matched without regard to case (RFC 7235), the key exactly:
// the header's whole value, bytes after an embedded NUL included. A request with two headers of one
// kind is refused; one with both kinds must hold the key in both. Without an api_key everything is
// allowed.
//
// The key is compared in constant time: both the expected and the presented key are hashed
// with SHA-256 and the digests compared with CRYPTO_memcmp, so neither the position of the
// first differing byte nor the presented key's length shows in the time taken.
//
// Thread rule: pure functions of their arguments; any thread.
#pragma once

#include <httplib.h>

#include <string_view>

#include "server/server_config.h"

namespace siesta::server {

// The one path always served without the key (the web page's files also are, while it is on).
inline constexpr std::string_view kUnauthenticatedPath = "/health";

// True when `request` may proceed. Otherwise sets `response` to 401 with an OpenAI-style
// error (type "authentication_error"; code "missing_api_key" without an Authorization header,
// "invalid_api_key" for a wrong key or scheme) and `WWW-Authenticate: Bearer`, and returns
// false. Meant for httplib's pre-routing handler: false -> HandlerResponse::Handled.
bool authorize(const httplib::Request& request, httplib::Response& response,
               const ServerConfig& config);

// True when `presented` equals `expected`, in time independent of both contents and of the
// presented length. Exposed for the tests.
bool api_key_matches(std::string_view presented, std::string_view expected);

}  // namespace siesta::server
