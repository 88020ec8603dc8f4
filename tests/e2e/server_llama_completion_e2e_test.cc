// llama-server's native generation endpoint on the real binary: POST /completion and its alias
// POST /completions (OpenAI's stays /v1/completions), with llama-server's request fields and
// answer shapes: the whole answer, the stream read event by event (no [DONE]), every refused
// field answered 400 naming it, the context error's llama fields, n_probs, return_tokens,
// stop_type word and limit, tokens_cached on a conversation's second turn through id_slot,
// min_p and random seeds reaching the engine, an error inside a stream, and --api-key through
// a bearer or X-Api-Key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

namespace siesta::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr char kPrompt[] = "Once upon a time";

// The answer of a POST with `status`, parsed (a failure of the test, and null, otherwise).
json object_body_of(const httplib::Result& response, int status, const std::string& what) {
  EXPECT_TRUE(response) << what << ": " << httplib::to_string(response.error());
  if (!response) return json();
  EXPECT_EQ(response->status, status) << what << ": " << response->body;
  json body = json::parse(response->body, nullptr, false);
  EXPECT_TRUE(body.is_object()) << what << ": " << response->body;
  return body;
}

// A greedy native request for `n` tokens.
json native(const std::string& prompt, int n) {
  return {{"prompt", prompt}, {"n_predict", n}, {"temperature", 0}};
}

// `body` with `more`'s members set on it.

json token_ids(const std::string& text) {
  json ids = json::array();
  for (unsigned char byte : text) ids.push_back(byte);
  return ids;
}

// Checks a 400 whose error names `param` (and, when given, has `type`); returns the error.
json expect_refused(const ServerProcess& server, const json& request, const std::string& param,
                    const std::string& type = "invalid_request_error") {
  const json body = object_body_of(server.post_json("/completion", request), 400, request.dump());
  const json error = body.value("error", json::object());
  EXPECT_EQ(error.value("type", ""), type) << body.dump();
  EXPECT_EQ(error["param"], param.empty() ? json(nullptr) : json(param)) << body.dump();
  EXPECT_FALSE(error.value("message", "").empty()) << body.dump();
  return error;
}

TEST(ServerLlamaCompletionE2eTest, TheWholeAnswerInLlamaServersFields) {
  auto server = start_or_die(with(kTinyModel, {"--alias", "local-model"}));
  ASSERT_NE(server, nullptr);
  const json request = with_fields(native(kPrompt, 8), {{"ignore_eos", true}, {"model", "gpt-4o"}});
  const json body = object_body_of(server->post_json("/completion", request), 200, "completion");
  const std::string content = body.value("content", "");
  EXPECT_EQ(content.size(), 8u) << body.dump();
  EXPECT_EQ(body["index"], 0);
  EXPECT_EQ(body["tokens"], json::array()) << "without return_tokens";
  EXPECT_EQ(body["id_slot"], 0);
  EXPECT_EQ(body["stop"], true);
  EXPECT_EQ(body["model"], "local-model") << "the served model, whatever the request named";
  EXPECT_EQ(body["tokens_predicted"], 8);
  EXPECT_EQ(body["tokens_evaluated"], std::string(kPrompt).size());
  EXPECT_EQ(body["tokens_cached"], 0);
  EXPECT_EQ(body["prompt"], kPrompt);
  EXPECT_EQ(body["has_new_line"], false);
  EXPECT_EQ(body["truncated"], false);
  EXPECT_EQ(body["stop_type"], "limit");
  EXPECT_EQ(body["stopping_word"], "");
  EXPECT_FALSE(body.contains("completion_probabilities"));
  const json settings = body.value("generation_settings", json::object());
  EXPECT_EQ(settings["n_predict"], 8);
  EXPECT_EQ(settings["temperature"], 0.0);
  EXPECT_EQ(settings["top_k"], 40);
  EXPECT_EQ(settings["min_p"], 0.05);
  EXPECT_EQ(settings["ignore_eos"], true);
  EXPECT_EQ(settings["stream"], false);
  EXPECT_TRUE(settings["seed"].is_number_unsigned()) << settings.dump();
  EXPECT_EQ(settings["samplers"], json({"top_k", "top_p", "min_p", "temperature"}));
  const json timings = body.value("timings", json::object());
  EXPECT_EQ(timings["prompt_n"], std::string(kPrompt).size());
  EXPECT_EQ(timings["cache_n"], 0);
  EXPECT_EQ(timings["predicted_n"], 8);
  EXPECT_GT(timings.value("prompt_ms", 0.0), 0.0) << timings.dump();
  EXPECT_GT(timings.value("predicted_ms", 0.0), 0.0) << timings.dump();
  EXPECT_NEAR(timings.value("predicted_per_second", 0.0),
              8 * 1000.0 / timings.value("predicted_ms", 1.0), 1e-6)
      << timings.dump();
  EXPECT_NEAR(timings.value("prompt_per_token_ms", 0.0),
              timings.value("prompt_ms", 0.0) / std::string(kPrompt).size(), 1e-9)
      << timings.dump();

  // The alias /completions, the prompt as token ids, and OpenAI's /v1/completions: the same
  // greedy bytes (the engine's).
  const json alias =
      object_body_of(server->post_json("/completions", native(kPrompt, 8)), 200, "alias");
  EXPECT_EQ(alias.value("content", ""), content);
  const json ids = object_body_of(
      server->post_json("/completion",
                        with_fields(native("", 8), {{"prompt", token_ids(kPrompt)}})),
      200, "token ids");
  EXPECT_EQ(ids.value("content", ""), content);
  EXPECT_EQ(ids["prompt"], kPrompt);
  Result<Completion> openai = complete(*server, completion_request(kPrompt, 8));
  ASSERT_TRUE(openai.ok()) << openai.status().to_string();
  EXPECT_EQ(openai->text, content);
  // A regenerate reuses the whole prompt (the prompt-end checkpoint).
  const json again =
      object_body_of(server->post_json("/completion", native(kPrompt, 8)), 200, "again");
  EXPECT_EQ(again["tokens_cached"], std::string(kPrompt).size());
  EXPECT_EQ(again["timings"]["prompt_n"], 0);
  EXPECT_EQ(again.value("content", ""), content);
  expect_clean_exit(*server);
}

TEST(ServerLlamaCompletionE2eTest, TheStreamEventByEventWithoutDone) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const std::string want =
      object_body_of(server->post_json("/completion", native(kPrompt, 12)), 200, "plain")
          .value("content", "");
  ASSERT_EQ(want.size(), 12u);
  for (const char* path : {"/completion", "/completions"}) {
    SCOPED_TRACE(path);
    Result<SseStream> stream = SseStream::open(
        server->port(), path, with_fields(native(kPrompt, 12), {{"stream", true}}).dump(), {});
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    ASSERT_EQ(stream->head().status, 200);
    EXPECT_THAT(stream->head().header("content-type"), HasSubstr("text/event-stream"));
    std::string text;
    std::optional<json> last;
    size_t pieces = 0;
    for (;;) {
      Result<std::optional<std::string>> data = stream->next_data();
      ASSERT_TRUE(data.ok()) << data.status().to_string();
      if (!data->has_value()) break;
      ASSERT_NE(**data, "[DONE]") << "llama-server's native stream sends no [DONE]";
      ASSERT_FALSE(last) << "an event after the last: " << **data;
      const json event = json::parse(**data, nullptr, false);
      ASSERT_TRUE(event.is_object()) << **data;
      if (event.value("stop", false)) {
        last = event;
        continue;
      }
      ++pieces;
      const std::string piece = event.value("content", "");
      EXPECT_FALSE(piece.empty()) << **data;
      EXPECT_EQ(event["tokens"], token_ids(piece)) << **data;
      EXPECT_EQ(event["id_slot"], 0) << **data;
      EXPECT_EQ(event["stop"], false) << **data;
      text += piece;
    }
    ASSERT_TRUE(last) << "the stream ended without its last event";
    EXPECT_GE(pieces, 1u);
    EXPECT_EQ(text, want) << "the pieces concatenate to the plain answer";
    EXPECT_EQ((*last)["content"], "") << last->dump();
    EXPECT_EQ((*last)["tokens"], json::array()) << last->dump();
    EXPECT_EQ((*last)["tokens_predicted"], 12) << last->dump();
    EXPECT_EQ((*last)["stop_type"], "limit") << last->dump();
    EXPECT_EQ((*last)["id_slot"], 0) << last->dump();
    EXPECT_EQ((*last)["generation_settings"]["stream"], true) << last->dump();
    EXPECT_EQ((*last)["timings"]["predicted_n"], 12) << last->dump();
    EXPECT_TRUE(last->contains("tokens_cached") && last->contains("prompt")) << last->dump();
  }
  expect_clean_exit(*server);
}

TEST(ServerLlamaCompletionE2eTest, EveryFieldNotServedIsRefusedByName) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json base = native(kPrompt, 4);
  const std::vector<std::pair<json, std::string>> refused = {
      {with_fields(base, {{"n_predict", 0}}), "n_predict"},
      {with_fields(base, {{"n_predict", -2}}), "n_predict"},
      {with_fields(base, {{"max_tokens", 4}}), "max_tokens"},
      {with_fields(base, {{"cache_prompt", false}}), "cache_prompt"},
      {with_fields(base, {{"samplers", {"dry", "top_k", "temperature"}}}), "samplers[0]"},
      {with_fields(base, {{"samplers", {"top_p", "top_k", "temperature"}}}), "samplers[1]"},
      {with_fields(base, {{"typical_p", 0.9}}), "typical_p"},
      {with_fields(base, {{"repeat_penalty", 1.1}}), "repeat_penalty"},
      {with_fields(base, {{"presence_penalty", 0.5}}), "presence_penalty"},
      {with_fields(base, {{"frequency_penalty", 0.5}}), "frequency_penalty"},
      {with_fields(base, {{"mirostat", 2}}), "mirostat"},
      {with_fields(base, {{"n_keep", 8}}), "n_keep"},
      {with_fields(base, {{"dynatemp_range", 0.5}}), "dynatemp_range"},
      {with_fields(base, {{"grammar", "root ::= \"a\""}}), "grammar"},
      {with_fields(base, {{"json_schema", json::object()}}), "json_schema"},
      {with_fields(base, {{"n_probs", 21}}), "n_probs"},
      {with_fields(base, {{"n_probs", 2}, {"stream", true}}), "n_probs"},
      {with_fields(base, {{"logit_bias", {{65, 1}, {65, 2}}}}), "logit_bias[1]"},
      {with_fields(base, {{"logit_bias", json::array({json::array({"Hello", -1})})}}),
       "logit_bias[0]"},
      {with_fields(base, {{"prompt", {"one", "two"}}}), "prompt"},
      {with_fields(base, {{"prompt", json::array({json::array({1, 2})})}}), "prompt[0]"},
      {with_fields(base, {{"prompt", {300}}}), "prompt[0]"},
      {with_fields(base, {{"prompt", ""}}), "prompt"},
      {with_fields(base, {{"min_p", 1.5}}), "min_p"},
      {with_fields(base, {{"temperature", 2.5}}), "temperature"},
      {with_fields(base, {{"top_p", -0.5}}), "top_p"},
      {with_fields(base, {{"seed", -7}}), "seed"},
      {with_fields(base, {{"id_slot", 1}}), "id_slot"},
      {with_fields(base, {{"stop", {"a", "b", "c", "d", "e"}}}), "stop"},
      {with_fields(base, {{"return_tokens", "yes"}}), "return_tokens"},
      {with_fields(base, {{"ignore_eos", 1}}), "ignore_eos"},
  };
  for (const auto& [request, param] : refused) {
    SCOPED_TRACE(request.dump());
    expect_refused(*server, request, param);
  }
  // Not JSON, and not an object.
  const json not_json =
      object_body_of(server->post("/completion", "{\"prompt\": "), 400, "not JSON");
  EXPECT_EQ(not_json["error"]["type"], "invalid_request_error") << not_json.dump();
  object_body_of(server->post("/completion", "[1, 2]"), 400, "an array");
  // A prompt that fills the context (synthetic:tiny holds 256 tokens): llama-server's error,
  // streamed or not (it is refused before anything is streamed).
  for (bool stream : {false, true}) {
    const json error =
        expect_refused(*server, {{"prompt", std::string(256, 'a')}, {"stream", stream}}, "prompt",
                       "exceed_context_size_error");
    EXPECT_EQ(error["n_prompt_tokens"], 256) << error.dump();
    EXPECT_EQ(error["n_ctx"], 256) << error.dump();
    EXPECT_THAT(error.value("message", ""),
                HasSubstr("request (256 tokens) exceeds the available context size (256 tokens)"));
  }
  // 255 tokens leave room for one: n_predict is lowered to it.
  const json fits = object_body_of(
      server->post_json("/completion", {{"prompt", std::string(255, 'a')}, {"n_predict", 50}}), 200,
      "one token of room");
  EXPECT_EQ(fits["tokens_predicted"], 1) << fits.dump();
  EXPECT_EQ(fits["stop_type"], "limit");
  EXPECT_EQ(fits["generation_settings"]["n_predict"], 1);
  // Nothing refused reached the engine; the server still answers.
  const json fine =
      object_body_of(server->post_json("/completion", base), 200, "after the refusals");
  EXPECT_EQ(fine.value("content", "").size(), 4u);
  expect_clean_exit(*server);
}

TEST(ServerLlamaCompletionE2eTest, ProbabilitiesTokensAndStopTypes) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json plain =
      object_body_of(server->post_json("/completion", native(kPrompt, 20)), 200, "plain");
  const std::string text = plain.value("content", "");
  ASSERT_EQ(text.size(), 20u);

  // n_probs: the content's tokens, each with its log probability and the 3 most probable,
  // the model's own (OpenAI's logprobs say the same).
  const json probed = object_body_of(
      server->post_json("/completion", with_fields(native(kPrompt, 6), {{"n_probs", 3}})), 200,
      "n_probs");
  const json probs = probed.value("completion_probabilities", json::array());
  ASSERT_EQ(probs.size(), 6u) << probed.dump();
  json openai_request = completion_request(kPrompt, 6);
  openai_request["logprobs"] = 3;
  Result<Completion> openai = complete(*server, openai_request);
  ASSERT_TRUE(openai.ok()) << openai.status().to_string();
  const json openai_logprobs = openai->body["choices"][0]["logprobs"]["token_logprobs"];
  for (size_t i = 0; i < probs.size(); ++i) {
    SCOPED_TRACE(i);
    const json& entry = probs[i];
    const auto byte = static_cast<unsigned char>(text[i]);
    EXPECT_EQ(entry["id"], byte);
    EXPECT_EQ(entry["token"], std::string(1, text[i]));
    EXPECT_EQ(entry["bytes"], json({byte}));
    EXPECT_LE(entry.value("logprob", 1.0), 0.0);
    EXPECT_EQ(entry["logprob"], openai_logprobs[i]);
    const json top = entry.value("top_logprobs", json::array());
    ASSERT_EQ(top.size(), 3u) << entry.dump();
    for (size_t j = 0; j < top.size(); ++j) {
      EXPECT_TRUE(top[j].contains("id") && top[j].contains("token") && top[j].contains("bytes"))
          << top[j].dump();
      if (j > 0) {
        EXPECT_GE(top[j - 1]["logprob"], top[j]["logprob"]) << entry.dump();
      }
      if (top[j]["id"] == byte) {
        EXPECT_EQ(top[j]["logprob"], entry["logprob"]);
      }
    }
  }

  // return_tokens: the content's ids.
  const json tokens = object_body_of(
      server->post_json("/completion", with_fields(native(kPrompt, 20), {{"return_tokens", true}})),
      200, "return_tokens");
  EXPECT_EQ(tokens["tokens"], token_ids(text));

  // stop_type word: a stop string taken from the greedy text ends the content before it; the
  // tokens it took are counted, not shown.
  const std::string stop = text.substr(6, 3);
  const size_t at = text.find(stop);
  const json worded = object_body_of(
      server->post_json("/completion", with_fields(native(kPrompt, 20),
                                                   {{"stop", {stop}}, {"return_tokens", true}})),
      200, "stop word");
  EXPECT_EQ(worded["content"], text.substr(0, at));
  EXPECT_EQ(worded["stop_type"], "word");
  EXPECT_EQ(worded["stopping_word"], stop);
  EXPECT_EQ(worded["tokens_predicted"], at + stop.size());
  EXPECT_EQ(worded["tokens"], token_ids(text.substr(0, at)));
  EXPECT_EQ(worded["generation_settings"]["stop"], json({stop}));
  // stop_type limit: a stop string that never comes.
  const json limited = object_body_of(
      server->post_json("/completion", with_fields(native(kPrompt, 20), {{"stop", {"\n\n\n"}}})),
      200, "limit");
  EXPECT_EQ(limited["stop_type"], "limit");
  EXPECT_EQ(limited["stopping_word"], "");
  EXPECT_EQ(limited["content"], text);
  expect_clean_exit(*server);
}

TEST(ServerLlamaCompletionE2eTest, ASecondTurnThroughIdSlotReusesItsConversation) {
  auto server = start_or_die(with(kTinyModel, {"--parallel", "2"}));
  ASSERT_NE(server, nullptr);
  const json first = object_body_of(
      server->post_json("/completion", with_fields(native(kPrompt, 8), {{"id_slot", 1}})), 200,
      "turn 1");
  EXPECT_EQ(first["id_slot"], 1);
  EXPECT_EQ(first["tokens_cached"], 0);
  const std::string history = kPrompt + first.value("content", "");
  const std::string next = history + " and then";
  const json second = object_body_of(
      server->post_json("/completion", with_fields(native(next, 8), {{"id_slot", 1}})), 200,
      "turn 2");
  EXPECT_EQ(second["id_slot"], 1);
  // Everything but the last generated token (its KV is computed when a prompt holds it).
  EXPECT_EQ(second["tokens_cached"], history.size() - 1) << second.dump();
  EXPECT_EQ(second["timings"]["cache_n"], history.size() - 1);
  EXPECT_EQ(second["timings"]["prompt_n"], next.size() - (history.size() - 1));
  EXPECT_EQ(second["tokens_evaluated"], next.size());
  // The other slot holds nothing of it.
  const json other = object_body_of(
      server->post_json("/completion", with_fields(native(next, 8), {{"id_slot", 0}})), 200,
      "slot 0");
  EXPECT_EQ(other["id_slot"], 0);
  EXPECT_EQ(other["tokens_cached"], 0);
  EXPECT_EQ(other.value("content", ""), second.value("content", ""))
      << "reused or read again, the same bytes";
  // Streamed, the pieces name the slot too.
  Result<SseStream> stream = SseStream::open(
      server->port(), "/completion",
      with_fields(native(next + " more", 4), {{"id_slot", 1}, {"stream", true}}).dump(), {});
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->head().status, 200);
  size_t events = 0;
  for (;;) {
    Result<std::optional<std::string>> data = stream->next_data();
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    if (!data->has_value()) break;
    ++events;
    const json event = json::parse(**data, nullptr, false);
    EXPECT_EQ(event["id_slot"], 1) << **data;
    if (event.value("stop", false)) {
      EXPECT_GT(event.value("tokens_cached", 0), 0) << **data;
    }
  }
  EXPECT_GE(events, 2u);
  expect_clean_exit(*server);
}

TEST(ServerLlamaCompletionE2eTest, MinPAndRandomSeedsReachTheEngine) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const std::string greedy =
      object_body_of(server->post_json("/completion", native(kPrompt, 24)), 200, "greedy")
          .value("content", "");
  // min_p 1 leaves the most probable token alone: the greedy bytes, at temperature 2.
  const json narrowed = object_body_of(
      server->post_json(
          "/completion",
          {{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 2}, {"min_p", 1}, {"seed", 3}}),
      200, "min_p 1");
  EXPECT_EQ(narrowed.value("content", ""), greedy);
  EXPECT_EQ(narrowed["generation_settings"]["min_p"], 1.0);
  EXPECT_EQ(narrowed["generation_settings"]["seed"], 3);
  // The same seed, the same draw; without min_p (the chain without it) another draw.
  const json sampled = {{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 2}, {"seed", 3}};
  const std::string a =
      object_body_of(server->post_json("/completion", sampled), 200, "seed 3").value("content", "");
  const std::string b =
      object_body_of(server->post_json("/completion", sampled), 200, "seed 3 again")
          .value("content", "");
  EXPECT_EQ(a, b);
  const std::string wide =
      object_body_of(
          server->post_json("/completion", with_fields(sampled, {{"samplers", {"temperature"}}})),
          200, "no filters")
          .value("content", "");
  EXPECT_NE(wide, a);
  // -1 and absent: a fresh seed each time, reported.
  std::vector<json> seeds;
  for (const json& seed : {json(-1), json(nullptr), json(4294967295u)}) {
    json request = sampled;
    if (seed.is_null()) {
      request.erase("seed");
    } else {
      request["seed"] = seed;
    }
    const json body =
        object_body_of(server->post_json("/completion", request), 200, request.dump());
    seeds.push_back(body["generation_settings"]["seed"]);
    EXPECT_NE(seeds.back(), 4294967295u);
  }
  EXPECT_NE(seeds[0], seeds[1]);
  EXPECT_NE(seeds[1], seeds[2]);
  EXPECT_NE(seeds[0], seeds[2]);
  expect_clean_exit(*server);
}

// An error after the stream began is one event holding llama-server's error object, and the
// stream ends there: here the server's own stop cancels a generation that would fill a large
// context.
TEST(ServerLlamaCompletionE2eTest, AnErrorInsideTheStreamIsOneErrorEvent) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "65536"}));
  ASSERT_NE(server, nullptr);
  Result<SseStream> stream = SseStream::open(
      server->port(), "/completion",
      json({{"prompt", kPrompt}, {"n_predict", -1}, {"temperature", 0}, {"stream", true}}).dump(),
      {});
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->head().status, 200);
  Result<std::optional<std::string>> first = stream->next_data();
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ(json::parse(**first, nullptr, false).value("stop", true), false) << **first;
  Result<ProcessExit> exit = server->stop(SIGTERM, milliseconds(20000));
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\n" << exit->stderr_text;
  std::optional<json> error;
  for (;;) {
    Result<std::optional<std::string>> data = stream->next_data();
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    if (!data->has_value()) break;
    ASSERT_FALSE(error) << "an event after the error: " << **data;
    const json event = json::parse(**data, nullptr, false);
    ASSERT_TRUE(event.is_object()) << **data;
    if (event.contains("error")) {
      error = event["error"];
    } else {
      EXPECT_EQ(event.value("stop", true), false) << "a piece, not the last event: " << **data;
    }
  }
  ASSERT_TRUE(error) << "the stream ended without its error";
  EXPECT_EQ(error->value("code", ""), "cancelled") << error->dump();
  EXPECT_EQ(error->value("type", ""), "server_error") << error->dump();
}

TEST(ServerLlamaCompletionE2eTest, AnApiKeyIsReadFromABearerOrXApiKey) {
  auto server = start_or_die(with(kTinyModel, {"--api-key", "llama-key"}));
  ASSERT_NE(server, nullptr);
  const std::string request = native(kPrompt, 3).dump();
  auto post = [&](const httplib::Headers& headers) {
    return server->client()->Post("/completion", headers, request, "application/json");
  };
  const std::vector<std::pair<std::string, httplib::Headers>> refused = {
      {"no key", {}},
      {"a wrong bearer", {{"Authorization", "Bearer wrong"}}},
      {"a wrong X-Api-Key", {{"X-Api-Key", "wrong"}}},
      {"the key as Basic", {{"Authorization", "Basic llama-key"}}},
  };
  for (const auto& [what, headers] : refused) {
    const json body = object_body_of(post(headers), 401, what);
    EXPECT_EQ(body["error"]["type"], "authentication_error") << what << ": " << body.dump();
  }
  const std::vector<std::pair<std::string, httplib::Headers>> served = {
      {"bearer", {{"Authorization", "Bearer llama-key"}}},
      {"X-Api-Key", {{"X-Api-Key", "llama-key"}}},
  };
  for (const auto& [what, headers] : served) {
    const json body = object_body_of(post(headers), 200, what);
    EXPECT_EQ(body.value("content", "").size(), 3u) << what << ": " << body.dump();
  }
  // The stream needs the key as well.
  const std::string streamed = with_fields(native(kPrompt, 3), {{"stream", true}}).dump();
  Result<SseStream> without = SseStream::open(server->port(), "/completion", streamed, {});
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_EQ(without->head().status, 401);
  Result<SseStream> keyed =
      SseStream::open(server->port(), "/completion", streamed, {{"X-Api-Key", "llama-key"}});
  ASSERT_TRUE(keyed.ok()) << keyed.status().to_string();
  EXPECT_EQ(keyed->head().status, 200);
  Result<std::optional<std::string>> data = keyed->next_data();
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_TRUE(data->has_value());
  expect_clean_exit(*server);
}

}  // namespace
}  // namespace siesta::testing
