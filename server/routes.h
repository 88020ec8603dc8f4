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
//   (HEAD is answered for every GET route, without a body.)
//   the API routes           register_api_routes()
//   a known path with another method   405 + Allow, OpenAI-style error body
//   any other path                     404, OpenAI-style error body
// Every path but /health first passes authorize() (auth.h): without the right key it is
// answered 401 before its body is read or its handler runs. A chunked request body is then
// refused with 411 (cpp-httplib 0.11 would not hold it to --max-body-bytes); a body over
// --max-body-bytes is answered 413 (http_server.h).
//
// None of /health, /v1/status and /metrics may ever wake a sleeping session: they read
// counters only (ServerApp::status()).
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace siesta::server {

// Registers every route and the authentication check on `server`. `app` must outlive the
// server's last request.
// Thread rule: call before the server starts listening; handlers then run on httplib's
// worker threads.
void register_routes(httplib::Server& server, ServerApp& app);

}  // namespace siesta::server
