// What the e2e tests send and read: a user message and fields set on a request body; an
// answer's JSON body after the status it must have, a GET's body, the server's /v1/status.
// The readers record a test failure that says what went wrong (transport error, status, not
// JSON) and return an empty json then, so a test goes on to report its own checks.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/server_process.h"

namespace siesta::testing {

// The body of `response` as JSON, expecting `status`; `what` names the request in failures.
inline nlohmann::json body_of(const httplib::Result& response, int status,
                              const std::string& what) {
  EXPECT_TRUE(response) << what << ": " << httplib::to_string(response.error());
  if (!response) return nlohmann::json();
  EXPECT_EQ(response->status, status) << what << ": " << response->body;
  nlohmann::json body = nlohmann::json::parse(response->body, nullptr, false);
  EXPECT_FALSE(body.is_discarded()) << what << ": not JSON: " << response->body;
  return body.is_discarded() ? nlohmann::json() : body;
}

// GET `path`, expecting 200 and JSON.
inline nlohmann::json get_json(const ServerProcess& server, const std::string& path) {
  return body_of(server.get(path), 200, "GET " + path);
}

// /v1/status, or an empty object after a failure.
inline nlohmann::json status_of(const ServerProcess& server) {
  Result<nlohmann::json> status = server.status();
  EXPECT_TRUE(status.ok()) << status.status().to_string();
  return status.ok() ? *status : nlohmann::json::object();
}

// A user's message with `text` as its content (every chat API's shape).
inline nlohmann::json user(const std::string& text) {
  return {{"role", "user"}, {"content", text}};
}

// `body` with the fields of `more` set (replacing those it had).
inline nlohmann::json with_fields(nlohmann::json body, const nlohmann::json& more) {
  for (const auto& [name, value] : more.items()) body[name] = value;
  return body;
}

}  // namespace siesta::testing
