#include "server/routes.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/status_json.h"

namespace siesta::server {
namespace {

// cpp-httplib registers handlers per method; these are all the methods it can route.
// (It answers other methods with 400 before any handler runs.)
constexpr std::string_view kRoutableMethods[] = {"GET",   "POST",   "PUT",
                                                 "PATCH", "DELETE", "OPTIONS"};

struct Route {
  std::string_view method;  // "GET" also answers HEAD
  std::string_view path;    // exact path
  httplib::Server::Handler handler;
};

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

// cpp-httplib matches a route's path as a std::regex; escape it so a path means itself.
std::string literal_pattern(std::string_view path) {
  std::string pattern;
  for (char c : path) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) pattern += '\\';
    pattern += c;
  }
  return pattern;
}

std::vector<Route> routes(const ServerApp& app) {
  return {
      {"GET", "/health",
       [](const httplib::Request&, httplib::Response& response) {
         set_json(response, {{"status", "ok"}});
       }},
      {"GET", "/v1/status",
       [&app](const httplib::Request&, httplib::Response& response) {
         set_json(response, status_json(app.status()));
       }},
  };
}

}  // namespace

void register_routes(httplib::Server& server, const ServerApp& app) {
  const std::vector<Route> table = routes(app);
  std::vector<std::string_view> paths;  // each path once, in table order
  for (const Route& route : table) {
    add_handler(server, route.method, literal_pattern(route.path), route.handler);
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
      add_handler(server, method, literal_pattern(path),
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
}

}  // namespace siesta::server
