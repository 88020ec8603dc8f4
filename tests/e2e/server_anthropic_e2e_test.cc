// Anthropic's Messages API on the real binary (server/anthropic_json.h): POST /v1/messages
// answered in Anthropic's message shape, streamed as Anthropic's event sequence (each event's
// name and data read in order), a second turn that repeats the first as its prefix read from
// the cache, the same text as /v1/chat/completions for the same conversation at temperature 0,
// refused input in Anthropic's error shape {"type": "error", "error": {"type", "message"}},
// POST /v1/messages/count_tokens, and --api-key through x-api-key or Authorization: Bearer.
//
// Requests carry the headers Anthropic's SDKs send (anthropic-version, x-api-key when keyed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/e2e/json_answers.h"
#include "tests/e2e/named_events.h"
#include "tests/e2e/openai_client.h"
#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr const char* kVersionHeader = "anthropic-version";
constexpr const char* kVersion = "2023-06-01";

json assistant(const std::string& text) { return {{"role", "assistant"}, {"content", text}}; }

// A greedy /v1/messages body.
// (A vector, not a json: a braced list of one message would make json that message itself.)
json messages_request(const std::vector<json>& messages, int max_tokens) {
  return {{"model", "claude-sonnet-4-5"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"messages", json(messages)}};
}

// POST `body` to `path` with Anthropic's version header and `headers`.
httplib::Result post_anthropic(const ServerProcess& server, const std::string& path,
                               const std::string& body, httplib::Headers headers = {}) {
  headers.emplace(kVersionHeader, kVersion);
  return server.client()->Post(path, headers, body, "application/json");
}

// The answer's body as JSON, with the test failed (and null returned) when there is none.
// POST /v1/messages; the parsed 200 answer.
json message(const ServerProcess& server, const json& request, const std::string& what) {
  return body_of(post_anthropic(server, "/v1/messages", request.dump()), 200, what);
}

// The text of a message answer's one text block ("" after a failure that says why).
std::string text_of(const json& answer) {
  const bool shaped = answer.is_object() && answer.contains("content") &&
                      answer["content"].is_array() && answer["content"].size() == 1 &&
                      answer["content"][0].is_object() && answer["content"][0].contains("text") &&
                      answer["content"][0]["text"].is_string();
  EXPECT_TRUE(shaped) << "content must be one text block: " << answer.dump();
  return shaped ? answer["content"][0]["text"].get<std::string>() : "";
}

int64_t usage_of(const json& answer, const char* name) {
  if (!answer.is_object() || !answer.contains("usage") || !answer["usage"].contains(name) ||
      !answer["usage"][name].is_number_integer()) {
    ADD_FAILURE() << "no integer usage." << name << ": " << answer.dump();
    return -1;
  }
  return answer["usage"][name].get<int64_t>();
}

// Checks `response` is `status` with exactly Anthropic's error body of `type`, its message
// naming `mention` (when not empty).
void expect_anthropic_error(const httplib::Result& response, int status, const std::string& type,
                            const std::string& mention, const std::string& what) {
  const json body = body_of(response, status, what);
  ASSERT_TRUE(body.is_object()) << what;
  EXPECT_EQ(body.size(), 2u) << what << ": only type and error: " << body.dump();
  EXPECT_EQ(body.value("type", ""), "error") << what << ": " << body.dump();
  ASSERT_TRUE(body.contains("error") && body["error"].is_object()) << what << ": " << body.dump();
  const json& error = body["error"];
  EXPECT_EQ(error.size(), 2u) << what << ": only type and message: " << body.dump();
  EXPECT_EQ(error.value("type", ""), type) << what << ": " << body.dump();
  ASSERT_TRUE(error.contains("message") && error["message"].is_string()) << what;
  const std::string message = error["message"].get<std::string>();
  EXPECT_FALSE(message.empty()) << what;
  if (!mention.empty()) {
    EXPECT_THAT(message, HasSubstr(mention)) << what;
  }
}

using Event = NamedEvent;

// POSTs `request` with "stream": true; the events of its 200 answer (empty after a failure).
std::vector<Event> stream_events(const ServerProcess& server, json request) {
  request["stream"] = true;
  Result<SseStream> stream =
      SseStream::open(server.port(), "/v1/messages", request.dump(),
                      {{kVersionHeader, kVersion}, {"Content-Type", "application/json"}});
  EXPECT_TRUE(stream.ok()) << stream.status().to_string();
  if (!stream.ok()) return {};
  Result<std::string> body = stream->read_rest();
  EXPECT_TRUE(body.ok()) << body.status().to_string();
  EXPECT_EQ(stream->head().status, 200) << body.value_or("");
  EXPECT_THAT(stream->head().header("content-type"), HasSubstr("text/event-stream"));
  if (!body.ok() || stream->head().status != 200) return {};
  return parse_named_events(*body);
}

// What a stream said, once its events were checked against Anthropic's sequence.
// (Its implicit moves are nlohmann::json's and std::string's, both noexcept; clang-tidy 14
// flags the implicit member functions anyway.)
// NOLINTNEXTLINE(bugprone-exception-escape)
struct Streamed {
  std::string text;  // the text deltas joined
  size_t deltas = 0;
  json message_start;  // message_start's message
  json message_delta;  // the message_delta event
};

// Checks the sequence Anthropic's streaming documentation gives for one text block:
// message_start (content [], stop_reason null), content_block_start (index 0, an empty text
// block), content_block_delta (text_delta, index 0)..., content_block_stop (index 0),
// message_delta (stop_reason, stop_sequence, usage), message_stop; ping events may come
// anywhere. Each event's name equals its data's type.
// (Fills `out` and returns void: gtest's ASSERT_* return from the function on failure.)
void check_sequence(const std::vector<Event>& events, Streamed& out) {
  SCOPED_TRACE("the events:\n" + describe_events(events));
  enum class Expect { kMessageStart, kBlockStart, kDeltaOrStop, kMessageDelta, kMessageStop, kEnd };
  Expect next = Expect::kMessageStart;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& event = events[i];
    SCOPED_TRACE("event " + std::to_string(i) + " " + event.name);
    EXPECT_EQ(event.data.value("type", ""), event.name) << "the event's name is its data's type";
    if (event.name == "ping") {
      EXPECT_EQ(event.data.size(), 1u) << event.data.dump();
      EXPECT_NE(next, Expect::kMessageStart) << "ping before message_start";
      EXPECT_NE(next, Expect::kEnd) << "ping after message_stop";
      continue;
    }
    switch (next) {
      case Expect::kMessageStart: {
        ASSERT_EQ(event.name, "message_start");
        out.message_start = event.data.value("message", json());
        const json& m = out.message_start;
        EXPECT_EQ(m.value("type", ""), "message") << m.dump();
        EXPECT_EQ(m.value("role", ""), "assistant") << m.dump();
        EXPECT_TRUE(m.contains("content") && m["content"] == json::array()) << m.dump();
        EXPECT_TRUE(m.contains("stop_reason") && m["stop_reason"].is_null()) << m.dump();
        EXPECT_TRUE(m.contains("stop_sequence") && m["stop_sequence"].is_null()) << m.dump();
        EXPECT_TRUE(std::regex_match(m.value("id", ""), std::regex("msg_[0-9a-f]{24}")))
            << m.dump();
        EXPECT_TRUE(m.contains("usage") && m["usage"].contains("input_tokens") &&
                    m["usage"].contains("output_tokens"))
            << m.dump();
        next = Expect::kBlockStart;
        break;
      }
      case Expect::kBlockStart:
        ASSERT_EQ(event.name, "content_block_start");
        EXPECT_EQ(event.data.value("index", -1), 0);
        EXPECT_EQ(event.data.value("content_block", json()), json({{"type", "text"}, {"text", ""}}))
            << event.data.dump();
        next = Expect::kDeltaOrStop;
        break;
      case Expect::kDeltaOrStop:
        if (event.name == "content_block_delta") {
          EXPECT_EQ(event.data.value("index", -1), 0);
          const json delta = event.data.value("delta", json());
          EXPECT_EQ(delta.value("type", ""), "text_delta") << event.data.dump();
          ASSERT_TRUE(delta.contains("text") && delta["text"].is_string()) << event.data.dump();
          out.text += delta["text"].get<std::string>();
          ++out.deltas;
          break;
        }
        ASSERT_EQ(event.name, "content_block_stop") << "after the block's deltas";
        EXPECT_EQ(event.data.value("index", -1), 0);
        next = Expect::kMessageDelta;
        break;
      case Expect::kMessageDelta: {
        ASSERT_EQ(event.name, "message_delta");
        out.message_delta = event.data;
        const json delta = event.data.value("delta", json());
        EXPECT_TRUE(delta.contains("stop_reason") && delta["stop_reason"].is_string())
            << event.data.dump();
        EXPECT_TRUE(delta.contains("stop_sequence")) << event.data.dump();
        EXPECT_TRUE(event.data.contains("usage") && event.data["usage"].contains("output_tokens"))
            << event.data.dump();
        next = Expect::kMessageStop;
        break;
      }
      case Expect::kMessageStop:
        ASSERT_EQ(event.name, "message_stop");
        EXPECT_EQ(event.data.size(), 1u) << event.data.dump();
        next = Expect::kEnd;
        break;
      case Expect::kEnd: ADD_FAILURE() << "an event after message_stop"; break;
    }
  }
  EXPECT_EQ(next, Expect::kEnd) << "the stream ended before message_stop";
}

TEST(ServerAnthropicE2eTest, AMessageHasAnthropicsShape) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json request = messages_request({user("Hello there")}, 12);
  const json answer = message(*server, request, "max_tokens 12");
  ASSERT_TRUE(answer.is_object());
  EXPECT_TRUE(std::regex_match(answer.value("id", ""), std::regex("msg_[0-9a-f]{24}")))
      << answer.dump();
  EXPECT_EQ(answer.value("type", ""), "message") << answer.dump();
  EXPECT_EQ(answer.value("role", ""), "assistant") << answer.dump();
  EXPECT_EQ(answer.value("model", ""), "synthetic:tiny") << answer.dump();
  EXPECT_EQ(answer["content"][0].value("type", ""), "text") << answer.dump();
  const std::string text = text_of(answer);
  EXPECT_EQ(text.size(), 12u) << "one token per byte: " << answer.dump();
  EXPECT_EQ(answer.value("stop_reason", ""), "max_tokens") << answer.dump();
  EXPECT_TRUE(answer.contains("stop_sequence") && answer["stop_sequence"].is_null())
      << answer.dump();
  // The rendered prompt: "<|user|>\nHello there\n<|assistant|>\n", one token per byte, none of
  // it read from the cache of a fresh server.
  const int64_t prompt = static_cast<int64_t>(std::string("<|user|>\nHello there\n").size() +
                                              std::string("<|assistant|>\n").size());
  EXPECT_EQ(usage_of(answer, "input_tokens"), prompt) << answer.dump();
  EXPECT_EQ(usage_of(answer, "output_tokens"), 12) << answer.dump();
  EXPECT_EQ(usage_of(answer, "cache_read_input_tokens"), 0) << answer.dump();
  EXPECT_EQ(usage_of(answer, "cache_creation_input_tokens"), 0) << answer.dump();

  // A stop sequence taken from the greedy answer: the same generation stops where it first
  // appears, leaves it out of the text, names it, and counts its tokens as output.
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(5, 3);
  const size_t at = text.find(stop);
  json stopped_request = request;
  stopped_request["stop_sequences"] = {"never-generated-here", stop};
  const json stopped = message(*server, stopped_request, "stop_sequences");
  SCOPED_TRACE("greedy text \"" + text + "\", stop sequence \"" + stop + "\"");
  EXPECT_EQ(text_of(stopped), text.substr(0, at)) << stopped.dump();
  EXPECT_EQ(stopped.value("stop_reason", ""), "stop_sequence") << stopped.dump();
  EXPECT_EQ(stopped.value("stop_sequence", json()), json(stop)) << stopped.dump();
  EXPECT_EQ(usage_of(stopped, "output_tokens"), static_cast<int64_t>(at + stop.size()))
      << stopped.dump();
  // Anthropic's input_tokens leave out what was read from the cache: together, the prompt.
  EXPECT_EQ(usage_of(stopped, "input_tokens") + usage_of(stopped, "cache_read_input_tokens"),
            prompt)
      << stopped.dump();
  EXPECT_NE(stopped.value("id", ""), answer.value("id", "")) << "every message has its own id";
  expect_clean_exit(*server);
}

TEST(ServerAnthropicE2eTest, AStreamFollowsAnthropicsEventSequence) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const json request = messages_request({user("Stream to me, please.")}, 10);
  const json whole = message(*server, request, "not streamed");
  const std::string text = text_of(whole);
  ASSERT_EQ(text.size(), 10u) << whole.dump();

  {
    SCOPED_TRACE("max_tokens");
    const std::vector<Event> events = stream_events(*server, request);
    ASSERT_FALSE(events.empty());
    Streamed streamed;
    check_sequence(events, streamed);
    EXPECT_EQ(streamed.text, text) << "the deltas join to the answer's text";
    EXPECT_GE(streamed.deltas, 2u) << "text streamed in pieces";
    EXPECT_EQ(streamed.message_start.value("model", ""), "synthetic:tiny");
    const json& delta = streamed.message_delta;
    EXPECT_EQ(delta["delta"].value("stop_reason", ""), "max_tokens") << delta.dump();
    EXPECT_TRUE(delta["delta"]["stop_sequence"].is_null()) << delta.dump();
    EXPECT_EQ(usage_of(delta, "output_tokens"), 10) << delta.dump();
    // The final usage: together the whole prompt, as the answer that was not streamed.
    EXPECT_EQ(usage_of(delta, "input_tokens") + usage_of(delta, "cache_read_input_tokens"),
              usage_of(whole, "input_tokens") + usage_of(whole, "cache_read_input_tokens"))
        << delta.dump() << " vs " << whole.dump();
  }
  {
    const std::string stop = text.substr(4, 2);
    const size_t at = text.find(stop);
    SCOPED_TRACE("stop sequence \"" + stop + "\" in \"" + text + "\"");
    json stopped = request;
    stopped["stop_sequences"] = {stop};
    const std::vector<Event> events = stream_events(*server, stopped);
    ASSERT_FALSE(events.empty());
    Streamed streamed;
    check_sequence(events, streamed);
    EXPECT_EQ(streamed.text, text.substr(0, at)) << "the stop sequence is never streamed";
    const json& delta = streamed.message_delta;
    EXPECT_EQ(delta["delta"].value("stop_reason", ""), "stop_sequence") << delta.dump();
    EXPECT_EQ(delta["delta"].value("stop_sequence", json()), json(stop)) << delta.dump();
    EXPECT_EQ(usage_of(delta, "output_tokens"), static_cast<int64_t>(at + stop.size()))
        << delta.dump();
  }
  expect_clean_exit(*server);
}

TEST(ServerAnthropicE2eTest, ASecondTurnReadsItsPrefixFromTheCacheAndAnswersAsChatDoes) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  const std::string system = "Be brief.";
  json first = messages_request({user("What is a siesta?")}, 10);
  first["system"] = system;
  const json one = message(*server, first, "turn 1");
  const std::string answer_one = text_of(one);
  ASSERT_EQ(answer_one.size(), 10u) << one.dump();
  const int64_t prompt_one =
      usage_of(one, "input_tokens") + usage_of(one, "cache_read_input_tokens");

  // Turn 2 repeats turn 1 and its answer, then asks more: the engine holds that prefix.
  json second = messages_request(
      {user("What is a siesta?"), assistant(answer_one), user("And how long is one?")}, 10);
  // The system prompt as Anthropic's block array: the same text.
  second["system"] = json::array({{{"type", "text"}, {"text", system}}});
  const json two = message(*server, second, "turn 2");
  const std::string answer_two = text_of(two);
  const int64_t read = usage_of(two, "cache_read_input_tokens");
  EXPECT_GT(read, 0) << two.dump();
  // Every token the engine holds: turn 1's prompt and answer, all but the last generated token
  // (its keys and values were never computed).
  EXPECT_EQ(read, prompt_one + 10 - 1) << two.dump();
  httplib::Result counted = post_anthropic(*server, "/v1/messages/count_tokens", second.dump(), {});
  const json count = body_of(counted, 200, "count_tokens of turn 2");
  EXPECT_EQ(usage_of(two, "input_tokens") + read, count.value("input_tokens", int64_t{-1}))
      << "input_tokens + cache_read_input_tokens = the prompt: " << two.dump() << " "
      << count.dump();

  // The same conversations through OpenAI's chat (the same template): the same text, on this
  // server and on a fresh one.
  auto fresh = start_or_die(kTinyModel);
  ASSERT_NE(fresh, nullptr);
  for (const auto& [messages, want] : std::vector<std::pair<json, std::string>>{
           {json::array({{{"role", "system"}, {"content", system}}, user("What is a siesta?")}),
            answer_one},
           {json::array({{{"role", "system"}, {"content", system}},
                         user("What is a siesta?"),
                         assistant(answer_one),
                         user("And how long is one?")}),
            answer_two}}) {
    const json chat = {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}};
    for (ServerProcess* on : {server.get(), fresh.get()}) {
      Result<Completion> got = complete(*on, chat, "/v1/chat/completions");
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_EQ(got->http_status, 200) << got->body.dump();
      EXPECT_EQ(got->text, want) << (on == fresh.get() ? "fresh server " : "same server ")
                                 << chat.dump();
    }
  }
  expect_clean_exit(*server);
}

TEST(ServerAnthropicE2eTest, BadInputIsA400InAnthropicsShape) {
  auto server = start_or_die(kTinyModel);  // context 256
  ASSERT_NE(server, nullptr);
  const json good = messages_request({user("Hi")}, 4);
  auto without = [&](const char* name) {
    json body = good;
    body.erase(name);
    return body;
  };
  auto with_field = [&](const char* name, const json& value) {
    json body = good;
    body[name] = value;
    return body;
  };
  const json image_block = {
      {"type", "image"},
      {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "iVBORw0KGgo="}}}};
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"missing max_tokens", without("max_tokens").dump(), "max_tokens"},
      {"max_tokens 0", with_field("max_tokens", 0).dump(), "max_tokens"},
      {"max_tokens a string", with_field("max_tokens", "4").dump(), "max_tokens"},
      {"missing model", without("model").dump(), "model"},
      {"missing messages", without("messages").dump(), "messages"},
      {"no messages", with_field("messages", json::array()).dump(), "messages"},
      {"an image block",
       with_field("messages",
                  {{{"role", "user"},
                    {"content", {{{"type", "text"}, {"text", "What is this?"}}, image_block}}}})
           .dump(),
       "messages[0].content[1].type"},
      {"an image in system",
       with_field("system", json::array({{{"type", "text"}, {"text", "S"}}, image_block})).dump(),
       "system[1].type"},
      {"a system role in messages",
       with_field("messages", {{{"role", "system"}, {"content", "S"}}}).dump(), "messages[0].role"},
      {"tools",
       with_field("tools", {{{"name", "get_weather"},
                             {"description", "the weather"},
                             {"input_schema", {{"type", "object"}}}}})
           .dump(),
       "tools"},
      {"tool_choice", with_field("tool_choice", {{"type", "auto"}}).dump(), "tool_choice"},
      {"thinking", with_field("thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}).dump(),
       "thinking"},
      {"an unknown field", with_field("frobnicate", true).dump(), "frobnicate"},
      {"temperature above 1", with_field("temperature", 1.5).dump(), "temperature"},
      {"temperature below 0", with_field("temperature", -0.1).dump(), "temperature"},
      {"temperature a string", with_field("temperature", "hot").dump(), "temperature"},
      {"top_k 0", with_field("top_k", 0).dump(), "top_k"},
      {"top_p 0", with_field("top_p", 0).dump(), "top_p"},
      {"five stop sequences", with_field("stop_sequences", {"a", "b", "c", "d", "e"}).dump(),
       "stop_sequences"},
      {"stream a string", with_field("stream", "yes").dump(), "stream"},
      {"metadata beyond user_id", with_field("metadata", {{"tenant", "x"}}).dump(),
       "metadata.tenant"},
      {"beyond the context", with_field("max_tokens", 250).dump(), "max_tokens"},
      {"malformed JSON", R"({"model": "m", )", ""},
      {"not an object", "[1, 2]", ""},
  };
  for (const auto& [what, body, field] : cases) {
    SCOPED_TRACE(what + ": " + body);
    expect_anthropic_error(post_anthropic(*server, "/v1/messages", body), 400,
                           "invalid_request_error", field, what);
  }
  // count_tokens refuses the same way (max_tokens is not required there).
  expect_anthropic_error(post_anthropic(*server, "/v1/messages/count_tokens",
                                        with_field("tools", json::array({{{"name", "t"}}})).dump()),
                         400, "invalid_request_error", "tools", "count_tokens with tools");
  expect_anthropic_error(
      post_anthropic(*server, "/v1/messages/count_tokens", without("messages").dump()), 400,
      "invalid_request_error", "messages", "count_tokens without messages");
  // A body that is not sent as JSON is refused before routing, in the same shape.
  expect_anthropic_error(server->post("/v1/messages", good.dump(), "text/plain"), 415,
                         "invalid_request_error", "Content-Type", "text/plain body");

  // None of it reached the engine: a good request is served.
  const json answer = message(*server, good, "after the refusals");
  EXPECT_EQ(text_of(answer).size(), 4u) << answer.dump();
  expect_clean_exit(*server);
}

TEST(ServerAnthropicE2eTest, CountTokensIsThePromptAMessageReads) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  json request = messages_request({user("Count me in."), assistant("Sure."), user("Now?")}, 4);
  request["system"] = "You count.";
  json counted_request = request;
  counted_request.erase("max_tokens");  // not required to count
  counted_request.erase("temperature");
  const json count = body_of(
      post_anthropic(*server, "/v1/messages/count_tokens", counted_request.dump()), 200, "count");
  EXPECT_EQ(count.size(), 1u) << count.dump();
  const std::string rendered =
      "<|system|>\nYou count.\n<|user|>\nCount me in.\n<|assistant|>\nSure.\n<|user|>\nNow?\n"
      "<|assistant|>\n";
  EXPECT_EQ(count.value("input_tokens", int64_t{-1}), static_cast<int64_t>(rendered.size()))
      << count.dump();
  // The message itself reads as many (a fresh server: nothing from the cache).
  const json answer = message(*server, request, "message");
  EXPECT_EQ(usage_of(answer, "input_tokens"), count.value("input_tokens", int64_t{-1}))
      << answer.dump();
  EXPECT_EQ(usage_of(answer, "cache_read_input_tokens"), 0) << answer.dump();
  // llama-server's /apply-template renders the same conversation (system first) identically.
  const json applied = body_of(
      server->post_json("/apply-template", {{"messages",
                                             {{{"role", "system"}, {"content", "You count."}},
                                              user("Count me in."),
                                              assistant("Sure."),
                                              user("Now?")}}}),
      200, "apply-template");
  EXPECT_EQ(applied.value("prompt", ""), rendered) << applied.dump();
  expect_clean_exit(*server);
}

TEST(ServerAnthropicE2eTest, AnApiKeyIsReadFromXApiKeyOrBearerAndRefusedInAnthropicsShape) {
  auto server = start_or_die(with(kTinyModel, {"--api-key", "anthropic-test-key"}));
  ASSERT_NE(server, nullptr);
  const std::string request = messages_request({user("Keyed")}, 3).dump();
  const std::string count = json({{"messages", {user("Keyed")}}}).dump();

  // Refused: no key, a wrong key either way, the right key under another scheme.
  const std::vector<std::pair<std::string, httplib::Headers>> refused = {
      {"no key", {}},
      {"a wrong x-api-key", {{"x-api-key", "wrong"}}},
      {"a wrong bearer", {{"Authorization", "Bearer wrong"}}},
      {"the key as Basic", {{"Authorization", "Basic anthropic-test-key"}}},
      {"a right x-api-key with a wrong bearer",
       {{"x-api-key", "anthropic-test-key"}, {"Authorization", "Bearer wrong"}}},
  };
  for (const auto& [what, headers] : refused) {
    SCOPED_TRACE(what);
    expect_anthropic_error(post_anthropic(*server, "/v1/messages", request, headers), 401,
                           "authentication_error", "", what + " on /v1/messages");
    expect_anthropic_error(post_anthropic(*server, "/v1/messages/count_tokens", count, headers),
                           401, "authentication_error", "", what + " on count_tokens");
  }
  // Served: Anthropic's header, the bearer, or both holding the key.
  const std::vector<std::pair<std::string, httplib::Headers>> served = {
      {"x-api-key", {{"x-api-key", "anthropic-test-key"}}},
      {"bearer", {{"Authorization", "Bearer anthropic-test-key"}}},
      {"both",
       {{"x-api-key", "anthropic-test-key"}, {"Authorization", "Bearer anthropic-test-key"}}},
  };
  for (const auto& [what, headers] : served) {
    SCOPED_TRACE(what);
    const json answer =
        body_of(post_anthropic(*server, "/v1/messages", request, headers), 200, what);
    EXPECT_EQ(answer.value("type", ""), "message") << answer.dump();
    const json counted =
        body_of(post_anthropic(*server, "/v1/messages/count_tokens", count, headers), 200, what);
    EXPECT_TRUE(counted.contains("input_tokens")) << counted.dump();
  }
  expect_clean_exit(*server);
}

}  // namespace
}  // namespace siesta::testing
