#include "server/routes.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/offload/offload_state.h"
#include "server/anthropic_routes.h"
#include "server/api_error.h"
#include "server/api_routes.h"
#include "server/llama_routes.h"
#include "server/metrics_text.h"
#include "server/responses_routes.h"
#include "server/route.h"
#include "server/status_json.h"
#include "server/webui_routes.h"

namespace siesta::server {
namespace {

// cpp-httplib registers handlers per method; these are all the methods it can route.
// (It answers other methods with 400 before any handler runs.)
constexpr std::string_view kRoutableMethods[] = {"GET",   "POST",   "PUT",
                                                 "PATCH", "DELETE", "OPTIONS"};

void add_handler(httplib::Server& server, std::string_view method, const std::string& pattern,
                 httplib::Server::Handler handler) {
  if (method == "GET") {
    server.Get(pattern, std::move(handler));
  } else if (method == "POST") {
    server.Post(pattern, std::move(handler));
  } else if (method == "PUT") {
    server.Put(pattern, std::move(handler));
  } else if (method == "PATCH") {
    server.Patch(pattern, std::move(handler));
  } else if (method == "DELETE") {
    server.Delete(pattern, std::move(handler));
  } else if (method == "OPTIONS") {
    server.Options(pattern, std::move(handler));
  }
}

// cpp-httplib matches a route's path as a std::regex; escape it so a path means itself. A
// trailing "{name}" (Route::path) stands for the rest of the path: one capture,
// request.matches[1].
std::string route_pattern(std::string_view path) {
  std::string_view placeholder;
  if (path.ends_with("}")) {
    const size_t open = path.rfind('{');
    if (open != std::string_view::npos) {
      placeholder = path.substr(open);
      path = path.substr(0, open);
    }
  }
  std::string pattern;
  for (char c : path) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) pattern += '\\';
    pattern += c;
  }
  if (!placeholder.empty()) pattern += "(.+)";
  return pattern;
}

// The cache state the offload request left, for its 200 body.
void answer_offload(ServerApp& app, httplib::Response& response) {
  if (!app.config().offload.enabled()) {
    set_api_error(response, 400,
                  "idle offload is off: start the server with --cache-idle-seconds N and "
                  "--cache-disk-dir DIR",
                  "invalid_request_error", "offload_disabled");
    return;
  }
  Status offloaded = app.engine().offload_now();
  if (!offloaded.ok()) {
    // FailedPrecondition is the one expected refusal (a command is running); anything else
    // is the server's fault.
    if (offloaded.code() == StatusCode::kFailedPrecondition) {
      set_api_error(response, 409, offloaded.message(), "invalid_request_error", "busy");
    } else {
      set_api_error(response, 500, offloaded.message(), "server_error", "internal");
    }
    return;
  }
  set_json(response,
           {{"state", std::string(offload_state_name(app.engine().cache_status().state))}});
}

std::vector<Route> routes(ServerApp& app) {
  return {
      {"GET", "/health",
       [](const httplib::Request&, httplib::Response& response) {
         set_json(response, {{"status", "ok"}});
       }},
      {"GET", "/v1/status",
       [&app](const httplib::Request&, httplib::Response& response) {
         set_json(response, status_json(app.status()));
       }},
      {"GET", "/metrics",
       [&app](const httplib::Request&, httplib::Response& response) {
         response.set_content(app.metrics_text(), kMetricsContentType);
       }},
      {"POST", "/v1/cache/offload",
       [&app](const httplib::Request&, httplib::Response& response) {
         answer_offload(app, response);
       }},
  };
}

}  // namespace

std::shared_ptr<const RequestPolicy> register_routes(httplib::Server& server, ServerApp& app) {
  std::vector<Route> table = routes(app);
  for (Route& route : api_routes(app)) table.push_back(std::move(route));
  for (Route& route : anthropic_routes(app)) table.push_back(std::move(route));
  for (Route& route : llama_routes(app)) table.push_back(std::move(route));
  for (Route& route : responses_routes(app)) table.push_back(std::move(route));
  for (Route& route : webui_routes(app.config().webui)) table.push_back(std::move(route));
  std::vector<std::string> json_posts;  // every POST route reads a JSON body (or none)
  for (const Route& route : table) {
    if (route.method == "POST") json_posts.emplace_back(route.path);
  }
  auto policy = std::make_shared<const RequestPolicy>(app.config(), std::move(json_posts));
  // Before routing, and so before a body is read: a request without the right key costs
  // nothing but its headers. /health stays open for load balancers and liveness probes.
  server.set_pre_routing_handler(
      [policy](const httplib::Request& request, httplib::Response& response) {
        return policy->admit(request, response) ? httplib::Server::HandlerResponse::Unhandled
                                                : httplib::Server::HandlerResponse::Handled;
      });
  std::vector<std::string_view> paths;  // each path once, in table order
  for (const Route& route : table) {
    add_handler(server, route.method, route_pattern(route.path), route.handler);
    if (std::find(paths.begin(), paths.end(), route.path) == paths.end()) {
      paths.push_back(route.path);
    }
  }
  // Every other method on a known path: 405 naming the methods the path does serve.
  for (std::string_view path : paths) {
    std::string allow;
    for (const Route& route : table) {
      if (route.path != path) continue;
      if (!allow.empty()) allow += ", ";
      allow += std::string(route.method);
      if (route.method == "GET") allow += ", HEAD";
    }
    for (std::string_view method : kRoutableMethods) {
      const bool served = std::any_of(table.begin(), table.end(), [&](const Route& route) {
        return route.path == path && route.method == method;
      });
      if (served) continue;
      add_handler(server, method, route_pattern(path),
                  [allow, path = std::string(path)](const httplib::Request& request,
                                                    httplib::Response& response) {
                    response.set_header("Allow", allow);
                    std::string message = request.method;
                    message.append(" is not allowed on ").append(path);
                    message.append(" (allowed: ").append(allow).append(")");
                    set_api_error(response, 405, message, "invalid_request_error",
                                  "method_not_allowed");
                  });
    }
  }
  // Anything else: 404. cpp-httplib tries a method's handlers in registration order, so this
  // catch-all, registered last, only sees paths no route claimed.
  for (std::string_view method : kRoutableMethods) {
    add_handler(
        server, method, ".*", [](const httplib::Request& request, httplib::Response& response) {
          set_api_error(response, 404, "no such endpoint: " + request.method + " " + request.path,
                        "invalid_request_error", "not_found");
        });
  }
  return policy;
}

}  // namespace siesta::server
