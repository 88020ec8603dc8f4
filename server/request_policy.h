// RequestPolicy: what a request must satisfy before its body is read and before any handler
// runs. The connection loop applies it to a request's head as soon as the head is in (so a
// refused request costs only its head: the body is never buffered), and routes.cc installs
// the same check as cpp-httplib's pre-routing handler, so whoever serves the routes applies
// it. In this order:
//
//   401  authorize() (auth.h): the API key, on every path but /health
//   403  a cross-origin state-changing request from a browser: a POST, PUT, PATCH or DELETE
//        with `Sec-Fetch-Site: cross-site`, or with an Origin header that names another
//        origin than the request's own Host (the opaque origin "null" included). A browser
//        sends both on its own and a page cannot forge them; a page's form or fetch() can
//        otherwise reach a server on the user's loopback (it cannot read the answer, but the
//        request still runs). Requests without them (curl, SDKs) are not affected, and GET
//        and HEAD stay readable as before.
//   411  a chunked body (Transfer-Encoding): --max-body-bytes holds only for Content-Length
//   413  a Content-Length over --max-body-bytes
//   415  a non-empty body on a route that reads JSON without `Content-Type: application/json`
//        (parameters such as charset allowed): a browser can send text/plain, form or
//        multipart bodies cross-site without asking first, never application/json.
// and once the body is in (admit_body, applied by the connection loop before a worker sees
// the request):
//   400  a JSON route's body with a NUL byte.
//
// Every refusal is OpenAI-shaped (api_error.h). Thread rule: admit() is const and may be
// called from any thread at once; the object must outlive every call.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/server_config.h"

namespace siesta::server {

// True for a POST, PUT, PATCH or DELETE that a browser sent from another origin (the rule
// above). Exposed for the tests.
bool is_cross_origin_write(const httplib::Request& request);

// True when `content_type` is application/json, whatever its case and parameters.
bool is_json_media_type(std::string_view content_type);

class RequestPolicy {
 public:
  // `json_post_paths`: the paths whose POST body is read as JSON; one ending in a placeholder
  // ("/slots/{id}", as Route::path) stands for every longer path with its prefix.
  RequestPolicy(const ServerConfig& config, std::vector<std::string> json_post_paths);

  // True when `request` may go on to its body and its handler. Otherwise fills `response`
  // with the refusal (status, headers, body) and returns false. Reads only the method, path
  // and headers (the body need not be there yet).
  bool admit(const httplib::Request& request, httplib::Response& response) const;

  // The check that needs the body, once it is in: a JSON route's body holding a NUL byte is
  // refused with 400 (JSON text never holds one, and nlohmann's parser would stop there and
  // take the bytes before it for the whole body). Same contract as admit().
  bool admit_body(const httplib::Request& request, std::string_view body,
                  httplib::Response& response) const;

 private:
  bool reads_json(const httplib::Request& request) const;

  const ServerConfig& config_;
  std::vector<std::string> json_post_paths_;
};

}  // namespace siesta::server
