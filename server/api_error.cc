#include "server/api_error.h"

#include <exception>
#include <string>

namespace siesta::server {

nlohmann::json api_error_json(std::string_view message, std::string_view type,
                              std::string_view code) {
  return {{"error",
           {{"message", std::string(message)},
            {"type", std::string(type)},
            {"code", std::string(code)}}}};
}

void set_json(httplib::Response& response, const nlohmann::json& body) {
  std::string text;
  try {
    text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception&) {
    // Only allocation can fail here; answer with a fixed body rather than let it escape.
    response.status = 500;
    text = R"({"error":{"message":"response too large","type":"server_error","code":"internal"}})";
  }
  response.set_content(text + "\n", "application/json");
}

void set_api_error(httplib::Response& response, int http_status, std::string_view message,
                   std::string_view type, std::string_view code) {
  response.status = http_status;
  set_json(response, api_error_json(message, type, code));
}

}  // namespace siesta::server
