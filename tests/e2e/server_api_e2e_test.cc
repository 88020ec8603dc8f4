// The OpenAI-compatible API of the real binary: authentication, refused input, limits,
// routing errors, clients that hang up, /metrics and /v1/models, and the shapes of plain,
// streamed and chat answers. Errors must be OpenAI's {"error": {message, type, param, code}}
// (server/api_error.h: type "invalid_request_error" for 4xx, "authentication_error" for 401).
//
// Injected: wrong keys, malformed JSON, wrong types, an oversize body, requests cut in the
// middle and connections reset mid-request and mid-stream.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Checks `response` is `status` with an OpenAI error body of `type`; returns the error object.
json expect_error(const httplib::Result& response, int status, const std::string& type,
                  const std::string& what) {
  EXPECT_TRUE(response) << what << ": " << httplib::to_string(response.error());
  if (!response) return json();
  EXPECT_EQ(response->status, status) << what << ": " << response->body;
  const json body = json::parse(response->body, nullptr, false);
  EXPECT_TRUE(body.is_object() && body.contains("error") && body["error"].is_object())
      << what << ": " << response->body;
  if (!body.is_object() || !body.contains("error")) return json();
  const json& error = body["error"];
  EXPECT_TRUE(error.contains("message") && error["message"].is_string() &&
              !error["message"].get<std::string>().empty())
      << what << ": " << response->body;
  EXPECT_EQ(error.value("type", ""), type) << what << ": " << response->body;
  EXPECT_TRUE(error.contains("param")) << what << ": " << response->body;
  EXPECT_TRUE(error.contains("code")) << what << ": " << response->body;
  return error;
}

TEST(ServerApiE2eTest, ApiKeyIsRequiredEverywhereButHealth) {
  auto server = start_or_die(with(kTinyModel, {"--api-key", "right-key"}));
  ASSERT_NE(server, nullptr);
  const json request = completion_request("Hello", 4);

  httplib::Result health = server->get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << "/health stays open";

  // No key, then a wrong key.
  for (const std::string& key : {std::string(), std::string("wrong-key")}) {
    SCOPED_TRACE("key \"" + key + "\"");
    server->set_api_key(key);
    expect_error(server->post_json("/v1/completions", request), 401, "authentication_error",
                 "completions");
    expect_error(server->post_json(
                     "/v1/chat/completions",
                     {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}}),
                 401, "authentication_error", "chat");
    expect_error(server->get("/v1/models"), 401, "authentication_error", "models");
    expect_error(server->get("/v1/status"), 401, "authentication_error", "status");
    expect_error(server->post("/v1/cache/offload", ""), 401, "authentication_error", "offload");
    expect_error(server->post_json("/slots/0?action=save", {{"filename", "x"}}), 401,
                 "authentication_error", "slots");
  }

  server->set_api_key("right-key");
  Result<Completion> answer = complete(*server, request);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(answer->http_status, 200) << answer->body.dump();
  EXPECT_TRUE(server->status().ok());
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, ApiKeyFromTheEnvironment) {
  // Set in this (single-threaded) test process; the child inherits it.
  ASSERT_EQ(::setenv("SIESTA_API_KEY", "env-key", 1), 0);
  auto server = start_or_die(kTinyModel);
  ASSERT_EQ(::unsetenv("SIESTA_API_KEY"), 0);
  ASSERT_NE(server, nullptr);
  expect_error(server->post_json("/v1/completions", completion_request("Hi", 2)), 401,
               "authentication_error", "no key");
  server->set_api_key("env-key");
  Result<Completion> answer = complete(*server, completion_request("Hi", 2));
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(answer->http_status, 200) << answer->body.dump();
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, BadInputIsA400AndLeavesTheServerWorking) {
  auto server = start_or_die(kTinyModel);  // context 256
  ASSERT_NE(server, nullptr);
  const std::string invalid = "invalid_request_error";
  expect_error(server->post("/v1/completions", "{\"prompt\": \"abc\", "), 400, invalid,
               "malformed JSON");
  expect_error(server->post("/v1/completions", "[1, 2, 3]"), 400, invalid, "not an object");
  expect_error(server->post_json("/v1/completions", {{"prompt", 5}, {"max_tokens", 4}}), 400,
               invalid, "prompt a number");
  expect_error(server->post_json("/v1/completions", {{"prompt", "abc"}, {"max_tokens", "4"}}), 400,
               invalid, "max_tokens a string");
  expect_error(server->post_json("/v1/completions", {{"prompt", "abc"}, {"temperature", "hot"}}),
               400, invalid, "temperature a string");
  expect_error(server->post_json("/v1/completions", {{"max_tokens", 4}}), 400, invalid,
               "no prompt");
  expect_error(server->post_json("/v1/completions", completion_request("abc", 0)), 400, invalid,
               "max_tokens 0");
  expect_error(server->post_json("/v1/completions", completion_request(std::string(300, 'x'), 4)),
               400, invalid, "prompt beyond the context");
  expect_error(server->post_json("/v1/chat/completions", {{"messages", "hello"}}), 400, invalid,
               "messages not an array");
  expect_error(server->post_json("/v1/chat/completions", {{"max_tokens", 4}}), 400, invalid,
               "no messages");

  // None of that touched the session: a good request still works.
  Result<Completion> answer = complete(*server, completion_request("Still here?", 8));
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(answer->http_status, 200) << answer->body.dump();
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, OversizeBodyIs413) {
  auto server = start_or_die(with(kTinyModel, {"--max-body-bytes", "1024"}));
  ASSERT_NE(server, nullptr);
  const json big = completion_request(std::string(4096, 'y'), 4);
  httplib::Result response = server->post_json("/v1/completions", big);
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 413) << response->body;
  // A body under the limit is served.
  Result<Completion> answer = complete(*server, completion_request("Small", 4));
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(answer->http_status, 200) << answer->body.dump();
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, UnknownPathIs404AndWrongMethodIs405) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  expect_error(server->get("/v1/nothing-here"), 404, "invalid_request_error", "unknown GET");
  expect_error(server->post_json("/v1/nothing-here", json::object()), 404, "invalid_request_error",
               "unknown POST");
  expect_error(server->get("/v1/completions"), 405, "invalid_request_error", "GET completions");
  expect_error(server->get("/v1/chat/completions"), 405, "invalid_request_error", "GET chat");
  expect_error(server->post_json("/v1/models", json::object()), 405, "invalid_request_error",
               "POST models");
  expect_error(server->get("/v1/cache/offload"), 405, "invalid_request_error", "GET offload");
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, AbruptDisconnectsLeaveTheServerServing) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "4096"}));
  ASSERT_NE(server, nullptr);
  const std::string request = http_request_text(
      "POST", "/v1/completions", completion_request("Disconnect me, please.", 64).dump());

  // Injected 1: half a request, then a reset.
  {
    Result<RawConnection> connection = RawConnection::connect(server->port());
    ASSERT_TRUE(connection.ok()) << connection.status().to_string();
    ASSERT_TRUE(connection->send_all(request.substr(0, request.size() / 2)).ok());
    connection->reset();
  }
  // Injected 2: a whole request, then a reset before any answer is read.
  {
    Result<RawConnection> connection = RawConnection::connect(server->port());
    ASSERT_TRUE(connection.ok()) << connection.status().to_string();
    ASSERT_TRUE(connection->send_all(request).ok());
    connection->reset();
  }
  // Injected 3: a long stream, reset after its first event.
  {
    json streamed = completion_request("Stream and vanish.", 4000);
    streamed["stream"] = true;
    Result<SseStream> stream =
        SseStream::open(server->port(), "/v1/completions", streamed.dump(), {});
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    ASSERT_EQ(stream->head().status, 200);
    Result<std::optional<std::string>> first = stream->next_data();
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE(first->has_value());
    stream->disconnect();
  }
  // Injected 4: the head only, then an orderly close.
  {
    Result<RawConnection> connection = RawConnection::connect(server->port());
    ASSERT_TRUE(connection.ok());
    ASSERT_TRUE(connection->send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\n").ok());
    connection->close();
  }

  ASSERT_TRUE(server->running()) << server->stderr_text();
  httplib::Result health = server->get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  // The next request is answered, with the bytes a fresh server gives.
  const json next = completion_request("After the hang-ups:", 16);
  Result<Completion> answer = complete(*server, next);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  ASSERT_EQ(answer->http_status, 200) << answer->body.dump();
  auto fresh = start_or_die(with(kTinyModel, {"--ctx", "4096"}));
  ASSERT_NE(fresh, nullptr);
  Result<Completion> want = complete(*fresh, next);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(answer->text, want->text);
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, CompletionStreamAndChatShapes) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json request = completion_request("Shapes of answers:", 12);
  Result<Completion> plain = complete(*server, request);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_EQ(plain->http_status, 200) << plain->body.dump();
  EXPECT_EQ(plain->body.value("object", ""), "text_completion") << plain->body.dump();
  EXPECT_EQ(plain->body.value("model", ""), "synthetic:tiny") << plain->body.dump();
  EXPECT_EQ(plain->prompt_tokens, 18) << "one token per byte";
  EXPECT_EQ(plain->completion_tokens, 12);
  EXPECT_GE(plain->cached_tokens, 0) << "usage.prompt_tokens_details.cached_tokens";
  EXPECT_EQ(plain->finish_reason, "length");
  for (char c : plain->text) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << "printable ASCII";

  // Streamed: the same bytes, in several chunks, ending with [DONE].
  Result<Completion> streamed = complete_streamed(*server, request);
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  EXPECT_EQ(streamed->text, plain->text);
  EXPECT_GE(streamed->chunks, 2u);
  EXPECT_EQ(streamed->finish_reason, "length");

  // A prompt that extends the last one reuses the history.
  Result<Completion> extended =
      complete(*server, completion_request("Shapes of answers:" + plain->text + " More:", 8));
  ASSERT_TRUE(extended.ok()) << extended.status().to_string();
  EXPECT_GT(extended->cached_tokens, 0) << extended->body.dump();

  const json chat = {{"messages", {{{"role", "user"}, {"content", "Say something."}}}},
                     {"max_tokens", 10},
                     {"temperature", 0}};
  Result<Completion> chat_plain = complete(*server, chat, "/v1/chat/completions");
  ASSERT_TRUE(chat_plain.ok()) << chat_plain.status().to_string();
  ASSERT_EQ(chat_plain->http_status, 200) << chat_plain->body.dump();
  EXPECT_EQ(chat_plain->body.value("object", ""), "chat.completion");
  EXPECT_EQ(chat_plain->body["choices"][0]["message"].value("role", ""), "assistant");
  Result<Completion> chat_streamed = complete_streamed(*server, chat, "/v1/chat/completions");
  ASSERT_TRUE(chat_streamed.ok()) << chat_streamed.status().to_string();
  EXPECT_EQ(chat_streamed->text, chat_plain->text);
  EXPECT_EQ(chat_streamed->body.value("object", ""), "chat.completion.chunk");
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, ModelsAndMetrics) {
  TempDir temp;
  auto server = start_or_die(with(kTinyModel, {"--cache-idle-seconds", "600", "--cache-ram-mib",
                                               "0", "--cache-disk-dir", temp.file("cache")}));
  ASSERT_NE(server, nullptr);
  httplib::Result models = server->get("/v1/models");
  ASSERT_TRUE(models) << httplib::to_string(models.error());
  ASSERT_EQ(models->status, 200) << models->body;
  const json list = json::parse(models->body, nullptr, false);
  ASSERT_TRUE(list.is_object()) << models->body;
  EXPECT_EQ(list.value("object", ""), "list");
  ASSERT_TRUE(list.contains("data") && list["data"].is_array() && list["data"].size() == 1)
      << models->body;
  EXPECT_EQ(list["data"][0].value("id", ""), "synthetic:tiny");
  EXPECT_EQ(list["data"][0].value("object", ""), "model");

  // One save, so the counters have something to say.
  ASSERT_TRUE(complete(*server, completion_request("Count me.", 4)).ok());
  httplib::Result offload = server->post("/v1/cache/offload", "");
  ASSERT_TRUE(offload);
  ASSERT_TRUE(server->wait_for_cache_state("disk").ok());

  httplib::Result metrics = server->get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  ASSERT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("text/plain"));
  const std::string& text = metrics->body;
  EXPECT_THAT(text, HasSubstr("# TYPE "));
  for (const char* word : {"save", "restore", "fallback"}) {
    EXPECT_THAT(text, HasSubstr(word)) << "the cache counters in /metrics:\n" << text;
  }
  // Prometheus sample lines "<name>[{labels}] <value>": the saves equal /v1/status's count,
  // and the fallbacks are counted per reason.
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(cache_counter(*status, "saves"), 1) << status->dump();
  EXPECT_THAT(text, ::testing::ContainsRegex("\n[a-z_]*_saves(_total)? 1(\\.0+)?\n")) << text;
  EXPECT_THAT(text, ::testing::ContainsRegex("\n[a-z_]*fallbacks[a-z_]*\\{reason=\"corrupt\"\\} 0"))
      << text;
  expect_clean_exit(*server);
}

TEST(ServerApiE2eTest, SeveralDevicesAreRefusedWithOffloadOn) {
  TempDir temp;
  for (const char* flag : {"--devices"}) {
    Result<ProcessExit> exit = ServerProcess::run_to_exit(
        {"--backend", "sim", "--port", "0", flag, "2", "--cache-idle-seconds", "5",
         "--cache-ram-mib", "0", "--cache-disk-dir", temp.file("cache")});
    ASSERT_TRUE(exit.ok()) << exit.status().to_string();
    EXPECT_EQ(exit->exit_code, 2) << flag << ": " << exit->describe() << "\n" << exit->stderr_text;
    EXPECT_THAT(exit->stderr_text, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace siesta::testing
