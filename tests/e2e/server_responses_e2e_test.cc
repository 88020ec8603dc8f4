// OpenAI's Responses API on the real binary (server/responses_routes.h): POST /v1/responses
// answered in OpenAI's response shape, a chain continued with previous_response_id after its
// conversation was offloaded to disk (its history read back: cached_tokens, and the text of a
// server that never offloads), GET /v1/responses/{id} giving back the posted object, DELETE
// forgetting the record and its conversation (the snapshot file gone), "store": false kept
// nowhere, a stream read event by event in OpenAI's order with its sequence numbers, refused
// input in OpenAI's error shape naming the field, two chains from one input kept apart, and
// --api-key on every route.
//
// The synthetic model has no end token: a response ends at max_output_tokens, so its status
// is "incomplete" (incomplete_details.reason "max_output_tokens") and a stream ends with
// response.incomplete, as OpenAI's do when the length ends them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <ctime>
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
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A greedy /v1/responses body.
json respond(const json& input, int max_output_tokens) {
  return {{"model", "gpt-4o"},
          {"input", input},
          {"max_output_tokens", max_output_tokens},
          {"temperature", 0}};
}
// The same, continuing `previous`.
json continued(const std::string& previous, const json& input, int max_output_tokens) {
  json body = respond(input, max_output_tokens);
  body["previous_response_id"] = previous;
  return body;
}

// The answer's body as JSON, with the test failed (and null returned) when there is none.
// POST /v1/responses; the parsed 200 answer.
json create(const ServerProcess& server, const json& request, const std::string& what) {
  return body_of(server.post_json("/v1/responses", request), 200, what);
}

std::string id_of(const json& response) {
  return response.is_object() ? response.value("id", "(no id)") : "(no response)";
}

// The text of a response's one output message's one output_text part ("" after a failure
// that says why).
std::string text_of(const json& response) {
  const bool shaped =
      response.is_object() && response.contains("output") && response["output"].is_array() &&
      response["output"].size() == 1 && response["output"][0].is_object() &&
      response["output"][0].contains("content") && response["output"][0]["content"].is_array() &&
      response["output"][0]["content"].size() == 1 &&
      response["output"][0]["content"][0].value("type", "") == "output_text" &&
      response["output"][0]["content"][0].contains("text") &&
      response["output"][0]["content"][0]["text"].is_string();
  EXPECT_TRUE(shaped) << "output must be one message of one output_text part: " << response.dump();
  return shaped ? response["output"][0]["content"][0]["text"].get<std::string>() : "";
}

// usage.<name>, or usage.input_tokens_details.cached_tokens for "cached_tokens".
int64_t usage_of(const json& response, const std::string& name) {
  const json* at = nullptr;
  if (response.is_object() && response.contains("usage") && response["usage"].is_object()) {
    const json& usage = response["usage"];
    if (name == "cached_tokens") {
      if (usage.contains("input_tokens_details") && usage["input_tokens_details"].is_object() &&
          usage["input_tokens_details"].contains(name)) {
        at = &usage["input_tokens_details"][name];
      }
    } else if (usage.contains(name)) {
      at = &usage[name];
    }
  }
  if (at == nullptr || !at->is_number_integer()) {
    ADD_FAILURE() << "no integer usage " << name << ": " << response.dump();
    return -1;
  }
  return at->get<int64_t>();
}

// The rendered prompt's length (the chat template; one token per byte).
int64_t rendered(const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string prompt;
  for (const auto& [role, content] : messages) prompt += "<|" + role + "|>\n" + content + "\n";
  return static_cast<int64_t>(prompt.size() + std::string("<|assistant|>\n").size());
}

// Checks a finished response's shape: OpenAI's fields, ended by its max_output_tokens.
void expect_response_shape(const json& response, int max_output_tokens) {
  SCOPED_TRACE(response.dump());
  ASSERT_TRUE(response.is_object());
  EXPECT_TRUE(std::regex_match(response.value("id", ""), std::regex("resp_[0-9a-f]{24}")));
  EXPECT_EQ(response.value("object", ""), "response");
  EXPECT_EQ(response.value("model", ""), "synthetic:tiny") << "the served model, not the asked";
  EXPECT_EQ(response.value("status", ""), "incomplete");
  EXPECT_EQ(response.value("incomplete_details", json()), json({{"reason", "max_output_tokens"}}));
  EXPECT_TRUE(response.contains("error") && response["error"].is_null());
  const int64_t now = std::time(nullptr);
  const int64_t created = response.value("created_at", int64_t{0});
  EXPECT_LE(created, now);
  EXPECT_GT(created, now - 600);
  EXPECT_EQ(response.value("max_output_tokens", -1), max_output_tokens);
  ASSERT_TRUE(response.contains("output") && response["output"].size() == 1);
  const json& message = response["output"][0];
  EXPECT_EQ(message.value("type", ""), "message");
  EXPECT_EQ(message.value("role", ""), "assistant");
  EXPECT_EQ(message.value("status", ""), "incomplete");
  EXPECT_TRUE(std::regex_match(message.value("id", ""), std::regex("msg_[0-9a-f]{24}")));
  ASSERT_TRUE(message.contains("content") && message["content"].size() == 1);
  EXPECT_EQ(message["content"][0].value("type", ""), "output_text");
  EXPECT_EQ(message["content"][0].value("annotations", json()), json::array());
  EXPECT_EQ(text_of(response).size(), static_cast<size_t>(max_output_tokens))
      << "one token per byte";
  EXPECT_EQ(usage_of(response, "output_tokens"), max_output_tokens);
  EXPECT_EQ(usage_of(response, "total_tokens"),
            usage_of(response, "input_tokens") + usage_of(response, "output_tokens"));
  EXPECT_LE(usage_of(response, "cached_tokens"), usage_of(response, "input_tokens"));
  EXPECT_EQ(response["usage"]["output_tokens_details"].value("reasoning_tokens", -1), 0);
}

// Checks `response` is `status` with exactly OpenAI's error body {"error": {"message", "type",
// "param", "code"}}, its param `param` (null when empty) and its code `code` (when not empty).
void expect_openai_error(const httplib::Result& response, int status, const std::string& type,
                         const std::string& param, const std::string& code,
                         const std::string& what) {
  const json body = body_of(response, status, what);
  ASSERT_TRUE(body.is_object()) << what;
  EXPECT_EQ(body.size(), 1u) << what << ": only error: " << body.dump();
  ASSERT_TRUE(body.contains("error") && body["error"].is_object()) << what << ": " << body.dump();
  const json& error = body["error"];
  EXPECT_EQ(error.size(), 4u) << what << ": message, type, param, code: " << body.dump();
  ASSERT_TRUE(error.contains("message") && error["message"].is_string()) << what;
  EXPECT_FALSE(error["message"].get<std::string>().empty()) << what;
  EXPECT_EQ(error.value("type", ""), type) << what << ": " << body.dump();
  EXPECT_EQ(error.value("param", json()), param.empty() ? json() : json(param))
      << what << ": " << body.dump();
  if (!code.empty()) {
    EXPECT_EQ(error.value("code", json()), json(code)) << what << ": " << body.dump();
  }
}

// The snapshot files (whole and delta segments) in `dir`.
std::vector<std::string> snapshots_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : list_dir(dir)) {
    if (std::regex_match(name, std::regex("siesta-[0-9a-f]{32}-[0-9]+(\\.[0-9]+)?\\.snap"))) {
      out.push_back(name);
    }
  }
  return out;
}

// Offloads the conversation now and waits until it is on disk.
void offload(ServerProcess& server) {
  httplib::Result offloaded = server.post("/v1/cache/offload", "{}");
  ASSERT_TRUE(offloaded);
  ASSERT_EQ(offloaded->status, 200) << offloaded->body;
  Result<json> on_disk = server.wait_for_cache_state("disk");
  ASSERT_TRUE(on_disk.ok()) << on_disk.status().to_string();
}

int64_t restores(const ServerProcess& server) {
  Result<json> status = server.status();
  EXPECT_TRUE(status.ok()) << status.status().to_string();
  return status.ok() ? cache_counter(*status, "restores") : -1;
}

TEST(ServerResponsesE2eTest, AChainContinuedAfterAnOffloadReadsItsHistoryBackFromDisk) {
  TempDir temp;
  const std::string cache = temp.file("cache");
  auto server = start_or_die(with(kTinyModel, {"--cache-idle-seconds", "600", "--cache-ram-mib",
                                               "0", "--cache-disk-dir", cache}));
  auto reference = start_or_die(kTinyModel);  // never offloads
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);

  json first = respond("What is a siesta?", 10);
  first["instructions"] = "Be brief.";
  const json one = create(*server, first, "turn 1");
  const json reference_one = create(*reference, first, "reference turn 1");
  expect_response_shape(one, 10);
  const std::string answer_one = text_of(one);
  EXPECT_EQ(answer_one, text_of(reference_one));
  EXPECT_EQ(usage_of(one, "input_tokens"),
            rendered({{"system", "Be brief."}, {"user", "What is a siesta?"}}));
  EXPECT_EQ(usage_of(one, "cached_tokens"), 0) << "a fresh server holds nothing";

  offload(*server);
  ASSERT_FALSE(snapshots_in(cache).empty()) << "offloaded to a snapshot";
  const int64_t restores_before = restores(*server);

  // Turn 2: its input as a message of input_text parts, the instructions sent again (OpenAI
  // does not carry them over).
  const json input_two =
      json::array({{{"type", "message"},
                    {"role", "user"},
                    {"content", json::array({{{"type", "input_text"}, {"text", "And how long "}},
                                             {{"type", "input_text"}, {"text", "is one?"}}})}}});
  json second = continued(id_of(one), input_two, 10);
  second["instructions"] = "Be brief.";
  json reference_second = second;
  reference_second["previous_response_id"] = id_of(reference_one);
  const json two = create(*server, second, "turn 2");
  const json reference_two = create(*reference, reference_second, "reference turn 2");
  expect_response_shape(two, 10);
  EXPECT_EQ(two.value("previous_response_id", json()), json(id_of(one)));
  const std::string answer_two = text_of(two);
  EXPECT_EQ(answer_two, text_of(reference_two)) << "the restored history answers as the kept one";
  EXPECT_EQ(restores(*server), restores_before + 1) << "turn 2 restored the snapshot";
  // Everything the engine held: turn 1's prompt and answer, but the last generated token (its
  // keys and values were never computed); the same as on the server that kept it in memory.
  const int64_t cached = usage_of(two, "cached_tokens");
  EXPECT_GT(cached, 0) << two.dump();
  EXPECT_EQ(cached, usage_of(one, "input_tokens") + usage_of(one, "output_tokens") - 1)
      << two.dump();
  EXPECT_EQ(cached, usage_of(reference_two, "cached_tokens")) << reference_two.dump();
  EXPECT_EQ(usage_of(two, "input_tokens"), rendered({{"system", "Be brief."},
                                                     {"user", "What is a siesta?"},
                                                     {"assistant", answer_one},
                                                     {"user", "And how long is one?"}}));

  // GET gives back the object POST answered.
  EXPECT_EQ(body_of(server->get("/v1/responses/" + id_of(two)), 200, "GET turn 2"), two);

  // DELETE of the offloaded conversation: its snapshot goes with it.
  offload(*server);
  ASSERT_FALSE(snapshots_in(cache).empty()) << "offloaded again";
  const json deleted =
      body_of(server->client()->Delete("/v1/responses/" + id_of(two)), 200, "DELETE turn 2");
  EXPECT_EQ(deleted, json({{"id", id_of(two)}, {"object", "response"}, {"deleted", true}}));
  EXPECT_THAT(snapshots_in(cache), ::testing::IsEmpty()) << "the conversation's snapshot is gone";
  expect_openai_error(server->get("/v1/responses/" + id_of(two)), 404, "invalid_request_error", "",
                      "not_found", "GET after DELETE");
  expect_openai_error(server->post_json("/v1/responses", continued(id_of(two), "More?", 4)), 404,
                      "invalid_request_error", "previous_response_id",
                      "previous_response_not_found", "continuing a deleted response");
  expect_openai_error(server->client()->Delete("/v1/responses/" + id_of(two)), 404,
                      "invalid_request_error", "", "not_found", "DELETE twice");

  // Turn 1's record holds its own conversation: it still continues, to the same answer, though
  // the engine's conversation it shared with turn 2 was forgotten (nothing is read from it).
  EXPECT_EQ(body_of(server->get("/v1/responses/" + id_of(one)), 200, "GET turn 1"), one);
  const json again = create(*server, second, "turn 2 again, from turn 1");
  EXPECT_EQ(text_of(again), answer_two);
  EXPECT_EQ(usage_of(again, "cached_tokens"), 0) << "the forgotten conversation is not reused";
  EXPECT_NE(id_of(again), id_of(two));
  expect_clean_exit(*server);
}

TEST(ServerResponsesE2eTest, GetReturnsThePostedObjectAndDeleteForgetsIt) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  json request = respond("Hello there", 6);
  request["metadata"] = {{"ticket", "42"}};
  const json posted = create(*server, request, "POST");
  expect_response_shape(posted, 6);
  EXPECT_EQ(posted.value("metadata", json()), json({{"ticket", "42"}}));
  EXPECT_EQ(posted.value("store", json()), json(true));
  EXPECT_EQ(usage_of(posted, "input_tokens"), rendered({{"user", "Hello there"}}));
  const std::string id = id_of(posted);
  EXPECT_EQ(body_of(server->get("/v1/responses/" + id), 200, "GET"), posted);
  EXPECT_EQ(body_of(server->get("/v1/responses/" + id), 200, "GET twice"), posted);

  expect_openai_error(server->get("/v1/responses/resp_0123456789abcdef01234567"), 404,
                      "invalid_request_error", "", "not_found", "GET of an unknown id");
  expect_openai_error(server->client()->Delete("/v1/responses/resp_0123456789abcdef01234567"), 404,
                      "invalid_request_error", "", "not_found", "DELETE of an unknown id");

  const json deleted = body_of(server->client()->Delete("/v1/responses/" + id), 200, "DELETE");
  EXPECT_EQ(deleted, json({{"id", id}, {"object", "response"}, {"deleted", true}}));
  expect_openai_error(server->get("/v1/responses/" + id), 404, "invalid_request_error", "",
                      "not_found", "GET after DELETE");
  expect_openai_error(server->post_json("/v1/responses", continued(id, "More?", 4)), 404,
                      "invalid_request_error", "previous_response_id",
                      "previous_response_not_found", "previous_response_id after DELETE");

  // "store": false: answered alike, kept nowhere.
  json unstored_request = request;
  unstored_request["store"] = false;
  const json unstored = create(*server, unstored_request, "store false");
  expect_response_shape(unstored, 6);
  EXPECT_EQ(unstored.value("store", json()), json(false));
  EXPECT_EQ(text_of(unstored), text_of(posted));
  expect_openai_error(server->get("/v1/responses/" + id_of(unstored)), 404, "invalid_request_error",
                      "", "not_found", "GET of an unstored response");
  expect_openai_error(server->post_json("/v1/responses", continued(id_of(unstored), "More?", 4)),
                      404, "invalid_request_error", "previous_response_id",
                      "previous_response_not_found", "continuing an unstored response");
  expect_clean_exit(*server);
}

using Event = NamedEvent;

// POSTs `request` with "stream": true; the events of its 200 answer (empty after a failure).
std::vector<Event> stream_events(const ServerProcess& server, json request) {
  request["stream"] = true;
  Result<SseStream> stream =
      SseStream::open(server.port(), "/v1/responses", request.dump(), bearer(server.api_key()));
  EXPECT_TRUE(stream.ok()) << stream.status().to_string();
  if (!stream.ok()) return {};
  Result<std::string> body = stream->read_rest();
  EXPECT_TRUE(body.ok()) << body.status().to_string();
  EXPECT_EQ(stream->head().status, 200) << body.value_or("");
  EXPECT_THAT(stream->head().header("content-type"), HasSubstr("text/event-stream"));
  if (!body.ok() || stream->head().status != 200) return {};
  EXPECT_EQ(body->find("data: [DONE]"), std::string::npos) << "the Responses API sends no [DONE]";
  return parse_named_events(*body);
}

// What a stream said, once its events were checked against OpenAI's sequence.
// (clang-tidy 14 flags its implicit member functions as it does Event's.)
// NOLINTNEXTLINE(bugprone-exception-escape)
struct Streamed {
  std::string text;  // the deltas joined
  size_t deltas = 0;
  std::string done_text;  // response.output_text.done's text
  json last;              // the last event's response
};

// Checks the sequence OpenAI's streaming documentation gives for one text message:
// response.created, response.in_progress (the response in progress, no output),
// response.output_item.added (the message, in progress), response.content_part.added (an
// empty output_text part), response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, then response.completed or
// response.incomplete (the whole response, its status naming which). Every event's name is
// its data's type, and sequence_number counts 0, 1, 2... Every event names the same response
// and the same message.
// (Fills `out` and returns void: gtest's ASSERT_* return from the function on failure.)
void check_sequence(const std::vector<Event>& events, Streamed& out) {
  SCOPED_TRACE("the events:\n" + describe_events(events));
  ASSERT_GE(events.size(), 9u);
  std::string response_id;
  std::string message_id;
  const std::vector<std::string> opening = {"response.created", "response.in_progress",
                                            "response.output_item.added",
                                            "response.content_part.added"};
  size_t i = 0;
  for (; i < events.size(); ++i) {
    const Event& event = events[i];
    SCOPED_TRACE("event " + std::to_string(i) + " " + event.name);
    EXPECT_EQ(event.data.value("type", ""), event.name) << "the event's name is its data's type";
    EXPECT_EQ(event.data.value("sequence_number", int64_t{-1}), static_cast<int64_t>(i));
    if (event.data.contains("item_id")) {
      EXPECT_EQ(event.data.value("item_id", ""), message_id);
    }
    if (event.data.contains("output_index")) {
      EXPECT_EQ(event.data.value("output_index", -1), 0);
    }
    if (event.data.contains("content_index")) {
      EXPECT_EQ(event.data.value("content_index", -1), 0);
    }
    if (i < opening.size()) {
      ASSERT_EQ(event.name, opening[i]);
      if (i < 2) {
        const json& response = event.data["response"];
        EXPECT_EQ(response.value("status", ""), "in_progress") << response.dump();
        EXPECT_EQ(response.value("output", json()), json::array()) << response.dump();
        EXPECT_TRUE(response.contains("usage") && response["usage"].is_null());
        if (i == 0) response_id = response.value("id", "");
        EXPECT_EQ(response.value("id", ""), response_id);
      } else if (i == 2) {
        const json& item = event.data["item"];
        message_id = item.value("id", "");
        EXPECT_TRUE(std::regex_match(message_id, std::regex("msg_[0-9a-f]{24}")));
        EXPECT_EQ(item.value("status", ""), "in_progress") << item.dump();
        EXPECT_EQ(item.value("role", ""), "assistant") << item.dump();
        EXPECT_EQ(item.value("content", json()), json::array()) << item.dump();
      } else {
        EXPECT_EQ(event.data.value("item_id", ""), message_id);
        EXPECT_EQ(event.data.value("part", json()),
                  json({{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}));
      }
      continue;
    }
    if (event.name != "response.output_text.delta") break;
    const json delta = event.data.value("delta", json());
    ASSERT_TRUE(delta.is_string()) << event.data.dump();
    out.text += delta.get<std::string>();
    ++out.deltas;
  }
  const std::vector<std::string> closing = {
      "response.output_text.done", "response.content_part.done", "response.output_item.done"};
  ASSERT_EQ(events.size(), i + closing.size() + 1) << "after the deltas: done, done, done, end";
  for (size_t k = 0; k < closing.size(); ++k) {
    ASSERT_EQ(events[i + k].name, closing[k]) << "event " << i + k;
  }
  const Event& done = events[i];
  out.done_text = done.data.value("text", "");
  const Event& last = events.back();
  out.last = last.data.value("response", json());
  const std::string status = out.last.value("status", "");
  EXPECT_EQ(last.name, status == "completed" ? "response.completed" : "response.incomplete")
      << "the last event names the response's status " << status;
  EXPECT_TRUE(status == "completed" || status == "incomplete") << status;
  EXPECT_EQ(out.last.value("id", ""), response_id);
  ASSERT_TRUE(out.last.contains("output") && out.last["output"].size() == 1) << out.last.dump();
  EXPECT_EQ(out.last["output"][0].value("id", ""), message_id);
  EXPECT_EQ(events[i + 1].data.value("part", json()), out.last["output"][0]["content"][0]);
  EXPECT_EQ(events[i + 2].data.value("item", json()), out.last["output"][0]);
}

TEST(ServerResponsesE2eTest, AStreamFollowsOpenAisEventSequence) {
  auto server = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  json request = respond("Stream to me, please.", 10);
  request["instructions"] = "Be brief.";
  const json whole = create(*server, request, "not streamed");
  const std::string text = text_of(whole);
  ASSERT_EQ(text.size(), 10u) << whole.dump();

  const std::vector<Event> events = stream_events(*server, request);
  ASSERT_FALSE(events.empty());
  Streamed streamed;
  check_sequence(events, streamed);
  EXPECT_EQ(streamed.text, text) << "the deltas join to the answer's text";
  EXPECT_EQ(streamed.done_text, text);
  EXPECT_EQ(text_of(streamed.last), text);
  EXPECT_GE(streamed.deltas, 2u) << "text streamed in pieces";
  expect_response_shape(streamed.last, 10);
  EXPECT_EQ(events.back().name, "response.incomplete") << "max_output_tokens ended it";
  EXPECT_NE(id_of(streamed.last), id_of(whole));
  EXPECT_EQ(usage_of(streamed.last, "input_tokens"), usage_of(whole, "input_tokens"));
  EXPECT_EQ(streamed.last.value("instructions", json()), json("Be brief."));

  // The streamed response is stored as the posted one is: GET gives its last event's
  // response, and it continues its own conversation.
  EXPECT_EQ(body_of(server->get("/v1/responses/" + id_of(streamed.last)), 200, "GET streamed"),
            streamed.last);
  json next = continued(id_of(streamed.last), "And then?", 5);
  next["instructions"] = "Be brief.";
  const json after = create(*server, next, "continuing the streamed response");
  EXPECT_EQ(usage_of(after, "cached_tokens"),
            usage_of(streamed.last, "input_tokens") + usage_of(streamed.last, "output_tokens") - 1)
      << after.dump();
  // A streamed continuation streams the same text.
  const std::vector<Event> continued_events = stream_events(*server, next);
  Streamed continued_stream;
  check_sequence(continued_events, continued_stream);
  EXPECT_EQ(continued_stream.text, text_of(after));
  expect_clean_exit(*server);
}

TEST(ServerResponsesE2eTest, BadInputIsA400InOpenAisShapeNamingTheField) {
  auto server = start_or_die(kTinyModel);  // context 256
  ASSERT_NE(server, nullptr);
  const json good = respond("Hi", 4);
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
  auto with_input = [&](const json& item) { return with_field("input", json::array({item})); };
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"missing input", without("input").dump(), "input"},
      {"empty input", with_field("input", "").dump(), "input"},
      {"no messages", with_field("input", json::array()).dump(), "input"},
      {"input a number", with_field("input", 4).dump(), "input"},
      {"an image part",
       with_input({{"role", "user"},
                   {"content",
                    {{{"type", "input_text"}, {"text", "What is this?"}},
                     {{"type", "input_image"}, {"image_url", "https://example.com/a.png"}}}}})
           .dump(),
       "input[0].content[1].type"},
      {"a function call item",
       with_input(
           {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}})
           .dump(),
       "input[0].type"},
      {"a tool role", with_input({{"role", "tool"}, {"content", "x"}}).dump(), "input[0].role"},
      {"a message without content", with_input({{"role", "user"}}).dump(), "input[0].content"},
      {"tools",
       with_field(
           "tools",
           {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}})
           .dump(),
       "tools"},
      {"tool_choice required", with_field("tool_choice", "required").dump(), "tool_choice"},
      {"a JSON schema format",
       with_field("text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}).dump(), "text"},
      {"reasoning", with_field("reasoning", {{"effort", "high"}}).dump(), "reasoning"},
      {"background", with_field("background", true).dump(), "background"},
      {"truncation auto", with_field("truncation", "auto").dump(), "truncation"},
      {"an unknown field", with_field("frobnicate", true).dump(), "frobnicate"},
      {"instructions a number", with_field("instructions", 4).dump(), "instructions"},
      {"max_output_tokens 0", with_field("max_output_tokens", 0).dump(), "max_output_tokens"},
      {"max_output_tokens a string", with_field("max_output_tokens", "4").dump(),
       "max_output_tokens"},
      {"temperature above 2", with_field("temperature", 2.5).dump(), "temperature"},
      {"temperature below 0", with_field("temperature", -0.1).dump(), "temperature"},
      {"top_p above 1", with_field("top_p", 1.5).dump(), "top_p"},
      {"stream a string", with_field("stream", "yes").dump(), "stream"},
      {"store a string", with_field("store", "no").dump(), "store"},
      {"previous_response_id a number", with_field("previous_response_id", 4).dump(),
       "previous_response_id"},
      {"an empty prompt_cache_key", with_field("prompt_cache_key", "").dump(), "prompt_cache_key"},
      {"metadata a string", with_field("metadata", "x").dump(), "metadata"},
      {"beyond the context", with_field("max_output_tokens", 250).dump(), "input"},
      {"malformed JSON", R"({"input": "x", )", ""},
      {"not an object", "[1, 2]", ""},
  };
  for (const auto& [what, body, param] : cases) {
    SCOPED_TRACE(what + ": " + body);
    expect_openai_error(server->post("/v1/responses", body), 400, "invalid_request_error", param,
                        "", what);
  }
  expect_openai_error(server->post_json("/v1/responses", with_field("max_output_tokens", 250)), 400,
                      "invalid_request_error", "input", "context_length_exceeded",
                      "beyond the context's code");
  expect_openai_error(
      server->post_json("/v1/responses", continued("resp_0123456789abcdef01234567", "x", 4)), 404,
      "invalid_request_error", "previous_response_id", "previous_response_not_found",
      "an unknown previous_response_id");
  // A body that is not sent as JSON is refused before routing, in the same shape.
  httplib::Result plain = server->post("/v1/responses", good.dump(), "text/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 415) << plain->body;
  EXPECT_THAT(plain->body, HasSubstr("Content-Type"));

  // None of it reached the engine: a good request is served.
  const json answer = create(*server, good, "after the refusals");
  expect_response_shape(answer, 4);
  expect_clean_exit(*server);
}

TEST(ServerResponsesE2eTest, TwoChainsFromTheSameInputStayApart) {
  // Two conversations kept resident side by side. Every answer is a function of its prompt
  // alone (greedy), so what tells the chains apart is what each reads from the engine's cache.
  auto server = start_or_die(with(kTinyModel, {"--parallel", "2", "--max-sessions", "2"}));
  auto reference = start_or_die(kTinyModel);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);
  const std::string input = "Tell me a story about two travellers.";
  const json a1 = create(*server, respond(input, 8), "chain A turn 1");
  const json b1 = create(*server, respond(input, 8), "chain B turn 1");
  EXPECT_NE(id_of(a1), id_of(b1));
  EXPECT_EQ(text_of(a1), text_of(b1)) << "greedy: the same input, the same answer";
  EXPECT_EQ(usage_of(b1, "cached_tokens"), 0)
      << "a new chain is a conversation of its own, never another chain's";

  const json a2 = create(*server, continued(id_of(a1), "They walked north.", 8), "A turn 2");
  const json b2 = create(*server, continued(id_of(b1), "They sailed south.", 8), "B turn 2");
  EXPECT_EQ(usage_of(b2, "cached_tokens"),
            usage_of(b1, "input_tokens") + usage_of(b1, "output_tokens") - 1)
      << "B's turn 2 reads B's own history";
  // B's turn did not touch A's conversation: A's next turn reads all of A's history.
  const json a3 = create(*server, continued(id_of(a2), "What did they find?", 8), "A turn 3");
  EXPECT_EQ(usage_of(a3, "cached_tokens"),
            usage_of(a2, "input_tokens") + usage_of(a2, "output_tokens") - 1)
      << a3.dump();
  // B branched again from its turn 1 with A's words answers as A did.
  const json b2_again =
      create(*server, continued(id_of(b1), "They walked north.", 8), "B turn 2, A's words");
  EXPECT_EQ(text_of(b2_again), text_of(a2));

  // Each chain's answers are those of a server that only ever saw that chain.
  const json r1 = create(*reference, respond(input, 8), "reference turn 1");
  const json r2 = create(*reference, continued(id_of(r1), "They walked north.", 8), "reference 2");
  const json r3 = create(*reference, continued(id_of(r2), "What did they find?", 8), "reference 3");
  const json s2 = create(*reference, continued(id_of(r1), "They sailed south.", 8), "reference 2'");
  EXPECT_EQ(text_of(a1), text_of(r1));
  EXPECT_EQ(text_of(a2), text_of(r2));
  EXPECT_EQ(text_of(a3), text_of(r3));
  EXPECT_EQ(text_of(b2), text_of(s2));
  expect_clean_exit(*server);
}

TEST(ServerResponsesE2eTest, AnApiKeyGuardsEveryResponsesRoute) {
  auto server = start_or_die(with(kTinyModel, {"--api-key", "responses-test-key"}));
  ASSERT_NE(server, nullptr);
  const json request = respond("Keyed", 3);

  // No key, a wrong one: 401 in OpenAI's shape, on every route.
  expect_openai_error(server->post_json("/v1/responses", request), 401, "authentication_error", "",
                      "missing_api_key", "POST without a key");
  server->set_api_key("wrong");
  expect_openai_error(server->post_json("/v1/responses", request), 401, "authentication_error", "",
                      "invalid_api_key", "POST with a wrong key");

  server->set_api_key("responses-test-key");
  const json posted = create(*server, request, "POST with the key");
  expect_response_shape(posted, 3);
  const std::string path = "/v1/responses/" + id_of(posted);
  server->set_api_key("");
  expect_openai_error(server->get(path), 401, "authentication_error", "", "missing_api_key",
                      "GET without a key");
  expect_openai_error(server->client()->Delete(path), 401, "authentication_error", "",
                      "missing_api_key", "DELETE without a key");
  json streamed_request = request;
  streamed_request["stream"] = true;
  Result<SseStream> unkeyed =
      SseStream::open(server->port(), "/v1/responses", streamed_request.dump(), {});
  ASSERT_TRUE(unkeyed.ok()) << unkeyed.status().to_string();
  EXPECT_EQ(unkeyed->head().status, 401) << "a stream without a key";
  server->set_api_key("responses-test-key");
  EXPECT_EQ(body_of(server->get(path), 200, "GET with the key"), posted)
      << "the refused DELETE deleted nothing";
  const std::vector<Event> events = stream_events(*server, request);
  EXPECT_FALSE(events.empty()) << "streamed with the key";
  EXPECT_EQ(
      body_of(server->client()->Delete(path), 200, "DELETE with the key").value("deleted", false),
      true);
  expect_clean_exit(*server);
}

}  // namespace
}  // namespace siesta::testing
