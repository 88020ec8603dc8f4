// The HTTP routes of siesta-server, registered on a cpp-httplib server.
//
//   GET /health     200 {"status":"ok"}
//   GET /v1/status  200 the body documented in status_json.h
//   (HEAD is answered for every GET route, without a body.)
//   a known path with another method   405 + Allow, OpenAI-style error body
//   any other path                     404, OpenAI-style error body
//
// Neither /health nor /v1/status may ever wake a sleeping session: they read counters only
// (ServerApp::status()).
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace siesta::server {

// Registers every route on `server`. `app` must outlive the server's last request.
// Thread rule: call before the server starts listening; handlers then run on httplib's
// worker threads and only use `app`'s thread-safe const methods.
void register_routes(httplib::Server& server, const ServerApp& app);

}  // namespace siesta::server
