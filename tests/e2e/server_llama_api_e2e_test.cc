// llama-server's own endpoints other than /completion on the real binary (server/llama_routes.h,
// server/api_routes.h): POST /tokenize (one token per byte; with_pieces, a byte that is not
// UTF-8 alone shown as its bytes), POST /detokenize (the round trip), POST /apply-template (the
// prompt chat reads), GET /props (its fields, and is_sleeping across an offload and a wake,
// which no read wakes), GET /slots (every --parallel conversation in llama-server's fields and
// siesta's view), the slot actions' errors, --no-slots, and --api-key on every one of them.
//
// Expectations come from the documented contracts (the tokenizer is one token per byte, the
// chat template's prefix rule) or from the server's own other answers (/v1/status, /v1/models,
// --version, a chat answer): no generated text is written here. Synchronisation is by events:
// the offload is forced (POST /v1/cache/offload) and waited for through /v1/status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/json_answers.h"
#include "tests/e2e/openai_client.h"
#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The answer of a request with `status`, parsed (a failure of the test, and null, otherwise).
// Checks an OpenAI-shaped error of `status` whose param is `param` (empty: null); returns it.
json expect_error(const httplib::Result& response, int status, const std::string& param,
                  const std::string& what) {
  const json body = body_of(response, status, what);
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) {
    ADD_FAILURE() << what << ": no error object in " << body.dump();
    return json::object();
  }
  json error = body["error"];
  EXPECT_EQ(error["param"], param.empty() ? json(nullptr) : json(param))
      << what << ": " << body.dump();
  EXPECT_FALSE(error.value("message", "").empty()) << what << ": " << body.dump();
  EXPECT_EQ(error.value("type", ""),
            status >= 500 ? (status == 501 && error.value("code", "") == "not_supported"
                                 ? "not_supported_error"
                                 : "server_error")
                          : "invalid_request_error")
      << what << ": " << body.dump();
  return error;
}

json message(const std::string& role, const json& content) {
  return {{"role", role}, {"content", content}};
}

json chat_request(const std::vector<json>& messages, int max_tokens) {
  return {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// ---- /tokenize, /detokenize, /apply-template -------------------------------------------------

TEST(ServerLlamaApiE2eTest, TokenizeIsOneTokenPerByteAndDetokenizeRoundTrips) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  // ASCII, a two-byte and a three-byte character, a newline.
  const std::string text = "H\xc3\xa9 \xe2\x82\xac!\n";
  json ids = json::array();
  json pieces = json::array();
  for (unsigned char byte : text) {
    ids.push_back(byte);
    // Alone, a byte of a multi-byte character is not UTF-8: llama-server shows its bytes.
    const json piece = byte < 0x80 ? json(std::string(1, static_cast<char>(byte)))
                                   : json(std::vector<unsigned char>{byte});
    pieces.push_back({{"id", byte}, {"piece", piece}});
  }
  const json plain = body_of(server->post_json("/tokenize", {{"content", text}}), 200, "plain");
  EXPECT_EQ(plain, json({{"tokens", ids}}));
  // add_special and parse_special change nothing (no special tokens exist); with_pieces false
  // is the plain answer.
  const json flags = body_of(server->post_json("/tokenize", {{"content", text},
                                                             {"add_special", true},
                                                             {"parse_special", true},
                                                             {"with_pieces", false}}),
                             200, "flags");
  EXPECT_EQ(flags, plain);
  const json with_pieces = body_of(
      server->post_json("/tokenize", {{"content", text}, {"with_pieces", true}}), 200, "pieces");
  EXPECT_EQ(with_pieces, json({{"tokens", pieces}}));
  EXPECT_TRUE(with_pieces["tokens"][1]["piece"].is_array()) << with_pieces.dump();
  EXPECT_EQ(with_pieces["tokens"][0]["piece"], "H") << with_pieces.dump();
  const json empty = body_of(server->post_json("/tokenize", {{"content", ""}}), 200, "empty");
  EXPECT_EQ(empty, json({{"tokens", json::array()}}));

  // The round trip, multi-byte characters included.
  const json back =
      body_of(server->post_json("/detokenize", {{"tokens", plain["tokens"]}}), 200, "detokenize");
  EXPECT_EQ(back, json({{"content", text}}));
  EXPECT_EQ(body_of(server->post_json("/detokenize", {{"tokens", json::array()}}), 200, "none"),
            json({{"content", ""}}));

  // The engine reads the same tokens: a completion of the text counts that many prompt tokens.
  Result<Completion> read = complete(*server, completion_request(text, 2));
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->prompt_tokens, static_cast<int64_t>(ids.size())) << read->body.dump();
  // And a generated text tokenizes into as many tokens as the completion counted.
  const json generated =
      body_of(server->post_json("/tokenize", {{"content", read->text}}), 200, "generated");
  EXPECT_EQ(generated["tokens"].size(), static_cast<size_t>(read->completion_tokens));
  expect_clean_exit(*server);
}

TEST(ServerLlamaApiE2eTest, ApplyTemplateIsThePromptChatReads) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "1024"}));
  ASSERT_NE(server, nullptr);
  std::vector<json> messages = {
      message("system", "You answer briefly."),
      message("user", "What is a siesta?"),
      message("assistant", "A nap."),
      message("user", json::array({json({{"type", "text"}, {"text", "And "}}),
                                   json({{"type", "text"}, {"text", "when?"}})})),
  };
  const json templated =
      body_of(server->post_json("/apply-template", {{"messages", messages}}), 200, "template");
  ASSERT_TRUE(templated.contains("prompt") && templated["prompt"].is_string()) << templated.dump();
  const std::string prompt = templated["prompt"];
  // Every message in order (the parts of the last concatenated), and the assistant's turn last.
  size_t at = 0;
  for (const char* piece : {"You answer briefly.", "What is a siesta?", "A nap.", "And when?"}) {
    const size_t found = prompt.find(piece, at);
    ASSERT_NE(found, std::string::npos) << piece << " in " << prompt;
    at = found;
  }
  EXPECT_THAT(prompt, EndsWith("<|assistant|>\n"));
  // The template /props shows ends the same way.
  const json props = get_json(*server, "/props");
  EXPECT_THAT(props.value("chat_template", ""), EndsWith("<|assistant|>\n"));

  // The prompt chat reads: as many prompt tokens, and the greedy answer of the prompt as a
  // plain completion.
  Result<Completion> chat = complete(*server, chat_request(messages, 12), "/v1/chat/completions");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  ASSERT_EQ(chat->http_status, 200) << chat->body.dump();
  EXPECT_EQ(chat->prompt_tokens, static_cast<int64_t>(prompt.size())) << chat->body.dump();
  Result<Completion> plain = complete(*server, completion_request(prompt, 12));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->text, chat->text);

  // The prefix rule (chat_template.h): the conversation continued with the answer starts with
  // the old prompt followed by the answer.
  messages.push_back(message("assistant", chat->text));
  messages.push_back(message("user", "Thanks."));
  const json next =
      body_of(server->post_json("/apply-template", {{"messages", messages}}), 200, "next");
  EXPECT_THAT(next.value("prompt", ""), StartsWith(prompt + chat->text));
  // Reading templates wakes and runs nothing: the engine ran the two generations only.
  EXPECT_EQ(status_of(*server)["engine"]["commands_run"], 2) << status_of(*server).dump();
  expect_clean_exit(*server);
}

TEST(ServerLlamaApiE2eTest, BadInputsAre400NamingTheField) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string path;
    std::string body;
    std::string param;  // empty: the body as a whole (null)
  };
  const std::vector<Case> cases = {
      {"/tokenize", "{}", "content"},
      {"/tokenize", R"({"content": 5})", "content"},
      {"/tokenize", R"({"content": ["a"]})", "content"},
      {"/tokenize", R"({"content": "x", "with_pieces": "yes"})", "with_pieces"},
      {"/tokenize", R"({"content": "x", "add_special": 1})", "add_special"},
      {"/tokenize", R"({"content": "x", "parse_special": "true"})", "parse_special"},
      {"/tokenize", "[1, 2]", ""},
      {"/tokenize", R"({"content": )", ""},
      {"/detokenize", "{}", "tokens"},
      {"/detokenize", R"({"tokens": "Hi"})", "tokens"},
      {"/detokenize", R"({"tokens": [72, 256]})", "tokens[1]"},
      {"/detokenize", R"({"tokens": [-1]})", "tokens[0]"},
      {"/detokenize", R"({"tokens": [72, 1.5]})", "tokens[1]"},
      {"/detokenize", R"({"tokens": ["H"]})", "tokens[0]"},
      {"/detokenize", "\"tokens\"", ""},
      {"/apply-template", "{}", "messages"},
      {"/apply-template", R"({"messages": []})", "messages"},
      {"/apply-template", R"({"messages": "hi"})", "messages"},
      {"/apply-template", R"({"messages": [5]})", "messages[0]"},
      {"/apply-template", R"({"messages": [{"role": "tool", "content": "x"}]})",
       "messages[0].role"},
      {"/apply-template", R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {"/apply-template", R"({"messages": [{"role": "user", "content": "a"}, {"role": "user"}]})",
       "messages[1].content"},
      {"/apply-template",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type"},
      {"/apply-template", R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body);
    const json error = expect_error(server->post(c.path, c.body), 400, c.param, c.path);
    if (!c.param.empty()) {
      EXPECT_THAT(error.value("message", ""), HasSubstr(c.param)) << error.dump();
    }
  }
  // Nothing of that touched the server: it still tokenizes and answers.
  EXPECT_EQ(body_of(server->post_json("/tokenize", {{"content", "ok"}}), 200, "after"),
            json({{"tokens", {111, 107}}}));
  expect_clean_exit(*server);
}

// ---- GET /props ------------------------------------------------------------------------------

TEST(ServerLlamaApiE2eTest, PropsDescribeTheServer) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "512", "--parallel", "2", "--alias",
                                               "local-llama", "--n-predict", "7"}));
  ASSERT_NE(server, nullptr);
  const json props = get_json(*server, "/props");
  const json status = status_of(*server);
  for (const char* name :
       {"default_generation_settings", "total_slots", "model_path", "model_alias", "chat_template",
        "modalities", "build_info", "is_sleeping"}) {
    EXPECT_TRUE(props.contains(name)) << name << " in " << props.dump();
  }
  EXPECT_EQ(props["total_slots"], 2);
  EXPECT_EQ(props["model_path"], status["model"]["name"]) << "the model /v1/status names";
  EXPECT_EQ(props["model_path"], "synthetic:tiny");
  EXPECT_EQ(props["model_alias"], "local-llama");
  EXPECT_EQ(props["model_alias"], get_json(*server, "/v1/models")["data"][0]["id"]);
  EXPECT_EQ(props["modalities"], json({{"vision", false}, {"audio", false}}));
  EXPECT_EQ(props["is_sleeping"], false) << "offload is off: the server never sleeps";
  // build_info is the version line the binary prints.
  Result<ProcessExit> version = ServerProcess::run_to_exit({"--version"});
  ASSERT_TRUE(version.ok()) << version.status().to_string();
  std::string line = version->stdout_text;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  EXPECT_EQ(props["build_info"], line);
  EXPECT_THAT(props["build_info"].get<std::string>(), StartsWith("siesta-server "));

  const json& settings = props["default_generation_settings"];
  EXPECT_EQ(settings["n_ctx"], 512);
  EXPECT_EQ(settings["n_ctx"], status["model"]["context"]);
  EXPECT_EQ(settings["id"], 0);
  EXPECT_EQ(settings["is_processing"], false);
  const json params = settings.value("params", json::object());
  // llama-server's defaults (llama_json.h), and --n-predict.
  EXPECT_EQ(params["n_predict"], 7);
  EXPECT_EQ(params["max_tokens"], 7);
  EXPECT_EQ(params["temperature"], 0.8);
  EXPECT_EQ(params["top_k"], 40);
  EXPECT_EQ(params["top_p"], 0.95);
  EXPECT_EQ(params["min_p"], 0.05);
  EXPECT_EQ(params["seed"], 4294967295u);
  EXPECT_EQ(params["samplers"], json({"top_k", "top_p", "min_p", "temperature"}));
  EXPECT_EQ(params["stream"], false);
  EXPECT_EQ(params["n_probs"], 0);
  // They are /completion's defaults: a request naming none is generated with them.
  const json native =
      body_of(server->post_json("/completion", {{"prompt", "Once"}}), 200, "native");
  EXPECT_EQ(native["tokens_predicted"], 7) << native.dump();
  json used = native["generation_settings"];
  used.erase("seed");  // the random seed drawn for it
  json defaults = params;
  defaults.erase("seed");
  EXPECT_EQ(used, defaults);
  // Still awake after a generation: offload is off.
  EXPECT_EQ(get_json(*server, "/props")["is_sleeping"], false);

  // Without --alias the alias is the model's name.
  auto plain = start_or_die(kTinyModel);
  ASSERT_NE(plain, nullptr);
  const json plain_props = get_json(*plain, "/props");
  EXPECT_EQ(plain_props["model_alias"], "synthetic:tiny");
  EXPECT_EQ(plain_props["total_slots"], 1);
  EXPECT_EQ(plain_props["default_generation_settings"]["params"]["n_predict"], -1);
  EXPECT_EQ(plain_props["default_generation_settings"]["n_ctx"],
            status_of(*plain)["model"]["context"]);
  expect_clean_exit(*plain);
  expect_clean_exit(*server);
}

// is_sleeping follows siesta's idle offload: false while the conversation holds device memory,
// true once it is offloaded; no read wakes it, a generation does.
TEST(ServerLlamaApiE2eTest, IsSleepingAcrossAnOffloadAndAWake) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  // The idle timer is far away: only POST /v1/cache/offload puts the conversation to sleep.
  auto server = start_or_die(with(
      kTinyModel, {"--ctx", "1024", "--cache-idle-seconds", "600", "--cache-expire-seconds", "1200",
                   "--cache-ram-mib", "0", "--max-sessions", "1", "--cache-disk-dir", dir}));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(get_json(*server, "/props")["is_sleeping"], false) << "conversation 0 is resident";
  const std::string opening = "The sleeping server remembers this line.";
  Result<Completion> first = complete(*server, completion_request(opening, 16));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->http_status, 200) << first->body.dump();
  EXPECT_EQ(get_json(*server, "/props")["is_sleeping"], false) << "after a request";

  const json offloaded = body_of(server->post("/v1/cache/offload", ""), 200, "offload");
  Result<json> asleep = server->wait_for_cache_state("disk");
  ASSERT_TRUE(asleep.ok()) << asleep.status().to_string() << " (" << offloaded.dump() << ")";
  EXPECT_EQ(get_json(*server, "/props")["is_sleeping"], true);
  const std::vector<std::string> files = snapshot_files(dir);
  ASSERT_EQ(files.size(), 1u) << ::testing::PrintToString(list_dir(dir));
  struct stat before {};
  ASSERT_EQ(::stat((dir + "/" + files[0]).c_str(), &before), 0);
  const int64_t restores = cache_counter(*asleep, "restores");
  ASSERT_GE(restores, 0) << asleep->dump();
  const int64_t commands = (*asleep)["engine"].value("commands_run", int64_t{-1});

  // Reads, repeated: none wakes the conversation.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (const char* path :
         {"/props", "/health", "/v1/models", "/models", "/slots", "/metrics", "/v1/status"}) {
      httplib::Result read = server->get(path);
      ASSERT_TRUE(read) << path << ": " << httplib::to_string(read.error());
      EXPECT_EQ(read->status, 200) << path << ": " << read->body;
    }
    // Nor do the token and template routes, which read no conversation.
    body_of(server->post_json("/tokenize", {{"content", opening}}), 200, "tokenize");
    body_of(server->post_json("/detokenize", {{"tokens", {65, 66}}}), 200, "detokenize");
    body_of(server->post_json("/apply-template",
                              {{"messages", std::vector<json>{message("user", opening)}}}),
            200, "apply-template");
    const json props = get_json(*server, "/props");
    EXPECT_EQ(props["is_sleeping"], true) << props.dump();
    const json status = status_of(*server);
    EXPECT_EQ(status["cache"]["state"], "disk") << status.dump();
    EXPECT_EQ(cache_counter(status, "restores"), restores) << status.dump();
    EXPECT_EQ(status["engine"]["commands_run"], commands) << status.dump();
    const json slots = get_json(*server, "/slots");
    ASSERT_TRUE(slots.is_array() && slots.size() == 1) << slots.dump();
    EXPECT_EQ(slots[0]["state"], "disk") << slots.dump();
    EXPECT_EQ(slots[0]["is_processing"], false) << slots.dump();
    ASSERT_EQ(snapshot_files(dir), files) << ::testing::PrintToString(list_dir(dir));
    struct stat now {};
    ASSERT_EQ(::stat((dir + "/" + files[0]).c_str(), &now), 0);
    EXPECT_EQ(now.st_size, before.st_size);
    EXPECT_EQ(now.st_ino, before.st_ino) << "the snapshot was rewritten";
  }

  // A generation wakes it and reuses the history: every token but the last generated one.
  const std::string history = opening + first->text;
  Result<Completion> woken = complete(*server, completion_request(history + " Next:", 8));
  ASSERT_TRUE(woken.ok()) << woken.status().to_string();
  ASSERT_EQ(woken->http_status, 200) << woken->body.dump();
  EXPECT_EQ(woken->cached_tokens, static_cast<int64_t>(history.size()) - 1) << woken->body.dump();
  EXPECT_EQ(get_json(*server, "/props")["is_sleeping"], false);
  const json awake = status_of(*server);
  EXPECT_EQ(awake["cache"]["state"], "resident") << awake.dump();
  EXPECT_EQ(cache_counter(awake, "restores"), restores + 1) << awake.dump();
  EXPECT_EQ(cache_counter(awake, "restore_hits"), 1) << awake.dump();
  expect_clean_exit(*server);
}

// ---- GET /slots and the slot actions --------------------------------------------------------

// The slot of `slots` whose id is `id` (a failure of the test, and null, when absent).
json slot_of(const json& slots, uint32_t id) {
  if (slots.is_array()) {
    for (const json& slot : slots) {
      if (slot.value("id", -1) == static_cast<int>(id)) return slot;
    }
  }
  ADD_FAILURE() << "no slot " << id << " in " << slots.dump();
  return json::object();
}

// /v1/status's entry for conversation `id` (siesta's view); null when none.
json session_of(const json& status, uint32_t id) {
  if (status.contains("cache") && status["cache"].contains("sessions")) {
    for (const json& session : status["cache"]["sessions"]) {
      if (session.value("id", -1) == static_cast<int>(id)) return session;
    }
  }
  return json();
}

TEST(ServerLlamaApiE2eTest, SlotsListEveryConversationInLlamaServersFields) {
  // A context long enough that a generation to its end is still running when the test looks.
  auto server = start_or_die(with(kTinyModel, {"--parallel", "3", "--ctx", "65536"}));
  ASSERT_NE(server, nullptr);
  const json params = get_json(*server, "/props")["default_generation_settings"]["params"];
  const json listed = get_json(*server, "/slots");
  ASSERT_TRUE(listed.is_array()) << listed.dump();
  ASSERT_EQ(listed.size(), 3u) << listed.dump();
  for (uint32_t id = 0; id < 3; ++id) {
    SCOPED_TRACE("slot " + std::to_string(id));
    const json& slot = listed[id];
    EXPECT_EQ(slot["id"], id);
    for (const char* name : {"id", "id_task", "n_ctx", "speculative", "is_processing", "params",
                             "next_token", "state", "tokens"}) {
      EXPECT_TRUE(slot.contains(name)) << name << " in " << slot.dump();
    }
    EXPECT_EQ(slot["n_ctx"], 65536);
    EXPECT_EQ(slot["is_processing"], false);
    EXPECT_EQ(slot["speculative"], false);
    EXPECT_EQ(slot["params"], params) << "the /completion defaults, as /props shows them";
    EXPECT_EQ(slot["next_token"]["has_next_token"], false);
  }
  // Conversation 0 exists from the start; 1 and 2 were never used.
  EXPECT_NE(listed[0]["state"], "empty");
  EXPECT_EQ(listed[1]["state"], "empty");
  EXPECT_EQ(listed[2]["state"], "empty");
  EXPECT_EQ(listed[2]["tokens"], 0);

  // A conversation on slot 1: its view is /v1/status's.
  Result<Completion> on_one = complete(
      *server, json({{"prompt", "Slot one holds this."}, {"max_tokens", 6}, {"id_slot", 1}}));
  ASSERT_TRUE(on_one.ok()) << on_one.status().to_string();
  ASSERT_EQ(on_one->http_status, 200) << on_one->body.dump();
  const json after = get_json(*server, "/slots");
  const json status = status_of(*server);
  ASSERT_EQ(after.size(), 3u) << after.dump();
  const json one = slot_of(after, 1);
  const json view = session_of(status, 1);
  ASSERT_TRUE(view.is_object()) << status.dump();
  for (const char* name : {"state", "tokens", "disk_bytes", "restores", "fallbacks"}) {
    EXPECT_EQ(one[name], view[name]) << name << ": " << one.dump() << " vs " << view.dump();
  }
  EXPECT_GE(one.value("tokens", 0), static_cast<int>(std::string("Slot one holds this.").size()))
      << one.dump();
  EXPECT_EQ(slot_of(after, 2)["state"], "empty");

  // While a generation runs on slot 2, it is processing and the others are not.
  Result<SseStream> stream = SseStream::open(
      server->port(), "/completion",
      json({{"prompt", "Run on:"}, {"n_predict", -1}, {"id_slot", 2}, {"stream", true}}).dump(),
      {});
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->head().status, 200);
  Result<std::optional<std::string>> event = stream->next_data();
  ASSERT_TRUE(event.ok()) << event.status().to_string();
  ASSERT_TRUE(event->has_value()) << "the generation ended without a piece";
  const json busy = get_json(*server, "/slots");
  EXPECT_EQ(slot_of(busy, 2)["is_processing"], true) << busy.dump();
  EXPECT_EQ(slot_of(busy, 2)["next_token"]["has_next_token"], true) << busy.dump();
  EXPECT_EQ(slot_of(busy, 0)["is_processing"], false) << busy.dump();
  EXPECT_EQ(slot_of(busy, 1)["is_processing"], false) << busy.dump();
  // The client leaves: the generation is cancelled and the slot idle again.
  stream->disconnect();
  Result<json> idle = server->wait_for_status(
      [](const json& s) { return s["engine"].value("busy", true) == false; }, "the engine idle");
  ASSERT_TRUE(idle.ok()) << idle.status().to_string();
  const json done = get_json(*server, "/slots");
  EXPECT_EQ(slot_of(done, 2)["is_processing"], false) << done.dump();
  EXPECT_NE(slot_of(done, 2)["state"], "empty") << done.dump();

  // erase forgets slot 1's history: n_erased is what /slots showed.
  const json erased = body_of(server->post("/slots/1?action=erase", ""), 200, "erase");
  EXPECT_EQ(erased, json({{"id_slot", 1}, {"n_erased", one["tokens"]}}));
  EXPECT_EQ(slot_of(get_json(*server, "/slots"), 1)["tokens"], 0);
  expect_clean_exit(*server);
}

TEST(ServerLlamaApiE2eTest, SlotActionErrors) {
  auto server = start_or_die(with(kTinyModel, {"--parallel", "2"}));
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string target;
    std::string body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      // Not a conversation of this server: 0..1, in decimal as written.
      {"/slots/2?action=save", R"({"filename": "a"})", 400, "id_slot"},
      {"/slots/01?action=erase", "", 400, "id_slot"},
      {"/slots/x?action=erase", "", 400, "id_slot"},
      {"/slots/-1?action=erase", "", 400, "id_slot"},
      // Not an action.
      {"/slots/0?action=load", R"({"filename": "a"})", 400, "action"},
      {"/slots/0", R"({"filename": "a"})", 400, "action"},
      // A file action without a file name.
      {"/slots/0?action=save", "{}", 400, "filename"},
      {"/slots/0?action=restore", R"({"filename": 5})", 400, "filename"},
      {"/slots/0?action=save", "[1]", 400, ""},
      // Slot files are off without --slot-save-path: not offered (llama-server's 501).
      {"/slots/0?action=save", R"({"filename": "a"})", 501, ""},
      {"/slots/1?action=restore", R"({"filename": "a"})", 501, ""},
      {"/slots/0?action=erase", R"({"filename": "a"})", 501, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target + " " + c.body);
    const json error = expect_error(server->post(c.target, c.body), c.status, c.param, c.target);
    if (c.param == "id_slot") {
      EXPECT_EQ(error["code"], "invalid_slot") << error.dump();
    }
    if (c.status == 501) {
      EXPECT_THAT(error.value("message", ""), HasSubstr("--slot-save-path")) << error.dump();
    }
  }
  // Erasing a slot's history needs no file.
  EXPECT_EQ(body_of(server->post("/slots/1?action=erase", ""), 200, "erase")["id_slot"], 1);

  // With --slot-save-path: a file that was never saved is missing (slot_error.h: 400 naming
  // the file, as llama-server answers a failed restore), a name that leaves the directory is
  // the client's 400 too.
  TempDir temp;
  auto saving = start_or_die(with(kTinyModel, {"--slot-save-path", temp.file("slots")}));
  ASSERT_NE(saving, nullptr);
  const json missing =
      expect_error(saving->post_json("/slots/0?action=restore", {{"filename", "never-saved"}}), 400,
                   "filename", "restore missing");
  EXPECT_THAT(missing.value("message", ""), Not(HasSubstr(temp.path()))) << missing.dump();
  expect_error(saving->post_json("/slots/0?action=save", {{"filename", "../escape"}}), 400,
               "filename", "bad name");
  // A save counts the tokens /slots shows for the conversation.
  Result<Completion> answer = complete(*saving, completion_request("Save me.", 4));
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  const json slot = slot_of(get_json(*saving, "/slots"), 0);
  const json saved =
      body_of(saving->post_json("/slots/0?action=save", {{"filename", "kept"}}), 200, "save");
  EXPECT_EQ(saved["n_saved"], slot["tokens"]) << saved.dump() << " vs " << slot.dump();
  EXPECT_EQ(saved["filename"], "kept");
  expect_clean_exit(*saving);
  expect_clean_exit(*server);
}

TEST(ServerLlamaApiE2eTest, NoSlotsTurnsTheSlotsEndpointsOff) {
  TempDir temp;
  auto server =
      start_or_die(with(kTinyModel, {"--no-slots", "--slot-save-path", temp.file("slots")}));
  ASSERT_NE(server, nullptr);
  const std::vector<std::pair<std::string, httplib::Result>> refused = [&] {
    std::vector<std::pair<std::string, httplib::Result>> out;
    out.emplace_back("GET /slots", server->get("/slots"));
    out.emplace_back("save", server->post_json("/slots/0?action=save", {{"filename", "a"}}));
    out.emplace_back("restore", server->post_json("/slots/0?action=restore", {{"filename", "a"}}));
    out.emplace_back("erase", server->post("/slots/0?action=erase", ""));
    // Even a slot that does not exist: the endpoints are off before anything is read.
    out.emplace_back("bad id", server->post("/slots/9?action=erase", ""));
    return out;
  }();
  for (const auto& [what, response] : refused) {
    const json error = expect_error(response, 501, "", what);
    EXPECT_EQ(error["code"], "not_supported") << what << ": " << error.dump();
    EXPECT_THAT(error.value("message", ""), HasSubstr("--no-slots")) << error.dump();
  }
  EXPECT_TRUE(list_dir(temp.file("slots")).empty()) << "nothing was saved";
  // The rest of llama-server's API is still served.
  EXPECT_EQ(get_json(*server, "/props")["total_slots"], 1);
  body_of(server->post_json("/completion", {{"prompt", "Still"}, {"n_predict", 2}}), 200,
          "completion");
  expect_clean_exit(*server);
}

// ---- --api-key -------------------------------------------------------------------------------

TEST(ServerLlamaApiE2eTest, EveryRouteNeedsTheKeyButHealth) {
  const std::string key = "llama-api-key";
  auto server = start_or_die(with(kTinyModel, {"--api-key", key}));
  ASSERT_NE(server, nullptr);
  struct Route {
    std::string method;
    std::string path;
    std::string body;
  };
  const std::string chat = chat_request({message("user", "Hi")}, 2).dump();
  const std::vector<Route> routes = {
      {"GET", "/props", ""},
      {"GET", "/slots", ""},
      {"GET", "/models", ""},
      {"GET", "/v1/models", ""},
      {"POST", "/tokenize", R"({"content": "Hi"})"},
      {"POST", "/detokenize", R"({"tokens": [72, 105]})"},
      {"POST", "/apply-template", R"({"messages": [{"role": "user", "content": "Hi"}]})"},
      {"POST", "/chat/completions", chat},
      {"POST", "/slots/0?action=erase", ""},
  };
  auto send = [&](const Route& route, const httplib::Headers& headers) {
    auto client = server->client();
    return route.method == "GET"
               ? client->Get(route.path, headers)
               : client->Post(route.path, headers, route.body, "application/json");
  };
  const std::vector<std::pair<std::string, httplib::Headers>> refused = {
      {"no key", {}},
      {"a wrong bearer", {{"Authorization", "Bearer wrong"}}},
      {"a wrong X-Api-Key", {{"X-Api-Key", "wrong"}}},
  };
  const std::vector<std::pair<std::string, httplib::Headers>> served = {
      {"bearer", {{"Authorization", "Bearer " + key}}},
      {"X-Api-Key", {{"X-Api-Key", key}}},
  };
  for (const Route& route : routes) {
    SCOPED_TRACE(route.method + " " + route.path);
    for (const auto& [what, headers] : refused) {
      httplib::Result response = send(route, headers);
      const json body = body_of(response, 401, what);
      EXPECT_EQ(body["error"]["type"], "authentication_error") << what << ": " << body.dump();
      EXPECT_EQ(body["error"]["code"], what == "no key" ? "missing_api_key" : "invalid_api_key")
          << what << ": " << body.dump();
    }
    for (const auto& [what, headers] : served) body_of(send(route, headers), 200, what);
  }
  // Only the two chat answers ran on the engine; the refused requests reached nothing.
  Result<json> status = [&] {
    server->set_api_key(key);
    return server->status();
  }();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ((*status)["engine"]["commands_run"], 2 + 2)
      << "two chats and two erases: " << status->dump();
  // /health needs no key.
  server->set_api_key("");
  EXPECT_EQ(body_of(server->get("/health"), 200, "health"), json({{"status", "ok"}}));
  expect_clean_exit(*server);
}

}  // namespace
}  // namespace siesta::testing
