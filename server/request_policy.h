// RequestPolicy: what a request must satisfy before its body is read and before any handler
// runs. The connection loop applies it to a request's head as soon as the head is in (so a
// refused request costs only its head: the body is never buffered), and routes.cc installs
// the same check as cpp-httplib's pre-routing handler, so whoever serves the routes applies
// it. In this order:
//
//   204  a CORS preflight from a listed origin (below): answered here, without a key (a
//        browser sends none on a preflight) and without a handler
//   401  authorize() (auth.h): the API key, on every path but /health
//   403  a cross-origin state-changing request from a browser: a POST, PUT, PATCH or DELETE
//        with `Sec-Fetch-Site: cross-site`, or with an Origin header that names another
//        origin than the request's own Host (the opaque origin "null" included), unless its
//        Origin is a listed one. A browser sends both on its own and a page cannot forge
//        them; a page's form or fetch() can otherwise reach a server on the user's loopback
//        (it cannot read the answer, but the request still runs). Requests without them
//        (curl, SDKs) are not affected, and GET and HEAD stay readable as before.
//   411  a chunked body (Transfer-Encoding): --max-body-bytes holds only for Content-Length
//   413  a Content-Length over --max-body-bytes
//   415  a non-empty body on a route that reads JSON without `Content-Type: application/json`
//        (parameters such as charset allowed): a browser can send text/plain, form or
//        multipart bodies cross-site without asking first, never application/json.
// and once the body is in (admit_body, applied by the connection loop before a worker sees
// the request):
//   400  a JSON route's body with a NUL byte.
//
// Every refusal is OpenAI-shaped (api_error.h), but on Anthropic's paths (/v1/messages...),
// where it takes Anthropic's shape (anthropic_routes.h).
//
// Cross-origin access (CORS), opt-in: the listed origins are ServerConfig::cors_origins
// (--cors-origin), compared byte for byte with the request's one Origin header (a browser
// sends its origin in one canonical form, which the flag's parser writes the listed ones in;
// two Origin headers match nothing). Without a listed origin nothing here changes. A page of
// a listed origin may write (the 403 above lets it through) and read the answers: the policy
// decides which CORS headers an answer carries (cors_headers()), and the HTTP layer
// (http_server.h) writes them on every answer, a refusal, a preflight's 204 and a streamed
// answer included. A preflight is an OPTIONS request with Access-Control-Request-Method from
// a listed origin; one from another origin is treated as before (401 without the key, else
// routed: 405), so the browser sends nothing more.
//
// Thread rule: every member is const and may be called from any thread at once; the object
// must outlive every call.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/server_config.h"

namespace siesta::server {

// True for a POST, PUT, PATCH or DELETE that a browser sent from another origin (the rule
// above). Exposed for the tests.
bool is_cross_origin_write(const httplib::Request& request);

// True when `content_type` is application/json, whatever its case and parameters.
bool is_json_media_type(std::string_view content_type);

// What a preflight's answer allows: the methods the routes serve, the request headers a
// page may set (the key's two headers, the JSON body's type, Anthropic's version and beta
// headers; header names are compared without regard to case), and how long the browser may
// keep the answer before it asks again (the real request is judged afresh every time, so a
// longer time lets no removed origin write).
inline constexpr std::string_view kCorsAllowMethods = "GET, POST, DELETE, OPTIONS";
inline constexpr std::string_view kCorsAllowHeaders =
    "Authorization, X-Api-Key, Content-Type, anthropic-version, anthropic-beta";
inline constexpr int kCorsMaxAgeSeconds = 7200;

class RequestPolicy {
 public:
  // `json_post_paths`: the paths whose POST body is read as JSON; one ending in a placeholder
  // ("/slots/{id}", as Route::path) stands for every longer path with its prefix.
  RequestPolicy(const ServerConfig& config, std::vector<std::string> json_post_paths);

  // True when `request` may go on to its body and its handler. Otherwise fills `response`
  // with the refusal (status, headers, body), or with a preflight's answer (204, no body: it
  // needs no handler), and returns false. Reads only the method, path and headers (the body
  // need not be there yet). The CORS headers are not written here (cors_headers()).
  bool admit(const httplib::Request& request, httplib::Response& response) const;

  // True for a CORS preflight admit() answers 204: an OPTIONS request with an
  // Access-Control-Request-Method header and a listed Origin.
  bool is_preflight(const httplib::Request& request) const;

  // The headers the answer to `request` carries for CORS, whatever its status: none without
  // a listed origin configured; otherwise `Vary: Origin` on every answer (it depends on the
  // Origin header), and for a request from a listed origin `Access-Control-Allow-Origin:
  // <that origin>`, and for a preflight also Access-Control-Allow-Methods, -Allow-Headers
  // and -Max-Age (the constants above).
  std::vector<std::pair<std::string, std::string>> cors_headers(
      const httplib::Request& request) const;

  // The check that needs the body, once it is in: a JSON route's body holding a NUL byte is
  // refused with 400 (JSON text never holds one, and nlohmann's parser would stop there and
  // take the bytes before it for the whole body). Same contract as admit().
  bool admit_body(const httplib::Request& request, std::string_view body,
                  httplib::Response& response) const;

 private:
  bool reads_json(const httplib::Request& request) const;
  // The listed origin `request`'s one Origin header names, or nullptr.
  const std::string* listed_origin(const httplib::Request& request) const;
  // admit() and admit_body() in OpenAI's shape.
  bool check_head(const httplib::Request& request, httplib::Response& response) const;
  bool check_body(const httplib::Request& request, std::string_view body,
                  httplib::Response& response) const;

  const ServerConfig& config_;
  std::vector<std::string> json_post_paths_;
};

}  // namespace siesta::server
