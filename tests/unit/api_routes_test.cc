// The API routes over loopback HTTP, in process, with a real ServerApp on the simulator
// (synthetic:tiny) behind the real HttpServer: completions, chat, SSE framing, refusals, slot
// files, API keys, and a client that leaves cancelling its generation.
#include "server/api_routes.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "server/chat_template.h"
#include "server/http_server.h"
#include "server/server_app.h"
#include "tests/support/spin_until.h"
#include "tests/support/temp_dir.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A ServerApp served by the real HttpServer (every route, the request policy, the connection
// loop that tells a handler when its client has gone) on a free loopback port.
class ApiServer {
 public:
  explicit ApiServer(ServerConfig config = {}) {
    config.backend = runtime::BackendKind::kSim;
    config.model = "synthetic:tiny";
    Result<std::unique_ptr<ServerApp>> app = ServerApp::start(config, clock_, nullptr);
    if (!app.ok()) {
      ADD_FAILURE() << app.status().to_string();
      return;
    }
    app_ = std::move(app).value();
    http_ = std::make_unique<HttpServer>(*app_);
    Result<int> port = http_->bind("127.0.0.1", 0);
    if (!port.ok()) {
      ADD_FAILURE() << port.status().to_string();
      return;
    }
    port_ = *port;
    // bind() listens already: connections queue until run() serves them.
    served_ = std::async(std::launch::async, [this] { return http_->run(); });
  }
  ~ApiServer() {
    if (!http_) return;
    http_->stop();
    if (served_.valid()) {
      EXPECT_TRUE(served_.get().ok());
    }
  }

  bool ok() const { return app_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  ServerApp& app() { return *app_; }
  httplib::Client client(const std::string& key = "") const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(30, 0);
    if (!key.empty()) client.set_bearer_token_auth(key.c_str());
    return client;
  }
  httplib::Result post(const std::string& path, const json& body, const std::string& key = "") {
    return client(key).Post(path.c_str(), body.dump(), "application/json");
  }

  // Waits until the engine has run `commands` commands and has nothing running or queued.
  void wait_idle(uint64_t commands) {
    const bool idle = app_->engine().wait_for_status(
        [commands](const engine::EngineStatus& status) {
          return status.commands_run >= commands && !status.busy && status.queued_commands == 0;
        },
        std::chrono::seconds(30));
    EXPECT_TRUE(idle) << "the engine did not become idle";
  }

 private:
  ManualClock clock_;
  std::unique_ptr<ServerApp> app_;
  std::unique_ptr<HttpServer> http_;  // after app_: it goes first
  int port_ = -1;
  std::future<Status> served_;
};

json body_of(const httplib::Result& result) {
  EXPECT_TRUE(result) << "no response";
  if (!result) return json();
  return json::parse(result->body, nullptr, false);
}

void expect_error(const httplib::Result& result, int status, const std::string& param,
                  const std::string& code = "") {
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, status) << result->body;
  const json body = json::parse(result->body, nullptr, false);
  ASSERT_TRUE(body.contains("error")) << result->body;
  EXPECT_EQ(body["error"]["param"], param.empty() ? json(nullptr) : json(param)) << result->body;
  if (!code.empty()) {
    EXPECT_EQ(body["error"]["code"], code) << result->body;
  }
}

// The "data: " payloads of an SSE body, checking the framing on the way.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> payloads;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "unterminated event: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_EQ(event.find('\n'), std::string::npos) << event;
    payloads.push_back(event.substr(6));
    at = end + 2;
  }
  return payloads;
}

TEST(ApiRoutesTest, Models) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  auto result = server.client().Get("/v1/models");
  const json body = body_of(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["data"][0]["id"], "synthetic:tiny");
  EXPECT_EQ(body["data"][0]["owned_by"], "siesta");
}

TEST(ApiRoutesTest, CompletionAndItsContinuationReusesTheHistory) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  auto first = server.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 8}});
  const json a = body_of(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["model"], "synthetic:tiny");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(a["usage"]["completion_tokens"], 8);
  EXPECT_EQ(a["usage"]["total_tokens"], 13);
  const std::string text = a["choices"][0]["text"];
  EXPECT_EQ(text.size(), 8u);

  auto second =
      server.post("/v1/completions", {{"prompt", "Hello" + text + "!"}, {"max_tokens", 2}});
  const json b = body_of(second);
  ASSERT_EQ(second->status, 200) << second->body;
  // The history held the prompt and every generated token but the last.
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 5 + 8 - 1);
}

TEST(ApiRoutesTest, ChatContinuationIsACacheHit) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto first = server.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 6}});
  const json a = body_of(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["choices"][0]["message"]["role"], "assistant");
  const std::string answer = a["choices"][0]["message"]["content"];
  const int prompt_tokens = a["usage"]["prompt_tokens"];
  EXPECT_EQ(prompt_tokens, static_cast<int>(render_chat_prompt({{ChatRole::kUser, "Hi"}}).size()));

  messages.push_back({{"role", "assistant"}, {"content", answer}});
  messages.push_back({{"role", "user"}, {"content", "More"}});
  auto second = server.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}});
  const json b = body_of(second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], prompt_tokens + 6 - 1);
}

TEST(ApiRoutesTest, StreamedCompletionHasTheSameTextAsTheWholeOne) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  const json request = {{"prompt", "Stream me"}, {"max_tokens", 12}};
  const json whole = body_of(server.post("/v1/completions", request));
  // With Accept-Encoding the events must still come through uncompressed.
  httplib::Client client = server.client();
  json streamed_request = request;
  streamed_request["stream"] = true;
  streamed_request["stream_options"] = {{"include_usage", true}};
  auto result = client.Post("/v1/completions", {{"Accept-Encoding", "gzip, deflate"}},
                            streamed_request.dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_FALSE(result->has_header("Content-Encoding"));
  const std::vector<std::string> payloads = sse_payloads(result->body);
  ASSERT_GE(payloads.size(), 4u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 3 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, whole["choices"][0]["text"].get<std::string>());
  const json finish = json::parse(payloads[payloads.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
}

TEST(ApiRoutesTest, StreamedChat) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  auto result = server.post("/v1/chat/completions",
                            {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                             {"max_tokens", 5},
                             {"stream", true}});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const std::vector<std::string> payloads = sse_payloads(result->body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  const json first = json::parse(payloads.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(first.contains("usage"));
  const json last = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(first["id"], last["id"]);
}

TEST(ApiRoutesTest, RefusedRequests) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  httplib::Client client = server.client();
  expect_error(client.Post("/v1/completions", "{not json", "application/json"), 400, "");
  expect_error(server.post("/v1/completions", {{"prompt", 3}}), 400, "prompt");
  expect_error(server.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", "9"}}), 400,
               "max_tokens");
  expect_error(server.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1ull << 40}}), 400,
               "max_tokens");
  expect_error(server.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 100000}}), 400,
               "prompt", "context_length_exceeded");
  expect_error(
      server.post("/v1/completions", {{"prompt", std::string(300, 'x')}, {"stream", true}}), 400,
      "prompt", "context_length_exceeded");
  expect_error(server.post("/v1/chat/completions",
                           {{"messages", json::array({{{"role", "bot"}, {"content", "x"}}})}}),
               400, "messages[0].role");
  // A refused request leaves the engine as it was: nothing ran.
  EXPECT_EQ(server.app().engine().status().commands_run, 0u);
}

TEST(ApiRoutesTest, SlotSaveEraseRestore) {
  testing::TempDir dir;
  ServerConfig config;
  config.slot_save_path = dir.file("slots");
  ApiServer server(config);
  ASSERT_TRUE(server.ok());
  auto generated = server.post("/v1/completions", {{"prompt", "Remember this"}, {"max_tokens", 4}});
  const std::string text = body_of(generated)["choices"][0]["text"];
  const uint64_t tokens = 13 + 4 - 1;

  auto saved = server.post("/slots/0?action=save", {{"filename", "conv.bin"}});
  json body = body_of(saved);
  ASSERT_EQ(saved->status, 200) << saved->body;
  EXPECT_EQ(body["id_slot"], 0);
  EXPECT_EQ(body["filename"], "conv.bin");
  EXPECT_EQ(body["n_saved"], tokens);
  const uint64_t written = body["n_written"];
  EXPECT_GT(written, 0u);
  EXPECT_TRUE(body["timings"]["save_ms"].is_number());

  auto erased = server.client().Post("/slots/0?action=erase", "", "application/json");
  body = body_of(erased);
  ASSERT_EQ(erased->status, 200) << erased->body;
  EXPECT_EQ(body, json({{"id_slot", 0}, {"n_erased", tokens}}));
  EXPECT_EQ(server.app().engine().status().history_tokens, 0u);

  auto restored = server.post("/slots/0?action=restore", {{"filename", "conv.bin"}});
  body = body_of(restored);
  ASSERT_EQ(restored->status, 200) << restored->body;
  EXPECT_EQ(body["n_restored"], tokens);
  EXPECT_EQ(body["n_read"], written);
  EXPECT_TRUE(body["timings"]["restore_ms"].is_number());
  auto continued =
      server.post("/v1/completions", {{"prompt", "Remember this" + text}, {"max_tokens", 1}});
  EXPECT_EQ(body_of(continued)["usage"]["prompt_tokens_details"]["cached_tokens"], tokens);

  auto file_erased = server.post("/slots/0?action=erase", {{"filename", "conv.bin"}});
  ASSERT_EQ(file_erased->status, 200) << file_erased->body;
  EXPECT_EQ(body_of(file_erased), json({{"id_slot", 0}, {"filename", "conv.bin"}}));
  expect_error(server.post("/slots/0?action=restore", {{"filename", "conv.bin"}}), 400, "filename",
               "not_found");
  expect_error(server.post("/slots/0?action=erase", {{"filename", "conv.bin"}}), 400, "filename");
  expect_error(server.post("/slots/0?action=save", {{"filename", "../up"}}), 400, "filename");
  expect_error(server.post("/slots/0?action=save", json::object()), 400, "filename");
  expect_error(server.post("/slots/0?action=save", {{"filename", 7}}), 400, "filename");
  expect_error(server.post("/slots/0?action=fly", {{"filename", "x"}}), 400, "action");
  expect_error(server.post("/slots/0", {{"filename", "x"}}), 400, "action");
}

TEST(ApiRoutesTest, SlotFilesNeedTheFlag) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  for (const char* action : {"save", "restore", "erase"}) {
    auto result = server.post(std::string("/slots/0?action=") + action, {{"filename", "x"}});
    expect_error(result, 501, "");  // llama-server's answer: the feature is not offered
    EXPECT_THAT(result->body, HasSubstr("--slot-save-path")) << action;
  }
  // Erasing the slot's history needs no file.
  auto erased = server.client().Post("/slots/0?action=erase", "", "application/json");
  ASSERT_TRUE(erased);
  EXPECT_EQ(erased->status, 200) << erased->body;
}

// llama-server serves OpenAI's routes with and without /v1; --alias names the model in every
// answer and in the model list, whatever name a request sends.
TEST(ApiRoutesTest, UnprefixedTwinsAndTheAlias) {
  ServerConfig config;
  config.alias = "my-model";
  ApiServer server(config);
  ASSERT_TRUE(server.ok());
  for (const char* path : {"/models", "/v1/models"}) {
    auto listed = server.client().Get(path);
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->status, 200) << path;
    EXPECT_EQ(json::parse(listed->body)["data"][0]["id"], "my-model") << path;
  }
  for (const char* path : {"/models/my-model", "/v1/models/synthetic:tiny"}) {
    auto one = server.client().Get(path);
    ASSERT_TRUE(one);
    EXPECT_EQ(one->status, 200) << path;
    EXPECT_EQ(json::parse(one->body)["id"], "my-model");
  }
  auto unknown = server.client().Get("/models/gpt-4o");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto answered =
      server.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"model", "gpt-4o"}});
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->status, 200) << answered->body;
  EXPECT_EQ(json::parse(answered->body)["model"], "my-model");
  // /completions is llama-server's native API there, not OpenAI's twin.
  for (const char* path : {"/completions", "/completion"}) {
    auto native = server.post(path, {{"prompt", "x"}, {"n_predict", 2}, {"model", "gpt-4o"}});
    ASSERT_TRUE(native);
    EXPECT_EQ(native->status, 200) << native->body;
    const json body = json::parse(native->body);
    EXPECT_EQ(body["model"], "my-model") << path;
    EXPECT_EQ(body["content"].get<std::string>().size(), 2u) << path;
    EXPECT_FALSE(body.contains("choices")) << path;
  }
  auto chat = server.post(
      "/chat/completions",
      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 2}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["object"], "chat.completion");
}

// llama-server's own endpoints: tokens are bytes, the template is chat's, /props and /slots
// in its field names.
TEST(ApiRoutesTest, LlamaServersTokenizeDetokenizeAndTemplate) {
  ApiServer server;
  ASSERT_TRUE(server.ok());
  auto plain = server.post("/tokenize", {{"content", "Hi"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(json::parse(plain->body), json({{"tokens", {72, 105}}}));
  auto pieces = server.post("/tokenize", {{"content", "\xc3\xa9"}, {"with_pieces", true}});
  ASSERT_TRUE(pieces);
  EXPECT_EQ(json::parse(pieces->body)["tokens"],
            json::array({{{"id", 195}, {"piece", {195}}}, {{"id", 169}, {"piece", {169}}}}))
      << "a byte of a multi-byte character is its bytes, as llama-server";
  auto text = server.post("/detokenize", {{"tokens", {72, 105}}});
  ASSERT_TRUE(text);
  EXPECT_EQ(json::parse(text->body)["content"], "Hi");
  expect_error(server.post("/detokenize", {{"tokens", {72, 256}}}), 400, "tokens[1]");
  expect_error(server.post("/tokenize", json::object()), 400, "content");
  expect_error(server.post("/tokenize", {{"content", "x"}, {"with_pieces", 1}}), 400,
               "with_pieces");
  auto prompt = server.post("/apply-template",
                            {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
  ASSERT_TRUE(prompt);
  EXPECT_EQ(json::parse(prompt->body)["prompt"], "<|user|>\nhi\n<|assistant|>\n");
  expect_error(server.post("/apply-template", {{"messages", json::array()}}), 400, "messages");
}

TEST(ApiRoutesTest, LlamaServersPropsAndSlots) {
  ServerConfig config;
  config.alias = "local";
  ApiServer server(config);
  ASSERT_TRUE(server.ok());
  auto props = server.client().Get("/props");
  ASSERT_TRUE(props);
  const json body = json::parse(props->body);
  EXPECT_EQ(body["total_slots"], 1);
  EXPECT_EQ(body["model_alias"], "local");
  EXPECT_EQ(body["default_generation_settings"]["n_ctx"], 256);
  EXPECT_EQ(body["default_generation_settings"]["params"]["n_predict"], -1);
  EXPECT_EQ(body["default_generation_settings"]["params"]["min_p"], 0.05);
  EXPECT_EQ(body["default_generation_settings"]["params"]["samplers"],
            json({"top_k", "top_p", "min_p", "temperature"}));
  EXPECT_FALSE(body["is_sleeping"].get<bool>()) << "offload is off: the server never sleeps";
  EXPECT_THAT(body["build_info"].get<std::string>(), HasSubstr("siesta-server"));
  auto slots = server.client().Get("/slots");
  ASSERT_TRUE(slots);
  const json listed = json::parse(slots->body);
  ASSERT_EQ(listed.size(), 1u);
  for (const char* name :
       {"id", "id_task", "n_ctx", "is_processing", "params", "next_token", "state", "tokens"}) {
    EXPECT_TRUE(listed[0].contains(name)) << name;
  }
}

TEST(ApiRoutesTest, NoSlotsTurnsTheSlotsEndpointsOff) {
  ServerConfig config;
  config.slots_endpoints = false;
  ApiServer server(config);
  ASSERT_TRUE(server.ok());
  auto listed = server.client().Get("/slots");
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 501);
  expect_error(server.post("/slots/0?action=erase", json::object()), 501, "", "not_supported");
}

TEST(ApiRoutesTest, ApiKey) {
  ServerConfig config;
  config.api_key = "k3y";
  ApiServer server(config);
  ASSERT_TRUE(server.ok());
  auto missing = server.client().Get("/v1/models");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(missing->get_header_value("WWW-Authenticate"), "Bearer");
  auto wrong = server.post("/v1/completions", {{"prompt", "x"}}, "nope");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(server.app().engine().status().commands_run, 0u);
  auto right = server.client("k3y").Get("/v1/models");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
}

// Sends `body` as a POST to `path` on a raw socket and closes it without reading.
void post_and_leave(int port, const std::string& path, const std::string& body,
                    const std::function<void()>& before_close) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  before_close();
  ::close(fd);
}

// A client that leaves while its request waits behind another command: its generation is
// cancelled, so the engine generates (almost) nothing for it. Streaming and not.
TEST(ApiRoutesTest, AClientThatLeavesCancelsItsGeneration) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "whole");
    ApiServer server;
    ASSERT_TRUE(server.ok());
    engine::Engine& engine = server.app().engine();
    // Hold the engine thread inside a generation until released.
    std::promise<void> entered;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    bool first = true;
    engine::GenerateRequest blocker;
    blocker.prompt = "z";
    blocker.max_tokens = 3;
    blocker.on_text = [&](std::string_view) {
      if (!first) return;
      first = false;
      entered.set_value();
      released.wait();
    };
    auto blocked = engine.generate(blocker);
    entered.get_future().wait();

    const std::string prompt(20, 'p');
    json request = {{"prompt", prompt}, {"max_tokens", 200}, {"stream", stream}};
    post_and_leave(server.port(), "/v1/completions", request.dump(), [&] {
      ASSERT_TRUE(engine.wait_for_status(
          [](const engine::EngineStatus& status) { return status.queued_commands == 1; },
          std::chrono::seconds(30)))
          << "the request was not queued behind the blocker";
    });
    // The handler polls its socket every 10 ms; wait until it has seen the close (its
    // generation is then cancelled).
    const bool gone = siesta::testing::spin_until([&] { return server.app().clients_gone() > 0; },
                                                  std::chrono::seconds(30));
    release.set_value();  // also when the wait failed: the engine must not stay held
    ASSERT_TRUE(blocked.get().ok());
    ASSERT_TRUE(gone) << "the handler did not see its client leave";
    server.wait_idle(2);
    // Uncancelled, the history would hold the prompt and 199 generated tokens.
    EXPECT_LT(engine.status().history_tokens, prompt.size() + 199);
  }
}

}  // namespace
}  // namespace siesta::server
