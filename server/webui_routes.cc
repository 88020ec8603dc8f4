#include "server/webui_routes.h"

#include <algorithm>
#include <string>

#include "server/webui_assets.h"

namespace siesta::server {
namespace {

// The page loads its own script and style and calls this server; nothing else, no inline code,
// no frames of it elsewhere (a page in someone's frame could be made to click "offload").
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

std::vector<Route> webui_routes(bool enabled) {
  std::vector<Route> routes;
  if (!enabled) return routes;
  for (const WebAsset& asset : web_assets()) {
    routes.push_back(
        {"GET", asset.path, [&asset](const httplib::Request&, httplib::Response& response) {
           response.set_header("Content-Security-Policy", kContentSecurityPolicy);
           response.set_header("X-Content-Type-Options", "nosniff");
           response.set_header("Cache-Control", "no-cache");
           response.set_content(std::string(asset.body), std::string(asset.content_type));
         }});
  }
  return routes;
}

bool is_webui_path(std::string_view path) {
  const auto assets = web_assets();
  return std::any_of(assets.begin(), assets.end(),
                     [&](const WebAsset& asset) { return asset.path == path; });
}

}  // namespace siesta::server
