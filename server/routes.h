// The operations routes of siesta-server, registered on a cpp-httplib server, around the
// OpenAI API routes (api_routes.h).
//
//   GET  /health             200 {"status":"ok"}; never requires authentication
//   GET  /v1/status          200 the body documented in status_json.h
//   GET  /metrics            200 Prometheus text (metrics_text.h)
//   POST /v1/cache/offload   offload the session now (Engine::offload_now()):
//                            200 {"state": str} (the cache state after the call),
//                            409 OpenAI-style error while a command runs,
//                            400 OpenAI-style error when offload is off
//   GET  /, /webui.js, /webui.css   the web page (webui_routes.h; not with --no-webui)
//   (HEAD is answered for every GET route, without a body.)
//   the API routes           api_routes() (api_routes.h), registered by register_routes()
//   a known path with another method   405 + Allow, OpenAI-style error body
//   any other path                     404, OpenAI-style error body
// Every request first passes the RequestPolicy (request_policy.h), before its body is read
// or its handler runs: the API key (401, every path but /health), cross-origin writes from a
// browser (403), a chunked body (411), a body over --max-body-bytes (413), a JSON route's body
// without Content-Type: application/json (415). register_routes() installs it as the
// pre-routing handler and returns it, so the connection loop applies it to a head before the
// body arrives.
//
// None of /health, /v1/status and /metrics may ever wake a sleeping session: they read
// counters only (ServerApp::status()).
#pragma once

#include <httplib.h>

#include <memory>

#include "server/request_policy.h"
#include "server/server_app.h"

namespace siesta::server {

// Registers every route and the request policy (as the pre-routing handler) on `server`, and
// returns the policy: it knows which routes read a JSON body. `app` must outlive the
// server's last request.
// Thread rule: call before the server serves; handlers then run on worker threads.
std::shared_ptr<const RequestPolicy> register_routes(httplib::Server& server, ServerApp& app);

}  // namespace siesta::server
