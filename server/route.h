// Route: one method on one path, as register_routes() (routes.h) registers it. The
// operations routes (routes.cc) and the API routes (api_routes.h) are both tables of these,
// so one loop registers them all and answers every other method on a known path with 405.
#pragma once

#include <httplib.h>

#include <string_view>

namespace siesta::server {

struct Route {
  std::string_view method;  // "GET" also answers HEAD
  // An exact path, or one ending in "{name}": that placeholder stands for the rest of the
  // path (at least one byte, slashes included), as request.matches[1], percent-decoded.
  std::string_view path;
  httplib::Server::Handler handler;
};

}  // namespace siesta::server
