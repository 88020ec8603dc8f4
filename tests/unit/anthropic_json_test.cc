// Anthropic's Messages API as pure functions (server/anthropic_json.h): requests read field by
// field, every unserved field or block refused by name, the answer and the stream's events in
// Anthropic's shapes, the error object.
#include "server/anthropic_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_template.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const ServedModel kAnthropicModel{.name = "synthetic:tiny", .context = 256};

json minimal() {
  return {{"model", "claude-anything"},
          {"max_tokens", 8},
          {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})}};
}

Result<ParsedMessages> parse(const json& body, ErrorDetail* detail = nullptr) {
  return parse_messages_request(body.dump(), kAnthropicModel, detail);
}

// The param a refused body names.
std::string refused_param(const json& body) {
  ErrorDetail detail;
  Result<ParsedMessages> parsed = parse(body, &detail);
  EXPECT_FALSE(parsed.ok()) << body.dump();
  if (!parsed.ok()) {
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << body.dump();
  }
  return detail.param;
}

TEST(AnthropicJsonTest, AMinimalRequestIsTheChatPromptWithAnthropicsDefaults) {
  Result<ParsedMessages> parsed = parse(minimal());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt, render_chat_prompt({{ChatRole::kUser, "Hello"}}));
  EXPECT_EQ(parsed->request.max_tokens, 8u);
  EXPECT_FLOAT_EQ(parsed->request.temperature, 1.0f) << "Anthropic's default temperature";
  EXPECT_FALSE(parsed->stream);
}

TEST(AnthropicJsonTest, EveryServedFieldIsRead) {
  json body = minimal();
  body["system"] = json::array({{{"type", "text"}, {"text", "Be brief."}}});
  body["messages"] = json::array(
      {{{"role", "user"}, {"content", "Hi"}},
       {{"role", "assistant"}, {"content", json::array({{{"type", "text"}, {"text", "Yo"}}})}},
       {{"role", "user"}, {"content", "More"}}});
  body["temperature"] = 0.25;
  body["top_p"] = 0.5;
  body["top_k"] = 7;
  body["stop_sequences"] = json::array({"\n", "END"});
  body["stream"] = true;
  body["metadata"] = {{"user_id", "u-1"}};
  Result<ParsedMessages> parsed = parse(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt, render_chat_prompt({{ChatRole::kSystem, "Be brief."},
                                                        {ChatRole::kUser, "Hi"},
                                                        {ChatRole::kAssistant, "Yo"},
                                                        {ChatRole::kUser, "More"}}));
  EXPECT_FLOAT_EQ(parsed->request.temperature, 0.25f);
  EXPECT_FLOAT_EQ(parsed->request.top_p, 0.5f);
  EXPECT_EQ(parsed->request.top_k, 7u);
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(parsed->stream);
}

TEST(AnthropicJsonTest, UnservedFieldsAndBlocksAreRefusedByName) {
  json tools = minimal();
  tools["tools"] = json::array();
  EXPECT_EQ(refused_param(tools), "tools");
  json thinking = minimal();
  thinking["thinking"] = {{"type", "enabled"}};
  EXPECT_EQ(refused_param(thinking), "thinking");
  json image = minimal();
  image["messages"][0]["content"] =
      json::array({{{"type", "text"}, {"text", "see"}}, {{"type", "image"}, {"source", {}}}});
  EXPECT_EQ(refused_param(image), "messages[0].content[1].type");
  json metadata = minimal();
  metadata["metadata"] = {{"tenant", "x"}};
  EXPECT_EQ(refused_param(metadata), "metadata.tenant");
}

TEST(AnthropicJsonTest, BadValuesAreRefusedByName) {
  auto with = [](const char* name, const json& value) {
    json body = minimal();
    body[name] = value;
    return body;
  };
  json no_model = minimal();
  no_model.erase("model");
  EXPECT_EQ(refused_param(no_model), "model");
  json no_max = minimal();
  no_max.erase("max_tokens");
  EXPECT_EQ(refused_param(no_max), "max_tokens");
  EXPECT_EQ(refused_param(with("max_tokens", 0)), "max_tokens");
  EXPECT_EQ(refused_param(with("max_tokens", -3)), "max_tokens");
  EXPECT_EQ(refused_param(with("max_tokens", "8")), "max_tokens");
  EXPECT_EQ(refused_param(with("temperature", 1.5)), "temperature") << "Anthropic's range is 0..1";
  EXPECT_EQ(refused_param(with("top_p", 0)), "top_p");
  EXPECT_EQ(refused_param(with("top_p", 1.01)), "top_p");
  EXPECT_EQ(refused_param(with("top_k", 0)), "top_k");
  EXPECT_EQ(refused_param(with("stop_sequences", json::array({""}))), "stop_sequences[0]");
  EXPECT_EQ(refused_param(with("stream", "yes")), "stream");
  EXPECT_EQ(refused_param(with("messages", json::array())), "messages");
  EXPECT_EQ(refused_param(with("messages", json::array({{{"role", "system"}, {"content", "x"}}}))),
            "messages[0].role");
  // The prompt and max_tokens beyond the context.
  EXPECT_EQ(refused_param(with("max_tokens", 10000)), "max_tokens");
}

// Each field of the wrong JSON type, each message's shape, each part of the content: refused
// naming the field, never read as something else.
TEST(AnthropicJsonTest, WrongTypesAndShapesAreRefusedByName) {
  auto with = [](const char* name, const json& value) {
    json body = minimal();
    body[name] = value;
    return body;
  };
  auto message = [](const json& one) {
    json body = minimal();
    body["messages"] = json::array({one});
    return body;
  };
  EXPECT_EQ(refused_param(with("model", 7)), "model");
  EXPECT_EQ(refused_param(with("messages", "Hello")), "messages");
  EXPECT_EQ(refused_param(with("messages", json::object())), "messages");
  EXPECT_EQ(refused_param(message("Hello")), "messages[0]");
  EXPECT_EQ(refused_param(message({{"content", "Hello"}})), "messages[0].role");
  EXPECT_EQ(refused_param(message({{"role", 3}, {"content", "Hello"}})), "messages[0].role");
  EXPECT_EQ(refused_param(message({{"role", "user"}})), "messages[0].content");
  EXPECT_EQ(refused_param(message({{"role", "user"}, {"content", 5}})), "messages[0].content");
  EXPECT_EQ(refused_param(message({{"role", "user"}, {"content", json::array({"Hello"})}})),
            "messages[0].content[0]");
  EXPECT_EQ(
      refused_param(message({{"role", "user"}, {"content", json::array({{{"type", "image"}}})}})),
      "messages[0].content[0].type");
  EXPECT_EQ(refused_param(message(
                {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", 1}}})}})),
            "messages[0].content[0].text");
  EXPECT_EQ(refused_param(with("top_k", 1.5)), "top_k");
  EXPECT_EQ(refused_param(with("top_k", -2)), "top_k");
  EXPECT_EQ(refused_param(with("metadata", "user-1")), "metadata");
  EXPECT_EQ(refused_param(with("metadata", json{{"user_id", 12}})), "metadata.user_id");
  EXPECT_EQ(refused_param(with("system", 12)), "system");
  EXPECT_EQ(refused_param(with("temperature", "hot")), "temperature");
  // A body that is no object at all names no field.
  ErrorDetail detail;
  detail.param = "stale";
  Result<ParsedMessages> parsed = parse_messages_request("[1, 2]", kAnthropicModel, &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(detail.param, "");
  EXPECT_FALSE(parse_messages_request("{", kAnthropicModel, nullptr).ok());
}

TEST(AnthropicJsonTest, CountTokensIsThePromptsLength) {
  json body = minimal();
  body.erase("max_tokens");  // count_tokens takes none
  Result<uint64_t> tokens = count_message_tokens(body.dump(), nullptr);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, render_chat_prompt({{ChatRole::kUser, "Hello"}}).size());
}

engine::GenerateResult a_result() {
  engine::GenerateResult result;
  result.text = "Hi there";
  result.prompt_tokens = 30;
  result.cached_tokens = 12;
  result.completion_tokens = 8;
  result.finish = engine::FinishReason::kLength;
  return result;
}

TEST(AnthropicJsonTest, TheMessageHasAnthropicsShapeAndUsage) {
  const json message = message_json("msg_1", "m", a_result());
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["model"], "m");
  EXPECT_EQ(message["content"], json::array({{{"type", "text"}, {"text", "Hi there"}}}));
  EXPECT_EQ(message["stop_reason"], "max_tokens");
  EXPECT_EQ(message["usage"]["input_tokens"], 18) << "the prompt tokens read, not reused";
  EXPECT_EQ(message["usage"]["cache_read_input_tokens"], 12);
  EXPECT_EQ(message["usage"]["output_tokens"], 8);
  EXPECT_THAT(new_message_id(), ::testing::MatchesRegex("msg_[0-9a-f]{24}"));
  EXPECT_NE(new_message_id(), new_message_id());
}

// Every event of a stream, in Anthropic's order: "event: <type>" naming the data's own type.
TEST(AnthropicJsonTest, TheStreamsEventsComeInAnthropicsOrder) {
  const std::string stream = anthropic_stream_begin("msg_1", "m", 30) +
                             anthropic_stream_piece("Hi") + anthropic_stream_piece(" there") +
                             anthropic_stream_end(a_result());
  std::vector<std::string> types;
  size_t at = 0;
  while ((at = stream.find("event: ", at)) != std::string::npos) {
    const size_t end = stream.find('\n', at);
    const std::string type = stream.substr(at + 7, end - at - 7);
    const size_t data = stream.find("data: ", end);
    const json body = json::parse(stream.substr(data + 6, stream.find("\n\n", data) - data - 6));
    EXPECT_EQ(body["type"], type);
    types.push_back(type);
    at = end;
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_THAT(stream, HasSubstr(R"("delta":{"text":" there","type":"text_delta"})"));
  EXPECT_THAT(stream, HasSubstr(R"("stop_reason":"max_tokens")"));
}

TEST(AnthropicJsonTest, AStoppedMessageNamesItsStopSequence) {
  engine::GenerateResult result = a_result();
  result.finish = engine::FinishReason::kStop;
  result.text = "Hi";
  const std::string tokens = "HiEND";
  result.tokens.assign(tokens.begin(), tokens.end());
  const json message = message_json("msg_1", "m", result);
  EXPECT_EQ(message["stop_reason"], "stop_sequence");
  EXPECT_EQ(message["stop_sequence"], "END");
  EXPECT_THAT(anthropic_stream_end(result), HasSubstr(R"("stop_sequence":"END")"));
  EXPECT_EQ(message_json("msg_1", "m", a_result())["stop_sequence"], nullptr);
}

TEST(AnthropicJsonTest, ErrorsTakeAnthropicsShapeAndTypes) {
  ApiError error;
  error.message = "bad";
  for (const auto& [status, type] :
       std::vector<std::pair<int, std::string>>{{400, "invalid_request_error"},
                                                {401, "authentication_error"},
                                                {404, "not_found_error"},
                                                {415, "invalid_request_error"},
                                                {503, "overloaded_error"},
                                                {500, "api_error"}}) {
    error.http_status = status;
    const json body = anthropic_error_json(error);
    EXPECT_EQ(body["type"], "error");
    EXPECT_EQ(body["error"]["type"], type) << status;
    EXPECT_EQ(body["error"]["message"], "bad");
  }
}

}  // namespace
}  // namespace siesta::server
