// OpenAI's Responses API as pure functions (server/responses_json.h): a request body read field
// by field (the input as text or as messages of input_text / output_text parts, every served
// field, each wrong one InvalidArgument naming it), the engine request it makes (the prompt of
// instructions, the previous response's conversation and the input; the route; the length and
// the context), the conversation a stored response keeps, the response object's shape, and the
// stream's events in OpenAI's order with sequence numbers counting from 0.
#include "server/responses_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "engine/session_table.h"
#include "server/chat_template.h"
#include "server/openai_json.h"
#include "server/response_store.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const ServedModel kResponsesModel{.name = "synthetic:tiny", .context = 256};
// A server started with --n-predict 16.
const ServedModel kResponsesSixteen{.name = "synthetic:tiny", .context = 256, .n_predict = 16};

Result<ResponsesRequest> parse_responses(const json& body, ErrorDetail* detail = nullptr) {
  return parse_responses_request(body.dump(), detail);
}

json minimal() { return {{"model", "gpt-4o"}, {"input", "Hello"}}; }

json with(const char* name, const json& value) {
  json body = minimal();
  body[name] = value;
  return body;
}

// "role: content" per message, so that two conversations compare and print as text.
std::vector<std::string> describe(const std::vector<ChatMessage>& messages) {
  std::vector<std::string> out;
  out.reserve(messages.size());
  for (const ChatMessage& message : messages) {
    out.push_back(std::string(chat_role_name(message.role)) + ": " + message.content);
  }
  return out;
}

// The param a refused body names; the refusal must be InvalidArgument and its message must
// name the param too.
std::string refused_param(const std::string& body) {
  ErrorDetail detail;
  Result<ResponsesRequest> parsed = parse_responses_request(body, &detail);
  EXPECT_FALSE(parsed.ok()) << body;
  if (parsed.ok()) return "(accepted)";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << body;
  if (!detail.param.empty()) {
    EXPECT_THAT(parsed.status().message(), HasSubstr(detail.param)) << body;
  }
  return detail.param;
}
std::string refused_param(const json& body) { return refused_param(body.dump()); }

TEST(ResponsesJsonTest, AStringInputIsOneUserMessageWithOpenAisDefaults) {
  Result<ResponsesRequest> parsed = parse_responses(minimal());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(describe(parsed->input), (std::vector<std::string>{"user: Hello"}));
  EXPECT_FALSE(parsed->instructions.has_value());
  EXPECT_FALSE(parsed->previous_response_id.has_value());
  EXPECT_FALSE(parsed->cache_key.has_value());
  EXPECT_EQ(parsed->max_output_tokens, 0u) << "not given";
  EXPECT_EQ(parsed->temperature, 0.0f) << "greedy by default";
  EXPECT_EQ(parsed->top_p, 1.0f);
  EXPECT_FALSE(parsed->stream);
  EXPECT_TRUE(parsed->store) << "OpenAI stores responses unless told not to";
  EXPECT_EQ(parsed->metadata, json::object());
  // The model is optional.
  Result<ResponsesRequest> no_model = parse_responses({{"input", "Hello"}});
  ASSERT_TRUE(no_model.ok()) << no_model.status().to_string();
}

TEST(ResponsesJsonTest, AMessageListReadsEveryRoleAndTextPart) {
  const json body = {
      {"input", json::array({
                    {{"type", "message"},
                     {"role", "developer"},
                     {"content", json::array({{{"type", "input_text"}, {"text", "Be "}},
                                              {{"type", "input_text"}, {"text", "brief."}}})}},
                    {{"role", "user"}, {"content", "Hi"}},
                    {{"type", "message"},
                     {"id", "msg_0123"},
                     {"status", "completed"},
                     {"role", "assistant"},
                     {"content", json::array({{{"type", "output_text"}, {"text", "Yo"}}})}},
                    {{"role", "system"},
                     {"content", json::array({{{"type", "input_text"}, {"text", "S"}}})}},
                })}};
  Result<ResponsesRequest> parsed = parse_responses(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(describe(parsed->input), (std::vector<std::string>{"system: Be brief.", "user: Hi",
                                                               "assistant: Yo", "system: S"}))
      << "developer is read as system; parts are joined";
}

TEST(ResponsesJsonTest, EveryServedFieldIsRead) {
  json body = minimal();
  body["instructions"] = "Answer in French.";
  body["previous_response_id"] = "resp_0123456789abcdef01234567";
  body["max_output_tokens"] = 7;
  body["temperature"] = 0.5;
  body["top_p"] = 0.25;
  body["stream"] = true;
  body["store"] = false;
  body["metadata"] = {{"tenant", "a"}, {"n", "1"}};
  // Accepted with no effect, or at their neutral value.
  body["user"] = "u-1";
  body["safety_identifier"] = "s-1";
  body["service_tier"] = "auto";
  body["text"] = {{"format", {{"type", "text"}}}};
  body["tools"] = json::array();
  body["tool_choice"] = "none";
  body["parallel_tool_calls"] = false;
  body["truncation"] = "disabled";
  body["background"] = false;
  body["include"] = json::array();
  body["reasoning"] = nullptr;
  Result<ResponsesRequest> parsed = parse_responses(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->instructions, std::optional<std::string>("Answer in French."));
  EXPECT_EQ(parsed->previous_response_id,
            std::optional<std::string>("resp_0123456789abcdef01234567"));
  EXPECT_EQ(parsed->max_output_tokens, 7u);
  EXPECT_FLOAT_EQ(parsed->temperature, 0.5f);
  EXPECT_FLOAT_EQ(parsed->top_p, 0.25f);
  EXPECT_TRUE(parsed->stream);
  EXPECT_FALSE(parsed->store);
  EXPECT_EQ(parsed->metadata, json({{"tenant", "a"}, {"n", "1"}}));
  EXPECT_EQ(describe(parsed->input), (std::vector<std::string>{"user: Hello"}));

  body["tool_choice"] = "auto";
  EXPECT_TRUE(parse_responses(body).ok()) << "tool_choice auto with no tools is served";
}

TEST(ResponsesJsonTest, NullIsNotGiven) {
  json body = minimal();
  for (const char* name :
       {"instructions", "previous_response_id", "max_output_tokens", "temperature", "top_p",
        "stream", "store", "prompt_cache_key", "metadata", "text", "tools", "truncation"}) {
    body[name] = nullptr;
  }
  Result<ResponsesRequest> parsed = parse_responses(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_FALSE(parsed->instructions.has_value());
  EXPECT_FALSE(parsed->previous_response_id.has_value());
  EXPECT_FALSE(parsed->cache_key.has_value());
  EXPECT_EQ(parsed->max_output_tokens, 0u);
  EXPECT_EQ(parsed->temperature, 0.0f);
  EXPECT_EQ(parsed->top_p, 1.0f);
  EXPECT_TRUE(parsed->store);
}

TEST(ResponsesJsonTest, PromptCacheKeyNamesTheConversationOfANewChain) {
  Result<ResponsesRequest> parsed = parse_responses(with("prompt_cache_key", "tenant-42"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  ASSERT_TRUE(parsed->cache_key.has_value());
  EXPECT_EQ(*parsed->cache_key, engine::session_key_of("tenant-42"));
  EXPECT_NE(*parsed->cache_key, engine::session_key_of("tenant-43"));

  const std::string longest(kMaxPromptCacheKeyBytes, 'k');
  EXPECT_TRUE(parse_responses(with("prompt_cache_key", longest)).ok());
  EXPECT_EQ(refused_param(with("prompt_cache_key", longest + "k")), "prompt_cache_key");
  EXPECT_EQ(refused_param(with("prompt_cache_key", "")), "prompt_cache_key");
  EXPECT_EQ(refused_param(with("prompt_cache_key", 42)), "prompt_cache_key");
  // A continued response stays in its previous response's conversation.
  json both = with("prompt_cache_key", "tenant-42");
  both["previous_response_id"] = "resp_0123";
  EXPECT_EQ(refused_param(both), "prompt_cache_key");
}

TEST(ResponsesJsonTest, FieldsNotServedAreRefusedByName) {
  EXPECT_EQ(refused_param(with("frobnicate", true)), "frobnicate");
  EXPECT_EQ(refused_param(with("n", 2)), "n") << "a Chat Completions field";
  EXPECT_EQ(refused_param(with("tools", json::array({{{"type", "function"},
                                                      {"name", "get_weather"},
                                                      {"parameters", json::object()}}}))),
            "tools");
  EXPECT_EQ(refused_param(with("tools", json::array({{{"type", "web_search_preview"}}}))), "tools");
  EXPECT_EQ(refused_param(with("tool_choice", "required")), "tool_choice");
  EXPECT_EQ(refused_param(with("tool_choice", {{"type", "function"}, {"name", "f"}})),
            "tool_choice");
  EXPECT_EQ(refused_param(with("text", {{"format", {{"type", "json_object"}}}})), "text");
  EXPECT_EQ(refused_param(with("truncation", "auto")), "truncation");
  EXPECT_EQ(refused_param(with("background", true)), "background");
  EXPECT_EQ(refused_param(with("include", json::array({"reasoning.encrypted_content"}))),
            "include");
  EXPECT_EQ(refused_param(with("reasoning", {{"effort", "low"}})), "reasoning");
}

TEST(ResponsesJsonTest, WrongTypesAndValuesAreRefusedByName) {
  EXPECT_EQ(refused_param(with("model", 4)), "model");
  EXPECT_EQ(refused_param(with("instructions", 4)), "instructions");
  EXPECT_EQ(refused_param(with("instructions", json::array({"a"}))), "instructions");
  EXPECT_EQ(refused_param(with("previous_response_id", 4)), "previous_response_id");
  EXPECT_EQ(refused_param(with("max_output_tokens", 0)), "max_output_tokens");
  EXPECT_EQ(refused_param(with("max_output_tokens", -1)), "max_output_tokens");
  EXPECT_EQ(refused_param(with("max_output_tokens", 1.5)), "max_output_tokens");
  EXPECT_EQ(refused_param(with("max_output_tokens", "8")), "max_output_tokens");
  EXPECT_EQ(refused_param(with("max_output_tokens", uint64_t{1} << 32)), "max_output_tokens");
  EXPECT_EQ(refused_param(with("temperature", -0.01)), "temperature");
  EXPECT_EQ(refused_param(with("temperature", 2.01)), "temperature");
  EXPECT_EQ(refused_param(with("temperature", "hot")), "temperature");
  EXPECT_EQ(refused_param(with("top_p", -0.01)), "top_p");
  EXPECT_EQ(refused_param(with("top_p", 1.01)), "top_p");
  EXPECT_EQ(refused_param(with("top_p", true)), "top_p");
  EXPECT_EQ(refused_param(with("stream", "yes")), "stream");
  EXPECT_EQ(refused_param(with("stream", 1)), "stream");
  EXPECT_EQ(refused_param(with("store", "no")), "store");
  EXPECT_EQ(refused_param(with("metadata", "x")), "metadata");
  EXPECT_EQ(refused_param(with("user", 4)), "user");
  EXPECT_EQ(refused_param(with("safety_identifier", 4)), "safety_identifier");
  EXPECT_EQ(refused_param(with("service_tier", 4)), "service_tier");
  EXPECT_EQ(refused_param(with("parallel_tool_calls", "yes")), "parallel_tool_calls");
}

TEST(ResponsesJsonTest, TheBoundsOfTheNumbersAreInclusive) {
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, json>>{{"temperature", 0},
                                                 {"temperature", engine::kMaxTemperature},
                                                 {"top_p", 0},
                                                 {"top_p", 1},
                                                 {"max_output_tokens", 1},
                                                 {"max_output_tokens", UINT32_MAX}}) {
    Result<ResponsesRequest> parsed = parse_responses(with(name, value));
    EXPECT_TRUE(parsed.ok()) << name << " " << value.dump() << ": " << parsed.status().to_string();
  }
  Result<ResponsesRequest> largest = parse_responses(with("max_output_tokens", UINT32_MAX));
  ASSERT_TRUE(largest.ok());
  EXPECT_EQ(largest->max_output_tokens, UINT32_MAX);
}

TEST(ResponsesJsonTest, BadInputIsRefusedByItsPath) {
  json no_input = minimal();
  no_input.erase("input");
  EXPECT_EQ(refused_param(no_input), "input");
  EXPECT_EQ(refused_param(with("input", "")), "input");
  EXPECT_EQ(refused_param(with("input", json::array())), "input");
  EXPECT_EQ(refused_param(with("input", 4)), "input");
  EXPECT_EQ(refused_param(with("input", {{"role", "user"}, {"content", "x"}})), "input")
      << "a message outside an array";
  const json ok = {{"role", "user"}, {"content", "x"}};
  auto second = [&](const json& item) { return with("input", json::array({ok, item})); };
  EXPECT_EQ(refused_param(second("x")), "input[1]");
  EXPECT_EQ(refused_param(second(
                {{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{}"}})),
            "input[1].type");
  EXPECT_EQ(refused_param(second({{"type", "function_call_output"}, {"output", "x"}})),
            "input[1].type");
  EXPECT_EQ(refused_param(second({{"type", "reasoning"}, {"summary", json::array()}})),
            "input[1].type");
  EXPECT_EQ(refused_param(second({{"role", "user"}, {"content", "x"}, {"name", "bob"}})),
            "input[1].name");
  EXPECT_EQ(refused_param(second({{"content", "x"}})), "input[1].role");
  EXPECT_EQ(refused_param(second({{"role", "tool"}, {"content", "x"}})), "input[1].role");
  EXPECT_EQ(refused_param(second({{"role", "User"}, {"content", "x"}})), "input[1].role");
  EXPECT_EQ(refused_param(second({{"role", 1}, {"content", "x"}})), "input[1].role");
  EXPECT_EQ(refused_param(second({{"role", "user"}})), "input[1].content");
  EXPECT_EQ(refused_param(second({{"role", "user"}, {"content", 4}})), "input[1].content");
  auto part = [&](const json& content_part) {
    return second(
        {{"role", "user"},
         {"content", json::array({{{"type", "input_text"}, {"text", "a"}}, content_part})}});
  };
  EXPECT_EQ(refused_param(part("x")), "input[1].content[1]");
  EXPECT_EQ(refused_param(part({{"type", "input_image"}, {"image_url", "https://x/y.png"}})),
            "input[1].content[1].type");
  EXPECT_EQ(refused_param(part({{"type", "input_file"}, {"file_id", "file-1"}})),
            "input[1].content[1].type");
  EXPECT_EQ(refused_param(part({{"text", "no type"}})), "input[1].content[1].type");
  EXPECT_EQ(refused_param(part({{"type", "input_text"}})), "input[1].content[1].text");
  EXPECT_EQ(refused_param(part({{"type", "input_text"}, {"text", 4}})), "input[1].content[1].text");
}

TEST(ResponsesJsonTest, ABodyThatIsNotAJsonObjectIsRefused) {
  for (const std::string& body :
       {std::string(R"({"input": "x", )"), std::string("[1, 2]"), std::string("\"input\""),
        std::string(""), std::string(R"({"input": "x"})") + std::string(1, '\0')}) {
    ErrorDetail detail;
    Result<ResponsesRequest> parsed = parse_responses_request(body, &detail);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << body;
  }
}

// A stored response of a conversation of two turns.
StoredResponse stored() {
  return {{{ChatRole::kUser, "What is a siesta?"}, {ChatRole::kAssistant, "A nap."}},
          engine::session_key_of("conv_stored"),
          "{}"};
}

TEST(ResponsesJsonTest, TheEngineRequestRendersInstructionsThenTheInput) {
  json body = with("input", json::array({{{"role", "user"}, {"content", "Hi"}}}));
  body["instructions"] = "Be brief.";
  body["temperature"] = 0.75;
  body["top_p"] = 0.5;
  body["max_output_tokens"] = 9;
  Result<ResponsesRequest> asked = parse_responses(body);
  ASSERT_TRUE(asked.ok()) << asked.status().to_string();
  const engine::SessionKey fresh = engine::session_key_of("conv_fresh");
  Result<engine::GenerateRequest> request =
      responses_generate_request(*asked, nullptr, kResponsesModel, fresh, nullptr);
  ASSERT_TRUE(request.ok()) << request.status().to_string();
  EXPECT_EQ(request->prompt,
            render_chat_prompt({{ChatRole::kSystem, "Be brief."}, {ChatRole::kUser, "Hi"}}));
  EXPECT_EQ(request->max_tokens, 9u);
  EXPECT_FLOAT_EQ(request->temperature, 0.75f);
  EXPECT_FLOAT_EQ(request->top_p, 0.5f);
  EXPECT_EQ(request->route.key, std::optional<engine::SessionKey>(fresh)) << "a new chain's own";
  EXPECT_FALSE(request->route.slot.has_value());
}

TEST(ResponsesJsonTest, AContinuedResponseRendersThePreviousConversationInItsConversation) {
  json body = with("input", "How long?");
  body["previous_response_id"] = "resp_x";
  body["instructions"] = "Be brief.";
  Result<ResponsesRequest> asked = parse_responses(body);
  ASSERT_TRUE(asked.ok()) << asked.status().to_string();
  const StoredResponse previous = stored();
  Result<engine::GenerateRequest> request = responses_generate_request(
      *asked, &previous, kResponsesModel, engine::session_key_of("conv_fresh"), nullptr);
  ASSERT_TRUE(request.ok()) << request.status().to_string();
  EXPECT_EQ(request->prompt, render_chat_prompt({{ChatRole::kSystem, "Be brief."},
                                                 {ChatRole::kUser, "What is a siesta?"},
                                                 {ChatRole::kAssistant, "A nap."},
                                                 {ChatRole::kUser, "How long?"}}));
  EXPECT_EQ(request->route.key, std::optional<engine::SessionKey>(previous.key))
      << "the previous response's conversation, not a fresh one";

  // The conversation kept for the next turn: the previous one, the input and the answer;
  // instructions are not carried over (as OpenAI).
  EXPECT_EQ(describe(responses_conversation(*asked, &previous, "About an hour.")),
            (std::vector<std::string>{"user: What is a siesta?", "assistant: A nap.",
                                      "user: How long?", "assistant: About an hour."}));
  EXPECT_EQ(describe(responses_conversation(*asked, nullptr, "Yes.")),
            (std::vector<std::string>{"user: How long?", "assistant: Yes."}));

  // The next turn without instructions renders none.
  json next = with("input", "And then?");
  next["previous_response_id"] = "resp_y";
  Result<ResponsesRequest> plain = parse_responses(next);
  ASSERT_TRUE(plain.ok());
  StoredResponse kept = previous;
  kept.messages = responses_conversation(*asked, &previous, "About an hour.");
  Result<engine::GenerateRequest> third =
      responses_generate_request(*plain, &kept, kResponsesModel, std::nullopt, nullptr);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_THAT(third->prompt, ::testing::Not(HasSubstr("Be brief.")));
  EXPECT_THAT(third->prompt, ::testing::StartsWith("<|user|>\nWhat is a siesta?\n"));
}

TEST(ResponsesJsonTest, TheRouteIsTheCacheKeyOrTheFreshKeyOrThePrompt) {
  Result<ResponsesRequest> keyed = parse_responses(with("prompt_cache_key", "tenant-42"));
  ASSERT_TRUE(keyed.ok());
  Result<engine::GenerateRequest> by_key = responses_generate_request(
      *keyed, nullptr, kResponsesModel, engine::session_key_of("conv_fresh"), nullptr);
  ASSERT_TRUE(by_key.ok());
  EXPECT_EQ(by_key->route.key,
            std::optional<engine::SessionKey>(engine::session_key_of("tenant-42")));

  Result<ResponsesRequest> plain = parse_responses(minimal());
  ASSERT_TRUE(plain.ok());
  Result<engine::GenerateRequest> by_prompt =
      responses_generate_request(*plain, nullptr, kResponsesModel, std::nullopt, nullptr);
  ASSERT_TRUE(by_prompt.ok());
  EXPECT_FALSE(by_prompt->route.key.has_value()) << "routed by its prompt, as chat is";
  EXPECT_FALSE(by_prompt->route.slot.has_value());
}

TEST(ResponsesJsonTest, TopPZeroKeepsOnlyTheMostProbableToken) {
  Result<ResponsesRequest> asked = parse_responses(with("top_p", 0));
  ASSERT_TRUE(asked.ok());
  Result<engine::GenerateRequest> request =
      responses_generate_request(*asked, nullptr, kResponsesModel, std::nullopt, nullptr);
  ASSERT_TRUE(request.ok());
  EXPECT_GT(request->top_p, 0.0f) << "the sampler's top_p is in (0, 1]";
  EXPECT_EQ(request->top_p, std::numeric_limits<float>::min());
}

TEST(ResponsesJsonTest, TheLengthIsMaxOutputTokensOrTheServersDefaultWithinTheContext) {
  Result<ResponsesRequest> plain = parse_responses(minimal());
  ASSERT_TRUE(plain.ok());
  const size_t prompt = render_chat_prompt({{ChatRole::kUser, "Hello"}}).size();
  // --n-predict -1: until the context is full (the engine's 0).
  Result<engine::GenerateRequest> unbounded =
      responses_generate_request(*plain, nullptr, kResponsesModel, std::nullopt, nullptr);
  ASSERT_TRUE(unbounded.ok());
  EXPECT_EQ(unbounded->max_tokens, 0u);
  // --n-predict 16.
  Result<engine::GenerateRequest> sixteen =
      responses_generate_request(*plain, nullptr, kResponsesSixteen, std::nullopt, nullptr);
  ASSERT_TRUE(sixteen.ok());
  EXPECT_EQ(sixteen->max_tokens, 16u);
  // --n-predict 16 where the context leaves 5: 5.
  const ServedModel tight{
      .name = "m", .context = static_cast<uint32_t>(prompt + 5), .n_predict = 16};
  Result<engine::GenerateRequest> five =
      responses_generate_request(*plain, nullptr, tight, std::nullopt, nullptr);
  ASSERT_TRUE(five.ok()) << five.status().to_string();
  EXPECT_EQ(five->max_tokens, 5u);

  // max_output_tokens up to what the context leaves, exactly.
  const uint32_t left = static_cast<uint32_t>(kResponsesModel.context - prompt);
  Result<ResponsesRequest> fits = parse_responses(with("max_output_tokens", left));
  ASSERT_TRUE(fits.ok());
  Result<engine::GenerateRequest> full =
      responses_generate_request(*fits, nullptr, kResponsesModel, std::nullopt, nullptr);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ(full->max_tokens, left);
  Result<ResponsesRequest> beyond = parse_responses(with("max_output_tokens", left + 1));
  ASSERT_TRUE(beyond.ok());
  ErrorDetail detail;
  Result<engine::GenerateRequest> refused =
      responses_generate_request(*beyond, nullptr, kResponsesModel, std::nullopt, &detail);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(detail.param, "input");
  EXPECT_EQ(detail.code, "context_length_exceeded");

  // A conversation that fills the context leaves no room for one token, whatever the default.
  const ServedModel full_context{
      .name = "m", .context = static_cast<uint32_t>(prompt), .n_predict = 16};
  ErrorDetail no_room;
  Result<engine::GenerateRequest> none =
      responses_generate_request(*plain, nullptr, full_context, std::nullopt, &no_room);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(no_room.code, "context_length_exceeded");
  // The previous response's conversation counts.
  StoredResponse long_history = stored();
  long_history.messages.push_back({ChatRole::kUser, std::string(300, 'x')});
  ErrorDetail history_detail;
  EXPECT_FALSE(responses_generate_request(*plain, &long_history, kResponsesModel, std::nullopt,
                                          &history_detail)
                   .ok());
  EXPECT_EQ(history_detail.code, "context_length_exceeded");
}

TEST(ResponsesJsonTest, IdsAreFreshHexOfTheirPrefix) {
  const std::string id = new_responses_id("resp_");
  EXPECT_THAT(id, ::testing::MatchesRegex("resp_[0-9a-f]{24}"));
  EXPECT_THAT(new_responses_id("msg_"), ::testing::MatchesRegex("msg_[0-9a-f]{24}"));
  EXPECT_NE(new_responses_id("resp_"), id);
}

const ResponsesMeta kMeta{"resp_0123456789abcdef01234567", "msg_89abcdef0123456789abcdef",
                          1767225600, "synthetic:tiny"};

engine::GenerateResult a_result(engine::FinishReason finish) {
  engine::GenerateResult result;
  result.text = "Hi there";
  result.prompt_tokens = 30;
  result.cached_tokens = 12;
  result.completion_tokens = 8;
  result.finish = finish;
  return result;
}

ResponsesRequest asked_with_everything() {
  json body = minimal();
  body["instructions"] = "Be brief.";
  body["max_output_tokens"] = 8;
  body["temperature"] = 0.5;
  body["top_p"] = 0.25;
  body["previous_response_id"] = "resp_previous";
  body["metadata"] = {{"tenant", "a"}};
  Result<ResponsesRequest> asked = parse_responses(body);
  EXPECT_TRUE(asked.ok()) << asked.status().to_string();
  return asked.ok() ? *asked : ResponsesRequest{};
}

TEST(ResponsesJsonTest, ACompletedResponseHasOpenAisShape) {
  const ResponsesRequest asked = asked_with_everything();
  const engine::GenerateResult result = a_result(engine::FinishReason::kStop);
  const json body = response_object_json(kMeta, asked, &result);
  EXPECT_EQ(body["id"], kMeta.id);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["created_at"], kMeta.created_at);
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["error"], nullptr);
  EXPECT_EQ(body["incomplete_details"], nullptr);
  EXPECT_EQ(body["model"], "synthetic:tiny");
  EXPECT_EQ(body["instructions"], "Be brief.");
  EXPECT_EQ(body["max_output_tokens"], 8);
  EXPECT_EQ(body["previous_response_id"], "resp_previous");
  EXPECT_EQ(body["store"], true);
  EXPECT_FLOAT_EQ(body["temperature"].get<float>(), 0.5f);
  EXPECT_FLOAT_EQ(body["top_p"].get<float>(), 0.25f);
  EXPECT_EQ(body["metadata"], json({{"tenant", "a"}}));
  EXPECT_EQ(body["tools"], json::array());
  EXPECT_EQ(body["tool_choice"], "auto");
  EXPECT_EQ(body["text"], json({{"format", {{"type", "text"}}}}));
  EXPECT_EQ(body["truncation"], "disabled");
  EXPECT_EQ(body["reasoning"], nullptr);
  EXPECT_EQ(body["output"],
            json::array({{{"type", "message"},
                          {"id", kMeta.message_id},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", json::array({{{"type", "output_text"},
                                                    {"text", "Hi there"},
                                                    {"annotations", json::array()}}})}}}));
  // OpenAI's input_tokens count the whole prompt, the cached ones among them.
  EXPECT_EQ(body["usage"], json({{"input_tokens", 30},
                                 {"input_tokens_details", {{"cached_tokens", 12}}},
                                 {"output_tokens", 8},
                                 {"output_tokens_details", {{"reasoning_tokens", 0}}},
                                 {"total_tokens", 38}}));
}

TEST(ResponsesJsonTest, AResponseEndedByItsLengthIsIncomplete) {
  Result<ResponsesRequest> asked = parse_responses(with("max_output_tokens", 8));
  ASSERT_TRUE(asked.ok());
  const engine::GenerateResult result = a_result(engine::FinishReason::kLength);
  const json body = response_object_json(kMeta, *asked, &result);
  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(body["output"][0]["status"], "incomplete");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Hi there");
  EXPECT_EQ(body["usage"]["output_tokens"], 8);
  // Fields not given are null; the defaults are echoed.
  EXPECT_EQ(body["instructions"], nullptr);
  EXPECT_EQ(body["previous_response_id"], nullptr);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["top_p"], 1);
  EXPECT_EQ(body["metadata"], json::object());
  Result<ResponsesRequest> unstored = parse_responses(with("store", false));
  ASSERT_TRUE(unstored.ok());
  const json not_kept = response_object_json(kMeta, *unstored, &result);
  EXPECT_EQ(not_kept["store"], false);
  EXPECT_EQ(not_kept["max_output_tokens"], nullptr);
}

TEST(ResponsesJsonTest, AResponseInProgressHasNoOutputNorUsage) {
  const json body = response_object_json(kMeta, asked_with_everything(), nullptr);
  EXPECT_EQ(body["id"], kMeta.id);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["status"], "in_progress");
  EXPECT_EQ(body["output"], json::array());
  EXPECT_EQ(body["usage"], nullptr);
  EXPECT_EQ(body["incomplete_details"], nullptr);
}

// One event of a stream: its name and its data.
struct Event {
  std::string name;
  json data;
};

// Splits a stream's text into its events; each must be exactly "event: <name>\ndata: <json>\n\n".
std::vector<Event> events_of(const std::string& stream) {
  std::vector<Event> events;
  size_t at = 0;
  while (at < stream.size()) {
    const size_t end = stream.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an event without its blank line: " << stream.substr(at);
      break;
    }
    const std::string block = stream.substr(at, end - at);
    at = end + 2;
    const size_t newline = block.find('\n');
    if (block.rfind("event: ", 0) != 0 || newline == std::string::npos ||
        block.compare(newline + 1, 6, "data: ") != 0 ||
        block.find('\n', newline + 1) != std::string::npos) {
      ADD_FAILURE() << "not one event line and one data line: " << block;
      continue;
    }
    Event event{block.substr(7, newline - 7),
                json::parse(block.substr(newline + 7), nullptr, false)};
    EXPECT_TRUE(event.data.is_object()) << block;
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<std::string> names_of(const std::vector<Event>& events) {
  std::vector<std::string> names;
  names.reserve(events.size());
  for (const Event& event : events) names.push_back(event.name);
  return names;
}

// The stream's text as the route sends it: the calls in order (the operands of one `+`
// expression would be evaluated in an unspecified order).
std::string in_order(const std::vector<std::function<std::string()>>& calls) {
  std::string out;
  for (const auto& call : calls) out += call();
  return out;
}

// Each event's data names its own type, and the sequence numbers count 0, 1, 2...
void expect_numbered(const std::vector<Event>& events) {
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data.value("type", ""), events[i].name) << i;
    EXPECT_EQ(events[i].data.value("sequence_number", int64_t{-1}), static_cast<int64_t>(i))
        << events[i].name;
  }
}

// OpenAI's order for one text message (the Responses API's streaming events).
const std::vector<std::string> kTwoDeltas = {
    "response.created",           "response.in_progress",
    "response.output_item.added", "response.content_part.added",
    "response.output_text.delta", "response.output_text.delta",
    "response.output_text.done",  "response.content_part.done",
    "response.output_item.done",  "response.completed"};

TEST(ResponsesJsonTest, TheStreamsEventsComeInOpenAisOrderNumberedFromZero) {
  const ResponsesRequest asked = asked_with_everything();
  const engine::GenerateResult result = a_result(engine::FinishReason::kStop);
  ResponsesStream stream(kMeta, asked);
  const std::string text =
      in_order({[&] { return stream.begin(); }, [&] { return stream.piece("Hi"); },
                [&] { return stream.piece(" there"); }, [&] { return stream.finish(result); }});
  EXPECT_THAT(text, ::testing::Not(HasSubstr("[DONE]")));
  const std::vector<Event> events = events_of(text);
  ASSERT_EQ(names_of(events), kTwoDeltas);
  expect_numbered(events);

  const json opening = response_object_json(kMeta, asked, nullptr);
  EXPECT_EQ(events[0].data["response"], opening);
  EXPECT_EQ(events[1].data["response"], opening);
  EXPECT_EQ(events[2].data["output_index"], 0);
  EXPECT_EQ(events[2].data["item"], json({{"type", "message"},
                                          {"id", kMeta.message_id},
                                          {"status", "in_progress"},
                                          {"role", "assistant"},
                                          {"content", json::array()}}));
  const json empty_part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  EXPECT_EQ(events[3].data["part"], empty_part);
  // Every event of the message names it and its place.
  for (size_t i = 3; i <= 7; ++i) {
    EXPECT_EQ(events[i].data["item_id"], kMeta.message_id) << events[i].name;
    EXPECT_EQ(events[i].data["output_index"], 0) << events[i].name;
    EXPECT_EQ(events[i].data["content_index"], 0) << events[i].name;
  }
  EXPECT_EQ(events[4].data["delta"], "Hi");
  EXPECT_EQ(events[5].data["delta"], " there");
  EXPECT_EQ(events[6].data["text"], "Hi there");

  // The last events repeat the whole response, as response_object_json() gives it (and GET).
  const json whole = response_object_json(kMeta, asked, &result);
  EXPECT_EQ(events[7].data["part"], whole["output"][0]["content"][0]);
  EXPECT_EQ(events[8].data["output_index"], 0);
  EXPECT_EQ(events[8].data["item"], whole["output"][0]);
  EXPECT_EQ(events[9].data["response"], whole);
  EXPECT_EQ(events[9].data["response"]["status"], "completed");
}

TEST(ResponsesJsonTest, AStreamEndedByItsLengthEndsWithResponseIncomplete) {
  Result<ResponsesRequest> asked = parse_responses(with("max_output_tokens", 8));
  ASSERT_TRUE(asked.ok());
  const engine::GenerateResult result = a_result(engine::FinishReason::kLength);
  ResponsesStream stream(kMeta, *asked);
  const std::vector<Event> events =
      events_of(in_order({[&] { return stream.begin(); }, [&] { return stream.piece("Hi there"); },
                          [&] { return stream.finish(result); }}));
  std::vector<std::string> want = kTwoDeltas;
  want.erase(want.begin() + 5);
  want.back() = "response.incomplete";
  ASSERT_EQ(names_of(events), want);
  expect_numbered(events);
  EXPECT_EQ(events.back().data["response"]["status"], "incomplete");
  EXPECT_EQ(events.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(events.back().data["response"], response_object_json(kMeta, *asked, &result));
}

TEST(ResponsesJsonTest, AStreamWithoutPiecesStillHasItsWholeSequence) {
  Result<ResponsesRequest> asked = parse_responses(minimal());
  ASSERT_TRUE(asked.ok());
  engine::GenerateResult result = a_result(engine::FinishReason::kStop);
  result.text.clear();
  result.completion_tokens = 0;
  ResponsesStream stream(kMeta, *asked);
  const std::vector<Event> events =
      events_of(in_order({[&] { return stream.begin(); }, [&] { return stream.finish(result); }}));
  std::vector<std::string> want = kTwoDeltas;
  want.erase(want.begin() + 4, want.begin() + 6);
  ASSERT_EQ(names_of(events), want);
  expect_numbered(events);
  EXPECT_EQ(events[4].data["text"], "");
}

TEST(ResponsesJsonTest, AnErrorAfterTheStreamBeganIsTheNextNumberedEvent) {
  Result<ResponsesRequest> asked = parse_responses(minimal());
  ASSERT_TRUE(asked.ok());
  ResponsesStream stream(kMeta, *asked);
  ApiError error;
  error.http_status = 503;
  error.message = "the server is shutting down";
  error.code = "cancelled";
  const std::vector<Event> events =
      events_of(in_order({[&] { return stream.begin(); }, [&] { return stream.piece("Hi"); },
                          [&] { return stream.error(error); }}));
  ASSERT_EQ(events.size(), 6u);
  expect_numbered(events);
  EXPECT_EQ(events.back().name, "error");
  EXPECT_EQ(events.back().data["code"], "cancelled");
  EXPECT_EQ(events.back().data["message"], "the server is shutting down");
  EXPECT_EQ(events.back().data["param"], nullptr);
}

}  // namespace
}  // namespace siesta::server
