// OpenAI's request and answer fields on the real binary (server/openai_json.h,
// server/served_model.h, server/api_routes.h): any model name served and every answer
// carrying the served id (--alias), llama-server's unprefixed twins /models and
// /chat/completions, the length of a request without max_tokens (--n-predict), logprobs and
// top_logprobs (chat) and logprobs (completions) from the model's real probabilities,
// logit_bias banning and forcing, system_fingerprint in every answer and chunk, the role in
// the first streamed chat chunk, and every field not served refused with a 400 naming it.
//
// Expectations come from the documented contracts or from the server's own other answers (a
// greedy answer, its log probabilities, /v1/status): no generated text is written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
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
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kOncePrompt[] = "Once upon a time";

// A greedy chat request for `max_tokens` tokens.
json chat_request(const std::string& text, int max_tokens) {
  return {
      {"messages", std::vector<json>{user(text)}}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// `body` with `more`'s members set on it.

// A 200 answer of `path`, checked for its shape (openai_client.h).
Completion answer(const ServerProcess& server, const json& request, const std::string& path) {
  Result<Completion> got = complete(server, request, path);
  EXPECT_TRUE(got.ok()) << path << ": " << got.status().to_string();
  if (!got.ok()) return {};
  EXPECT_EQ(got->http_status, 200) << path << " " << request.dump() << ": " << got->body.dump();
  return *got;
}

// Every data event of a streamed answer, the [DONE] marker apart.
struct Stream {
  int status = 0;
  std::vector<json> chunks;
  bool done = false;  // the stream ended with data: [DONE]
};

Stream read_stream(const ServerProcess& server, const std::string& path, const json& request) {
  Stream out;
  Result<SseStream> stream = SseStream::open(server.port(), path, request.dump(), {});
  EXPECT_TRUE(stream.ok()) << stream.status().to_string();
  if (!stream.ok()) return out;
  out.status = stream->head().status;
  EXPECT_EQ(out.status, 200) << path << " " << request.dump();
  if (out.status != 200) return out;
  for (;;) {
    Result<std::optional<std::string>> data = stream->next_data();
    EXPECT_TRUE(data.ok()) << data.status().to_string();
    if (!data.ok() || !data->has_value()) break;
    EXPECT_FALSE(out.done) << "an event after [DONE]: " << **data;
    if (**data == "[DONE]") {
      out.done = true;
      continue;
    }
    json chunk = json::parse(**data, nullptr, false);
    EXPECT_TRUE(chunk.is_object()) << **data;
    out.chunks.push_back(std::move(chunk));
  }
  return out;
}

bool printable(uint64_t byte) { return byte >= 0x20 && byte <= 0x7e; }

// How openai_json.h names a token: the byte when it is ASCII, else "bytes:\xNN".
std::string token_name(uint8_t byte) {
  if (byte < 0x80) return std::string(1, static_cast<char>(byte));
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("bytes:\\x") + kHex[byte >> 4] + kHex[byte & 0xf];
}

// ---- The model's id -------------------------------------------------------------------------

TEST(ServerOpenAiFieldsE2eTest, AnyModelNameIsServedAndAnswersCarryTheServedId) {
  auto server = start_or_die(with(kTinyModel, {"--alias", "house-model"}));
  ASSERT_NE(server, nullptr);
  const json listed = get_json(*server, "/v1/models");
  ASSERT_TRUE(listed.contains("data") && listed["data"].is_array() && listed["data"].size() == 1)
      << listed.dump();
  EXPECT_EQ(listed["data"][0]["id"], "house-model");
  EXPECT_EQ(listed["data"][0]["object"], "model");
  EXPECT_EQ(get_json(*server, "/models"), listed) << "the unprefixed twin answers alike";
  EXPECT_EQ(get_json(*server, "/models/house-model"), listed["data"][0]);
  EXPECT_EQ(get_json(*server, "/v1/models/house-model"), listed["data"][0]);

  const Completion reference =
      answer(*server, completion_request(kOncePrompt, 6), "/v1/completions");
  const Completion chat_reference =
      answer(*server, chat_request(kOncePrompt, 6), "/v1/chat/completions");
  ASSERT_EQ(reference.text.size(), 6u);
  ASSERT_EQ(chat_reference.text.size(), 6u);
  EXPECT_EQ(reference.body["model"], "house-model");
  EXPECT_EQ(chat_reference.body["model"], "house-model");
  // Whatever a request names (or none), the served model answers under its id.
  const std::vector<json> names = {json("gpt-4o"), json("house-model"), json("synthetic:tiny"),
                                   json(""), json(nullptr)};
  for (const json& name : names) {
    SCOPED_TRACE("model " + name.dump());
    json completion = completion_request(kOncePrompt, 6);
    json chat = chat_request(kOncePrompt, 6);
    if (!name.is_null()) {
      completion["model"] = name;
      chat["model"] = name;
    }
    const Completion got = answer(*server, completion, "/v1/completions");
    EXPECT_EQ(got.body["model"], "house-model") << got.body.dump();
    EXPECT_EQ(got.text, reference.text);
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
      SCOPED_TRACE(path);
      const Completion chatted = answer(*server, chat, path);
      EXPECT_EQ(chatted.body["model"], "house-model") << chatted.body.dump();
      EXPECT_EQ(chatted.body["object"], "chat.completion") << chatted.body.dump();
      EXPECT_EQ(chatted.text, chat_reference.text);
      EXPECT_EQ(chatted.prompt_tokens, chat_reference.prompt_tokens);
    }
  }
  // Streamed, on the unprefixed twin: every chunk names the served model.
  const Stream streamed = read_stream(
      *server, "/chat/completions",
      with_fields(chat_request(kOncePrompt, 6), {{"model", "gpt-4o"}, {"stream", true}}));
  EXPECT_TRUE(streamed.done);
  std::string text;
  for (const json& chunk : streamed.chunks) {
    EXPECT_EQ(chunk["model"], "house-model") << chunk.dump();
    EXPECT_EQ(chunk["object"], "chat.completion.chunk") << chunk.dump();
    text += chunk["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, chat_reference.text);
  // Only the name's type is checked.
  const json wrong =
      body_of(server->post_json("/chat/completions",
                                with_fields(chat_request(kOncePrompt, 2), {{"model", 5}})),
              400, "model 5");
  EXPECT_EQ(wrong["error"]["param"], "model") << wrong.dump();

  // Without --alias the id is the model's name, as /v1/status names it.
  auto plain = start_or_die(kTinyModel);
  ASSERT_NE(plain, nullptr);
  const json name = status_of(*plain)["model"]["name"];
  EXPECT_EQ(get_json(*plain, "/v1/models")["data"][0]["id"], name);
  EXPECT_EQ(get_json(*plain, "/models")["data"][0]["id"], name);
  const Completion plain_answer =
      answer(*plain, with_fields(completion_request(kOncePrompt, 2), {{"model", "gpt-4o"}}),
             "/v1/completions");
  EXPECT_EQ(plain_answer.body["model"], name);
  expect_clean_exit(*plain);
  expect_clean_exit(*server);
}

// ---- --n-predict -----------------------------------------------------------------------------

TEST(ServerOpenAiFieldsE2eTest, WithoutMaxTokensTheServersNPredictDecides) {
  auto five = start_or_die(with(kTinyModel, {"--n-predict", "5"}));
  ASSERT_NE(five, nullptr);
  json request = completion_request(kOncePrompt, 1);
  request.erase("max_tokens");
  const Completion short_answer = answer(*five, request, "/v1/completions");
  EXPECT_EQ(short_answer.completion_tokens, 5) << short_answer.body.dump();
  EXPECT_EQ(short_answer.text.size(), 5u);
  EXPECT_EQ(short_answer.finish_reason, "length");
  json chat = chat_request(kOncePrompt, 1);
  chat.erase("max_tokens");
  const Completion short_chat = answer(*five, chat, "/chat/completions");
  EXPECT_EQ(short_chat.completion_tokens, 5) << short_chat.body.dump();
  EXPECT_EQ(short_chat.finish_reason, "length");
  // A request's max_tokens wins over the server's default.
  const Completion longer = answer(*five, completion_request(kOncePrompt, 9), "/v1/completions");
  EXPECT_EQ(longer.completion_tokens, 9);
  EXPECT_EQ(longer.text.substr(0, 5), short_answer.text) << "greedy: the same first tokens";
  // The default is lowered to what the context leaves (synthetic:tiny holds 256 tokens).
  const uint64_t context = status_of(*five)["model"]["context"];
  json crowded = request;
  crowded["prompt"] = std::string(context - 2, 'z');
  const Completion squeezed = answer(*five, crowded, "/v1/completions");
  EXPECT_EQ(squeezed.completion_tokens, 2) << squeezed.body.dump();
  EXPECT_EQ(squeezed.finish_reason, "length");
  expect_clean_exit(*five);

  // The default -1: until the context is full or a stop string matches.
  auto unlimited = start_or_die(kTinyModel);
  ASSERT_NE(unlimited, nullptr);
  const Completion full = answer(*unlimited, request, "/v1/completions");
  EXPECT_EQ(static_cast<uint64_t>(full.prompt_tokens + full.completion_tokens), context)
      << full.body.dump();
  EXPECT_EQ(full.finish_reason, "length");
  EXPECT_THAT(full.text, StartsWith(short_answer.text));
  ASSERT_GT(full.text.size(), 16u);
  const std::string stop = full.text.substr(10, 3);
  const size_t at = full.text.find(stop);
  const Completion stopped =
      answer(*unlimited, with_fields(request, {{"stop", stop}}), "/v1/completions");
  EXPECT_EQ(stopped.text, full.text.substr(0, at));
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.completion_tokens, static_cast<int64_t>(at + stop.size()));
  expect_clean_exit(*unlimited);

  // 0 would answer every request without a length empty: refused at start.
  for (const char* value : {"0", "-2"}) {
    Result<ProcessExit> run = ServerProcess::run_to_exit(with(kTinyModel, {"--n-predict", value}));
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    EXPECT_EQ(run->exit_code, 2) << value << ": " << run->describe() << "\n" << run->stderr_text;
    EXPECT_THAT(run->stderr_text, HasSubstr("--n-predict")) << value;
  }
}

// ---- logprobs --------------------------------------------------------------------------------

// Checks chat's logprobs of `body` for `text` with `shown` alternatives per token; returns
// them (the content array). `*listed` (when given) counts the tokens listed among their own
// alternatives (where the greedy checks below bite).
json check_chat_logprobs(const json& body, const std::string& text, size_t shown,
                         size_t* listed = nullptr) {
  const json logprobs = body["choices"][0]["logprobs"];
  EXPECT_TRUE(logprobs.is_object()) << body.dump();
  if (!logprobs.is_object()) return json::array();
  EXPECT_TRUE(logprobs.contains("refusal") && logprobs["refusal"].is_null()) << logprobs.dump();
  const json content = logprobs.value("content", json::array());
  EXPECT_EQ(content.size(), text.size()) << logprobs.dump();
  for (size_t i = 0; i < std::min(content.size(), text.size()); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const json& entry = content[i];
    const auto byte = static_cast<uint8_t>(text[i]);
    EXPECT_EQ(entry["token"], std::string(1, text[i])) << entry.dump();
    EXPECT_EQ(entry["bytes"], json(std::vector<uint8_t>{byte})) << entry.dump();
    const double logprob = entry.value("logprob", 1.0);
    EXPECT_TRUE(std::isfinite(logprob) && logprob < 0) << entry.dump();
    const json top = entry.value("top_logprobs", json::array());
    EXPECT_EQ(top.size(), shown) << entry.dump();
    std::optional<uint8_t> first_printable;
    double mass = 0;
    for (size_t j = 0; j < top.size(); ++j) {
      const json& alt = top[j];
      const bool one_byte = alt["bytes"].is_array() && alt["bytes"].size() == 1;
      EXPECT_TRUE(one_byte) << alt.dump();
      if (!one_byte) continue;
      const auto alt_byte = alt["bytes"][0].get<uint8_t>();
      EXPECT_EQ(alt["token"], token_name(alt_byte)) << alt.dump();
      const double alt_logprob = alt.value("logprob", 1.0);
      EXPECT_LE(alt_logprob, 0.0) << alt.dump();
      mass += std::exp(alt_logprob);
      if (j > 0) {
        EXPECT_GE(top[j - 1]["logprob"].get<double>(), alt_logprob) << "most probable first";
      }
      if (alt_byte == byte) {
        EXPECT_EQ(alt["logprob"], entry["logprob"]) << "the chosen token's own entry";
        if (listed != nullptr) ++*listed;
      }
      // Greedy: no printable alternative is more probable than the chosen token.
      if (printable(alt_byte)) {
        EXPECT_GE(logprob, alt_logprob) << alt.dump();
        if (!first_printable) first_printable = alt_byte;
      }
    }
    if (first_printable) {
      EXPECT_EQ(*first_printable, byte) << "greedy picks the most probable printable token";
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
  return content;
}

TEST(ServerOpenAiFieldsE2eTest, ChatLogprobsAreTheModelsOwnAndGreedyPicksTheTopToken) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "1024"}));
  ASSERT_NE(server, nullptr);
  const std::string asked = "Tell me about naps.";
  const json base = chat_request(asked, 8);
  const Completion five =
      answer(*server, with_fields(base, {{"logprobs", true}, {"top_logprobs", 5}}),
             "/v1/chat/completions");
  ASSERT_EQ(five.text.size(), 8u) << five.body.dump();
  const json content5 = check_chat_logprobs(five.body, five.text, 5);

  // 20 alternatives: the same tokens, the same log probabilities, the first 5 the same.
  const Completion twenty = answer(
      *server, with_fields(base, {{"logprobs", true}, {"top_logprobs", 20}}), "/chat/completions");
  EXPECT_EQ(twenty.text, five.text);
  size_t listed = 0;
  const json content20 = check_chat_logprobs(twenty.body, twenty.text, 20, &listed);
  EXPECT_GT(listed, 0u) << "no generated token among the 20 most probable: nothing checked";
  ASSERT_EQ(content20.size(), content5.size());
  for (size_t i = 0; i < content5.size(); ++i) {
    EXPECT_EQ(content20[i]["logprob"], content5[i]["logprob"]) << i;
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(content20[i]["top_logprobs"][j], content5[i]["top_logprobs"][j]) << i << "," << j;
    }
  }
  // logprobs alone: the chosen tokens' log probabilities, no alternatives.
  const Completion bare =
      answer(*server, with_fields(base, {{"logprobs", true}}), "/v1/chat/completions");
  const json content0 = check_chat_logprobs(bare.body, bare.text, 0);
  ASSERT_EQ(content0.size(), content5.size());
  for (size_t i = 0; i < content0.size(); ++i) {
    EXPECT_EQ(content0[i]["logprob"], content5[i]["logprob"]) << i;
  }
  // Not asked, or false: null, and the same answer.
  for (const json& request : {base, with_fields(base, {{"logprobs", false}})}) {
    const Completion none = answer(*server, request, "/v1/chat/completions");
    EXPECT_EQ(none.text, five.text);
    EXPECT_TRUE(none.body["choices"][0]["logprobs"].is_null()) << none.body.dump();
  }

  // /v1/completions of the prompt chat reads (/apply-template) has the same log probabilities.
  const json templated = body_of(
      server->post_json("/apply-template", {{"messages", base["messages"]}}), 200, "template");
  const Completion plain = answer(
      *server, with_fields(completion_request(templated.value("prompt", ""), 8), {{"logprobs", 3}}),
      "/v1/completions");
  EXPECT_EQ(plain.text, five.text);
  const json token_logprobs = plain.body["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(token_logprobs.size(), content5.size()) << plain.body.dump();
  for (size_t i = 0; i < content5.size(); ++i) {
    EXPECT_EQ(token_logprobs[i], content5[i]["logprob"]) << i;
  }
  expect_clean_exit(*server);
}

TEST(ServerOpenAiFieldsE2eTest, CompletionLogprobsShowTheMostProbableTokens) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json base = completion_request(kOncePrompt, 10);
  json first_values;  // the token log probabilities with 5 shown
  size_t ranked = 0;  // positions where a printable token was among those shown
  for (int shown : {5, 3, 1, 0}) {
    SCOPED_TRACE("logprobs " + std::to_string(shown));
    const Completion got =
        answer(*server, with_fields(base, {{"logprobs", shown}}), "/v1/completions");
    const std::string& text = got.text;
    ASSERT_EQ(text.size(), 10u) << got.body.dump();
    const json logprobs = got.body["choices"][0]["logprobs"];
    ASSERT_TRUE(logprobs.is_object()) << got.body.dump();
    const json tokens = logprobs["tokens"];
    const json values = logprobs["token_logprobs"];
    const json tops = logprobs["top_logprobs"];
    const json offsets = logprobs["text_offset"];
    ASSERT_EQ(tokens.size(), text.size()) << logprobs.dump();
    ASSERT_EQ(values.size(), text.size()) << logprobs.dump();
    ASSERT_EQ(tops.size(), text.size()) << logprobs.dump();
    ASSERT_EQ(offsets.size(), text.size()) << logprobs.dump();
    for (size_t i = 0; i < text.size(); ++i) {
      SCOPED_TRACE("token " + std::to_string(i));
      EXPECT_EQ(tokens[i], std::string(1, text[i]));
      EXPECT_EQ(offsets[i], i) << "one token per byte";
      const double logprob = values[i].get<double>();
      EXPECT_LT(logprob, 0.0);
      ASSERT_TRUE(tops[i].is_object()) << tops[i].dump();
      EXPECT_EQ(tops[i].size(), static_cast<size_t>(shown)) << tops[i].dump();
      std::optional<std::pair<std::string, double>> best_printable;
      for (const auto& [name, value] : tops[i].items()) {
        const double alt = value.get<double>();
        EXPECT_LE(alt, 0.0) << name;
        if (name == tokens[i]) {
          EXPECT_EQ(value, values[i]) << "the chosen token's own entry";
        }
        const bool one_char = name.size() == 1;
        EXPECT_TRUE(one_char || (name.size() == 10 && name.rfind("bytes:\\x", 0) == 0)) << name;
        if (one_char && printable(static_cast<uint8_t>(name[0]))) {
          EXPECT_GE(logprob, alt) << "greedy: no printable token above the chosen one: " << name;
          if (!best_printable || alt > best_printable->second) best_printable = {name, alt};
        }
      }
      if (best_printable) {
        EXPECT_EQ(best_printable->first, tokens[i]) << tops[i].dump();
        ++ranked;
      }
    }
    // The same log probabilities whatever the number shown.
    if (shown == 5) first_values = values;
    EXPECT_EQ(values, first_values);
  }
  EXPECT_GT(ranked, 0u) << "no printable token was ever shown: the greedy check never ran";
  expect_clean_exit(*server);
}

// ---- logit_bias ------------------------------------------------------------------------------

TEST(ServerOpenAiFieldsE2eTest, LogitBiasBansAndForcesTokens) {
  auto server = start_or_die(with(kTinyModel, {"--ctx", "1024"}));
  ASSERT_NE(server, nullptr);
  const json base =
      with_fields(chat_request("Pick a letter.", 1), {{"logprobs", true}, {"top_logprobs", 20}});
  const Completion greedy = answer(*server, base, "/v1/chat/completions");
  ASSERT_EQ(greedy.text.size(), 1u) << greedy.body.dump();
  const auto first = static_cast<uint8_t>(greedy.text[0]);
  const json raw_top = greedy.body["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
  std::vector<uint8_t> printables;  // the printable alternatives, most probable first
  for (const json& alt : raw_top) {
    const auto byte = alt["bytes"][0].get<uint8_t>();
    if (printable(byte)) printables.push_back(byte);
  }

  // -100 bans the greedy token: the first token changes, to the next most probable printable
  // one when the top 20 show it. The log probabilities shown are the model's, before the bias.
  const Completion banned =
      answer(*server, with_fields(base, {{"logit_bias", {{std::to_string(first), -100}}}}),
             "/v1/chat/completions");
  ASSERT_EQ(banned.text.size(), 1u) << banned.body.dump();
  EXPECT_NE(banned.text[0], greedy.text[0]);
  // Greedy chose the most probable printable token; the ban leaves the next one.
  ASSERT_GE(printables.size(), 2u) << raw_top.dump();
  EXPECT_EQ(printables[0], first) << raw_top.dump();
  EXPECT_EQ(static_cast<uint8_t>(banned.text[0]), printables[1]) << raw_top.dump();
  const json banned_entry = banned.body["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(banned_entry["top_logprobs"], raw_top) << "the bias changes no log probability";
  for (const json& alt : raw_top) {
    if (alt["bytes"][0] == static_cast<uint8_t>(banned.text[0])) {
      EXPECT_EQ(banned_entry["logprob"], alt["logprob"]);
    }
  }

  // +100 forces a token at every position, however improbable the model finds it.
  const uint8_t forced = first == 'Q' ? 'R' : 'Q';
  const Completion pushed = answer(
      *server,
      with_fields(base, {{"max_tokens", 4}, {"logit_bias", {{std::to_string(forced), 100}}}}),
      "/v1/chat/completions");
  EXPECT_EQ(pushed.text, std::string(4, static_cast<char>(forced))) << pushed.body.dump();
  const json pushed_entry = pushed.body["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(pushed_entry["top_logprobs"], raw_top);
  EXPECT_LT(pushed_entry.value("logprob", 0.0),
            greedy.body["choices"][0]["logprobs"]["content"][0].value("logprob", 0.0))
      << "the forced token's own (lower) log probability, not the biased one";

  // The same on /v1/completions, and a bias that leaves no printable token is refused.
  const Completion plain = answer(*server, completion_request(kOncePrompt, 3), "/v1/completions");
  const Completion plain_banned = answer(
      *server,
      with_fields(completion_request(kOncePrompt, 3),
                  {{"logit_bias", {{std::to_string(static_cast<uint8_t>(plain.text[0])), -100}}}}),
      "/v1/completions");
  EXPECT_NE(plain_banned.text[0], plain.text[0]);
  json all = json::object();
  for (int byte = 0x20; byte <= 0x7e; ++byte) all[std::to_string(byte)] = -100;
  const json refused = body_of(
      server->post_json("/v1/completions",
                        with_fields(completion_request(kOncePrompt, 3), {{"logit_bias", all}})),
      400, "every printable token banned");
  EXPECT_THAT(refused["error"].value("message", ""), HasSubstr("logit_bias")) << refused.dump();
  expect_clean_exit(*server);
}

// ---- system_fingerprint and the streamed chunks ----------------------------------------------

TEST(ServerOpenAiFieldsE2eTest, SystemFingerprintInEveryAnswerAndChunk) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const Completion completion =
      answer(*server, completion_request(kOncePrompt, 6), "/v1/completions");
  const json fingerprint = completion.body["system_fingerprint"];
  ASSERT_TRUE(fingerprint.is_string()) << completion.body.dump();
  EXPECT_TRUE(std::regex_match(fingerprint.get<std::string>(), std::regex("fp_[0-9a-f]{12}")))
      << fingerprint;
  const Completion chat = answer(*server, chat_request(kOncePrompt, 6), "/v1/chat/completions");
  EXPECT_EQ(chat.body["system_fingerprint"], fingerprint);
  EXPECT_EQ(
      answer(*server, chat_request(kOncePrompt, 2), "/chat/completions").body["system_fingerprint"],
      fingerprint);

  // Streamed completions, with the usage chunk: every chunk carries it, and one id.
  const Stream completion_stream =
      read_stream(*server, "/v1/completions",
                  with_fields(completion_request(kOncePrompt, 6),
                              {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  EXPECT_TRUE(completion_stream.done);
  ASSERT_GE(completion_stream.chunks.size(), 3u);
  std::string text;
  for (const json& chunk : completion_stream.chunks) {
    EXPECT_EQ(chunk["system_fingerprint"], fingerprint) << chunk.dump();
    EXPECT_EQ(chunk["id"], completion_stream.chunks[0]["id"]) << chunk.dump();
    EXPECT_EQ(chunk["object"], "text_completion") << chunk.dump();
    if (!chunk["choices"].empty()) text += chunk["choices"][0].value("text", "");
  }
  EXPECT_EQ(text, completion.text);
  EXPECT_TRUE(completion_stream.chunks.back()["choices"].empty());
  EXPECT_EQ(completion_stream.chunks.back()["usage"]["completion_tokens"], 6);

  // Streamed chat: the first chunk's delta carries the role, no other does.
  const Stream chat_stream =
      read_stream(*server, "/v1/chat/completions",
                  with_fields(chat_request(kOncePrompt, 6),
                              {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  EXPECT_TRUE(chat_stream.done);
  ASSERT_GE(chat_stream.chunks.size(), 3u);
  const json& opening = chat_stream.chunks[0];
  EXPECT_EQ(opening["choices"][0]["delta"]["role"], "assistant") << opening.dump();
  text.clear();
  size_t finishes = 0;
  for (size_t i = 0; i < chat_stream.chunks.size(); ++i) {
    const json& chunk = chat_stream.chunks[i];
    EXPECT_EQ(chunk["system_fingerprint"], fingerprint) << chunk.dump();
    EXPECT_EQ(chunk["id"], opening["id"]) << chunk.dump();
    EXPECT_EQ(chunk["object"], "chat.completion.chunk") << chunk.dump();
    if (chunk["choices"].empty()) continue;  // the usage chunk
    const json& choice = chunk["choices"][0];
    if (i > 0) {
      EXPECT_FALSE(choice["delta"].contains("role")) << "only the first chunk: " << chunk.dump();
    }
    text += choice["delta"].value("content", "");
    if (!choice["finish_reason"].is_null()) ++finishes;
  }
  EXPECT_EQ(text, chat.text);
  EXPECT_EQ(finishes, 1u);

  // The fingerprint names the model's settings: another server of them has it, an alias
  // (which changes no answer) keeps it, another context changes it.
  auto twin = start_or_die(with(kTinyModel, {"--alias", "twin"}));
  ASSERT_NE(twin, nullptr);
  EXPECT_EQ(answer(*twin, completion_request(kOncePrompt, 2), "/v1/completions")
                .body["system_fingerprint"],
            fingerprint);
  expect_clean_exit(*twin);
  auto wider = start_or_die(with(kTinyModel, {"--ctx", "512"}));
  ASSERT_NE(wider, nullptr);
  const json other = answer(*wider, completion_request(kOncePrompt, 2), "/v1/completions")
                         .body["system_fingerprint"];
  EXPECT_NE(other, fingerprint);
  EXPECT_TRUE(other.is_string() &&
              std::regex_match(other.get<std::string>(), std::regex("fp_[0-9a-f]{12}")))
      << other;
  expect_clean_exit(*wider);
  expect_clean_exit(*server);
}

// ---- Refused fields -------------------------------------------------------------------------

TEST(ServerOpenAiFieldsE2eTest, EachFieldNotServedIsA400NamingIt) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json chat = chat_request(kOncePrompt, 4);
  const json completion = completion_request(kOncePrompt, 4);
  const json tool = {{"type", "function"},
                     {"function", {{"name", "f"}, {"parameters", json::object()}}}};
  const json schema = {{"type", "json_schema"},
                       {"json_schema", {{"name", "s"}, {"schema", json::object()}}}};
  struct Case {
    std::string path;
    json request;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", with_fields(chat, {{"n", 2}}), "n"},
      {"/v1/chat/completions", with_fields(chat, {{"tools", std::vector<json>{tool}}}), "tools"},
      {"/v1/chat/completions", with_fields(chat, {{"response_format", schema}}), "response_format"},
      {"/v1/chat/completions", with_fields(chat, {{"response_format", {{"type", "json_object"}}}}),
       "response_format"},
      {"/v1/chat/completions", with_fields(chat, {{"grammar", "root ::= \"a\""}}), "grammar"},
      {"/v1/chat/completions", with_fields(chat, {{"json_schema", json::object()}}), "json_schema"},
      {"/v1/chat/completions", with_fields(chat, {{"n_probs", 3}}), "n_probs"},
      {"/v1/chat/completions", with_fields(chat, {{"stream", true}, {"logprobs", true}}),
       "logprobs"},
      {"/v1/chat/completions", with_fields(chat, {{"frobnicate", 1}}), "frobnicate"},
      {"/v1/chat/completions", with_fields(chat, {{"tool_choice", "required"}}), "tool_choice"},
      {"/v1/chat/completions", with_fields(chat, {{"top_logprobs", 2}}), "top_logprobs"},
      {"/v1/chat/completions", with_fields(chat, {{"logprobs", true}, {"top_logprobs", 21}}),
       "top_logprobs"},
      {"/v1/chat/completions", with_fields(chat, {{"logit_bias", {{"65", 101}}}}), "logit_bias.65"},
      {"/v1/chat/completions", with_fields(chat, {{"logit_bias", {{"256", 1}}}}), "logit_bias.256"},
      {"/v1/chat/completions", with_fields(chat, {{"logit_bias", {{"A", 1}}}}), "logit_bias.A"},
      {"/chat/completions", with_fields(chat, {{"n", 2}}), "n"},
      {"/chat/completions", with_fields(chat, {{"response_format", schema}}), "response_format"},
      {"/chat/completions", with_fields(chat, {{"stream", true}, {"logprobs", true}}), "logprobs"},
      {"/chat/completions", with_fields(chat, {{"grammar", "root ::= \"a\""}}), "grammar"},
      {"/v1/completions", with_fields(completion, {{"n", 2}}), "n"},
      {"/v1/completions", with_fields(completion, {{"tools", std::vector<json>{tool}}}), "tools"},
      {"/v1/completions", with_fields(completion, {{"grammar", "root ::= \"a\""}}), "grammar"},
      {"/v1/completions", with_fields(completion, {{"json_schema", json::object()}}),
       "json_schema"},
      {"/v1/completions", with_fields(completion, {{"n_probs", 3}}), "n_probs"},
      {"/v1/completions", with_fields(completion, {{"stream", true}, {"logprobs", 2}}), "logprobs"},
      {"/v1/completions", with_fields(completion, {{"logprobs", 6}}), "logprobs"},
      {"/v1/completions", with_fields(completion, {{"echo", true}}), "echo"},
      {"/v1/completions", with_fields(completion, {{"best_of", 2}}), "best_of"},
      {"/v1/completions", with_fields(completion, {{"frobnicate", 1}}), "frobnicate"},
  };
  const json before = status_of(*server);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.request.dump());
    const json body = body_of(server->post_json(c.path, c.request), 400, c.path);
    const json error = body.value("error", json::object());
    EXPECT_EQ(error["param"], c.param) << body.dump();
    EXPECT_EQ(error.value("type", ""), "invalid_request_error") << body.dump();
    EXPECT_THAT(error.value("message", ""), HasSubstr(c.param)) << body.dump();
  }
  // None reached the engine, and the server still answers.
  EXPECT_EQ(status_of(*server)["engine"]["commands_run"], before["engine"]["commands_run"]);
  const Completion fine = answer(*server, chat, "/chat/completions");
  EXPECT_EQ(fine.text.size(), 4u);
  expect_clean_exit(*server);
}

}  // namespace
}  // namespace siesta::testing
