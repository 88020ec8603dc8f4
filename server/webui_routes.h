// The web page at / (server/webui/): GET /, /webui.js and /webui.css answer the embedded files
// (webui_assets.h). They carry no data, so they are served without the API key (the page
// asks for it, then sends it with every request it makes) and with a Content-Security-Policy
// that lets the page load nothing but these files and talk to nothing but this server.
// `--no-webui` leaves them out: / is then a 404 like any unknown path.
//
// Thread rule: the handlers run on the HTTP workers; they read constant data.
#pragma once

#include <string_view>
#include <vector>

#include "server/route.h"

namespace siesta::server {

// The page's routes (empty when `enabled` is false).
std::vector<Route> webui_routes(bool enabled);

// Whether `path` is one of the page's files: served without the API key while the page is on.
bool is_webui_path(std::string_view path);

}  // namespace siesta::server
