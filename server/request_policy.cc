#include "server/request_policy.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "core/base/log_text.h"
#include "server/anthropic_routes.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/request_head.h"

namespace siesta::server {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The first value of `name`, whole (not cut at a NUL), or nullptr.
const std::string* header(const httplib::Request& request, const std::string& name) {
  auto it = request.headers.find(name);
  return it == request.headers.end() ? nullptr : &it->second;
}

bool is_write_method(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// "host[:port]" lower-cased, without the port that is the default for `scheme`.
std::string authority_without_default_port(std::string_view authority, std::string_view scheme) {
  std::string out = lower(authority);
  const std::string default_port = scheme == "https" ? ":443" : ":80";
  if (out.size() > default_port.size() && out.ends_with(default_port) &&
      out.find(']', out.size() - default_port.size()) == std::string::npos) {
    out.resize(out.size() - default_port.size());
  }
  return out;
}

// Whether the Origin header's value names the origin the request's Host names. The scheme
// is not compared: the server speaks plain HTTP, but a TLS proxy in front of it keeps the
// browser's https origin and the Host.
bool same_origin(std::string_view origin, const std::string* host) {
  if (host == nullptr) return false;
  const size_t separator = origin.find("://");
  if (separator == std::string_view::npos) return false;  // "null" and anything malformed
  const std::string scheme = lower(origin.substr(0, separator));
  if (scheme != "http" && scheme != "https") return false;
  const std::string_view authority = origin.substr(separator + 3);
  if (authority.empty() || authority.find('/') != std::string_view::npos) return false;
  return authority_without_default_port(authority, scheme) ==
         authority_without_default_port(trim_optional_whitespace(*host), scheme);
}

void refuse_cross_origin(const httplib::Request& request, httplib::Response& response) {
  const std::string* origin = header(request, "Origin");
  std::string message = "cross-origin request refused: a browser page from ";
  message += origin != nullptr ? "origin " + quote_for_log(*origin) : "another site";
  message += " may not send " + request.method + " " + request.path +
             " to this server (send it from the server's own origin or from a non-browser "
             "client)";
  set_api_error(response, 403, message, "invalid_request_error", "cross_origin_request");
}

bool is_chunked(const httplib::Request& request) {
  const auto [first, last] = request.headers.equal_range("Transfer-Encoding");
  for (auto it = first; it != last; ++it) {
    if (lower(it->second).find("chunked") != std::string::npos) return true;
  }
  return false;
}

// An Anthropic client reads Anthropic's error shape: a refusal of one of its paths is given
// that shape (the same status, message and Retry-After).
void in_the_paths_dialect(const httplib::Request& request, httplib::Response& response) {
  if (!is_anthropic_path(request.path)) return;
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  ApiError error;
  error.http_status = response.status;
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    error.message = body["error"].value("message", "");
  }
  if (response.has_header("Retry-After")) {
    error.retry_after_seconds = std::atoi(response.get_header_value("Retry-After").c_str());
  }
  set_anthropic_error(response, error);
}

}  // namespace

bool is_cross_origin_write(const httplib::Request& request) {
  if (!is_write_method(request.method)) return false;
  if (const std::string* site = header(request, "Sec-Fetch-Site");
      site != nullptr && lower(trim_optional_whitespace(*site)) == "cross-site") {
    return true;
  }
  const std::string* origin = header(request, "Origin");
  return origin != nullptr &&
         !same_origin(trim_optional_whitespace(*origin), header(request, "Host"));
}

bool is_json_media_type(std::string_view content_type) {
  return lower(trim_optional_whitespace(content_type.substr(0, content_type.find(';')))) ==
         "application/json";
}

RequestPolicy::RequestPolicy(const ServerConfig& config, std::vector<std::string> json_post_paths)
    : config_(config), json_post_paths_(std::move(json_post_paths)) {}

const std::string* RequestPolicy::listed_origin(const httplib::Request& request) const {
  if (config_.cors_origins.empty()) return nullptr;
  // One Origin header only: with two, which one the browser meant is anyone's guess.
  const auto [first, last] = request.headers.equal_range("Origin");
  if (first == last || std::next(first) != last) return nullptr;
  const std::string_view origin = trim_optional_whitespace(first->second);
  const auto it = std::find(config_.cors_origins.begin(), config_.cors_origins.end(), origin);
  return it == config_.cors_origins.end() ? nullptr : &*it;
}

bool RequestPolicy::is_preflight(const httplib::Request& request) const {
  return request.method == "OPTIONS" && request.has_header("Access-Control-Request-Method") &&
         listed_origin(request) != nullptr;
}

std::vector<std::pair<std::string, std::string>> RequestPolicy::cors_headers(
    const httplib::Request& request) const {
  std::vector<std::pair<std::string, std::string>> headers;
  if (config_.cors_origins.empty()) return headers;
  headers.emplace_back("Vary", "Origin");
  const std::string* origin = listed_origin(request);
  if (origin == nullptr) return headers;
  headers.emplace_back("Access-Control-Allow-Origin", *origin);
  if (is_preflight(request)) {
    headers.emplace_back("Access-Control-Allow-Methods", std::string(kCorsAllowMethods));
    headers.emplace_back("Access-Control-Allow-Headers", std::string(kCorsAllowHeaders));
    headers.emplace_back("Access-Control-Max-Age", std::to_string(kCorsMaxAgeSeconds));
  }
  return headers;
}

bool RequestPolicy::reads_json(const httplib::Request& request) const {
  if (request.method != "POST") return false;
  return std::any_of(json_post_paths_.begin(), json_post_paths_.end(), [&](const std::string& p) {
    // A route path ending in a placeholder ("/slots/{id}") stands for every path below it.
    if (p.ends_with("}")) {
      const size_t open = p.rfind('{');
      if (open != std::string::npos) {
        return request.path.size() > open && request.path.compare(0, open, p, 0, open) == 0;
      }
    }
    return p == request.path;
  });
}

bool RequestPolicy::admit_body(const httplib::Request& request, std::string_view body,
                               httplib::Response& response) const {
  if (check_body(request, body, response)) return true;
  in_the_paths_dialect(request, response);
  return false;
}

bool RequestPolicy::check_body(const httplib::Request& request, std::string_view body,
                               httplib::Response& response) const {
  if (!reads_json(request)) return true;
  const size_t nul = body.find('\0');
  if (nul == std::string_view::npos) return true;
  set_api_error(response, 400,
                "the request body is not valid JSON: a NUL byte at offset " + std::to_string(nul),
                "invalid_request_error", "bad_request");
  return false;
}

bool RequestPolicy::admit(const httplib::Request& request, httplib::Response& response) const {
  if (is_preflight(request)) {
    // An answer, not a refusal: no key (the browser sends none on a preflight; the request
    // after it needs one), no body, and not in an API's error shape.
    response.status = 204;
    return false;
  }
  if (check_head(request, response)) return true;
  in_the_paths_dialect(request, response);
  return false;
}

bool RequestPolicy::check_head(const httplib::Request& request, httplib::Response& response) const {
  if (!authorize(request, response, config_)) return false;
  if (is_cross_origin_write(request) && listed_origin(request) == nullptr) {
    refuse_cross_origin(request, response);
    return false;
  }
  if (is_chunked(request)) {
    // cpp-httplib 0.11 applies set_payload_max_length() to a Content-Length body only: a
    // chunked one would be buffered whole, whatever its size. The client can resend with a
    // length (OpenAI clients send Content-Length for their JSON bodies).
    set_api_error(response, 411,
                  "chunked request bodies are not accepted: send Content-Length (at most " +
                      std::to_string(config_.max_body_bytes) + " bytes, --max-body-bytes)",
                  "invalid_request_error", "length_required");
    return false;
  }
  const std::string* length_text = header(request, "Content-Length");
  const uint64_t length =
      length_text != nullptr ? std::strtoull(length_text->c_str(), nullptr, 10) : 0;
  if (length > config_.max_body_bytes) {
    set_api_error(response, 413,
                  "request body too large: the limit is " + std::to_string(config_.max_body_bytes) +
                      " bytes (--max-body-bytes)",
                  "invalid_request_error", "request_too_large");
    return false;
  }
  if (reads_json(request) && length > 0) {
    const std::string* type = header(request, "Content-Type");
    if (type == nullptr || !is_json_media_type(*type)) {
      set_api_error(response, 415,
                    "unsupported Content-Type " +
                        (type != nullptr ? quote_for_log(*type) : std::string("(none)")) +
                        ": the body of POST " + request.path +
                        " is JSON; send it with Content-Type: application/json",
                    "invalid_request_error", "unsupported_media_type");
      return false;
    }
  }
  return true;
}

}  // namespace siesta::server
