// The web page's files (server/webui/: page.html, page.js, page.css), compiled into the binary
// (the build embeds them: server/CMakeLists.txt), so the page needs no outside asset and no
// build tool at run time.
//
// Thread rule: none (constant data).
#pragma once

#include <span>
#include <string_view>

namespace siesta::server {

struct WebAsset {
  std::string_view path;          // "/", "/webui.js", "/webui.css"
  std::string_view content_type;  // with its charset
  std::string_view body;
};

// The page's files, in that order.
std::span<const WebAsset> web_assets();

}  // namespace siesta::server
