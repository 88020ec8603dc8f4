// OpenAI request bodies -> engine requests (every field, every refusal naming its param), and
// engine results -> OpenAI response bodies and stream chunks.
#include "server/openai_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/sampler.h"
#include "server/chat_template.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const ServedModel kModel{"synthetic:tiny", 256};

Result<ParsedGeneration> completion(const json& body, ErrorDetail* detail = nullptr) {
  return parse_completion_request(body.dump(), kModel, detail);
}
Result<ParsedGeneration> chat(const json& body, ErrorDetail* detail = nullptr) {
  return parse_chat_request(body.dump(), kModel, detail);
}

// Expects InvalidArgument naming `param` (in the detail and at the start of the message).
void expect_bad(const Result<ParsedGeneration>& result, const ErrorDetail& detail,
                const std::string& param) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status().to_string();
  EXPECT_EQ(detail.param, param) << result.status().to_string();
  if (!param.empty()) {
    EXPECT_THAT(result.status().message(), HasSubstr(param));
  }
}

// nlohmann's parser stops at a NUL byte; the bytes after it must not be ignored.
TEST(OpenAiJsonTest, ABodyWithANulIsNotJson) {
  const std::string body = std::string(R"({"prompt": "x"})") + std::string(1, '\0') + "junk";
  for (bool is_chat : {false, true}) {
    ErrorDetail detail;
    Result<ParsedGeneration> parsed = is_chat ? parse_chat_request(body, kModel, &detail)
                                              : parse_completion_request(body, kModel, &detail);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("a NUL byte at offset 15"));
  }
}

TEST(OpenAiJsonTest, ModelObject) {
  EXPECT_EQ(
      model_json("synthetic:tiny", 7),
      json(
          {{"id", "synthetic:tiny"}, {"object", "model"}, {"created", 7}, {"owned_by", "siesta"}}));
  EXPECT_EQ(models_json("synthetic:tiny", 7)["data"][0], model_json("synthetic:tiny", 7));
}

TEST(OpenAiJsonTest, CompletionDefaults) {
  Result<ParsedGeneration> parsed = completion({{"prompt", "Hello"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt, "Hello");
  EXPECT_EQ(parsed->request.max_tokens, kDefaultMaxTokens);
  EXPECT_TRUE(parsed->request.stop.empty());
  EXPECT_EQ(parsed->request.temperature, 0.0f);
  EXPECT_FALSE(parsed->stream);
  EXPECT_FALSE(parsed->include_usage);
}

// The temperature's bounds are inclusive: 0 and the maximum are accepted (guards a bound off
// by one that refuses the largest allowed temperature).
TEST(OpenAiJsonTest, TemperatureAtItsBoundsIsAccepted) {
  for (double t : {0.0, static_cast<double>(engine::kMaxTemperature)}) {
    Result<ParsedGeneration> parsed = completion({{"prompt", "x"}, {"temperature", t}});
    ASSERT_TRUE(parsed.ok()) << t << ": " << parsed.status().to_string();
    EXPECT_EQ(parsed->request.temperature, static_cast<float>(t));
  }
}

TEST(OpenAiJsonTest, CompletionEveryField) {
  Result<ParsedGeneration> parsed = completion({{"model", "synthetic:tiny"},
                                                {"prompt", json::array({"Hi"})},
                                                {"max_tokens", 7},
                                                {"stop", json::array({"a", "bc"})},
                                                {"temperature", 0.5},
                                                {"seed", -1},
                                                {"n", 1},
                                                {"stream", true},
                                                {"stream_options", {{"include_usage", true}}},
                                                {"top_p", 0.9},
                                                {"user", "ignored"},
                                                {"logprobs", nullptr}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt, "Hi");
  EXPECT_EQ(parsed->request.max_tokens, 7u);
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_FLOAT_EQ(parsed->request.temperature, 0.5f);
  EXPECT_EQ(parsed->request.seed, ~uint64_t{0});
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);
}

TEST(OpenAiJsonTest, StopMayBeOneStringAndNullsMeanAbsent) {
  Result<ParsedGeneration> parsed =
      completion({{"prompt", "x"}, {"stop", "\n"}, {"max_tokens", nullptr}, {"model", nullptr}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(parsed->request.max_tokens, kDefaultMaxTokens);
}

TEST(OpenAiJsonTest, BadJsonAndNonObjects) {
  for (std::string body : {"", "{", "{\"prompt\": \"x\",}", "[1]", "\"x\"", "null",
                           "{\"prompt\": \"\xff\"}", "{\"prompt\": \"\\udc00\"}"}) {
    ErrorDetail detail;
    Result<ParsedGeneration> parsed = parse_completion_request(body, kModel, &detail);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("request body"));
    EXPECT_EQ(detail.param, "");
    EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos);
  }
}

TEST(OpenAiJsonTest, CompletionRefusalsNameTheirField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "prompt"},
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", ""}}, "prompt"},
      {{{"prompt", json::array()}}, "prompt"},
      {{{"prompt", json::array({"a", "b"})}}, "prompt"},
      {{{"prompt", json::array({1, 2})}}, "prompt"},
      {{{"prompt", "x"}, {"max_tokens", "8"}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", 8.5}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", -3}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", 10000000000}}, "max_tokens"},
      {{{"prompt", "x"}, {"stop", 3}}, "stop"},
      {{{"prompt", "x"}, {"stop", ""}}, "stop"},
      {{{"prompt", "x"}, {"stop", json::array({"a", 1})}}, "stop[1]"},
      {{{"prompt", "x"}, {"stop", json::array({"a", std::string(65, 'x')})}}, "stop[1]"},
      {{{"prompt", "x"}, {"stop", json::array({"a", "b", "c", "d", "e"})}}, "stop"},
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "x"}, {"temperature", -0.1}}, "temperature"},
      {{{"prompt", "x"}, {"temperature", 2.5}}, "temperature"},
      {{{"prompt", "x"}, {"seed", 1.5}}, "seed"},
      {{{"prompt", "x"}, {"n", 2}}, "n"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream"},
      {{{"prompt", "x"}, {"stream_options", true}}, "stream_options"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", 1}}}},
       "stream_options.include_usage"},
      {{{"prompt", "x"}, {"model", 3}}, "model"},
  };
  for (const auto& [body, param] : cases) {
    ErrorDetail detail;
    Result<ParsedGeneration> parsed = completion(body, &detail);
    SCOPED_TRACE(body.dump());
    expect_bad(parsed, detail, param);
  }
}

TEST(OpenAiJsonTest, AnotherModelIsNotFound) {
  ErrorDetail detail;
  Result<ParsedGeneration> parsed = completion({{"prompt", "x"}, {"model", "gpt-4"}}, &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(detail.param, "model");
  EXPECT_EQ(detail.code, "model_not_found");
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"gpt-4\""));
}

TEST(OpenAiJsonTest, ContextExceededUsesOpenAisMessage) {
  ErrorDetail detail;
  Result<ParsedGeneration> parsed =
      completion({{"prompt", std::string(250, 'a')}, {"max_tokens", 10}}, &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(detail.code, "context_length_exceeded");
  EXPECT_EQ(detail.param, "prompt");
  EXPECT_EQ(parsed.status().message(),
            "This model's maximum context length is 256 tokens. However, you requested 260 "
            "tokens (250 in the prompt, 10 in the completion). Please reduce the length of "
            "the prompt or completion.");
  // Exactly full is fine.
  EXPECT_TRUE(completion({{"prompt", std::string(250, 'a')}, {"max_tokens", 6}}).ok());
}

TEST(OpenAiJsonTest, DefaultMaxTokensShrinksToWhatTheContextLeaves) {
  Result<ParsedGeneration> parsed = completion({{"prompt", std::string(250, 'a')}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.max_tokens, 6u);
  ErrorDetail detail;
  expect_bad(completion({{"prompt", std::string(256, 'a')}}, &detail), detail, "prompt");
  EXPECT_EQ(detail.code, "context_length_exceeded");
}

TEST(OpenAiJsonTest, ChatRendersTheTemplate) {
  Result<ParsedGeneration> parsed = chat(
      {{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                 {{"role", "user"},
                                  {"content", json::array({{{"type", "text"}, {"text", "Hi"}},
                                                           {{"type", "text"}, {"text", "!"}}})}},
                                 {{"role", "assistant"}, {"content", "Hello"}},
                                 {{"role", "user"}, {"content", "More"}, {"name", "bob"}}})},
       {"max_completion_tokens", 9}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt,
            "<|system|>\nBe brief.\n<|user|>\nHi!\n<|assistant|>\nHello\n<|user|>\nMore\n"
            "<|assistant|>\n");
  EXPECT_EQ(parsed->request.max_tokens, 9u);
}

TEST(OpenAiJsonTest, ChatMaxTokensAliasesMustAgree) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_TRUE(chat({{"messages", messages}, {"max_tokens", 5}, {"max_completion_tokens", 5}}).ok());
  ErrorDetail detail;
  expect_bad(
      chat({{"messages", messages}, {"max_tokens", 5}, {"max_completion_tokens", 6}}, &detail),
      detail, "max_completion_tokens");
}

TEST(OpenAiJsonTest, ChatRefusalsNameTheirField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "messages"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", json::array({"hi"})}}, "messages[0]"},
      {{{"messages", json::array({{{"content", "hi"}}})}}, "messages[0].role"},
      {{{"messages", json::array({{{"role", 1}, {"content", "hi"}}})}}, "messages[0].role"},
      {{{"messages", json::array({{{"role", "user"}, {"content", "a"}},
                                  {{"role", "tool"}, {"content", "hi"}}})}},
       "messages[1].role"},
      {{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
      {{{"messages", json::array({{{"role", "user"}, {"content", 3}}})}}, "messages[0].content"},
      {{{"messages",
         json::array({{{"role", "user"},
                       {"content", json::array({{{"type", "image_url"}, {"image_url", "x"}}})}}})}},
       "messages[0].content[0].type"},
      {{{"messages",
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}})}},
       "messages[0].content[0].text"},
      {{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
        {"max_completion_tokens", "many"}},
       "max_completion_tokens"},
  };
  for (const auto& [body, param] : cases) {
    ErrorDetail detail;
    SCOPED_TRACE(body.dump());
    expect_bad(chat(body, &detail), detail, param);
  }
}

TEST(OpenAiJsonTest, UnknownRoleIsQuoted) {
  ErrorDetail detail;
  Result<ParsedGeneration> parsed =
      chat({{"messages", json::array({{{"role", "wizard\n"}, {"content", "x"}}})}}, &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"wizard\\n\""));
}

TEST(OpenAiJsonTest, ChatContextExceededNamesTheMessages) {
  ErrorDetail detail;
  Result<ParsedGeneration> parsed =
      chat({{"messages", json::array({{{"role", "user"}, {"content", std::string(240, 'x')}}})},
            {"max_tokens", 16}},
           &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(detail.param, "messages");
  EXPECT_EQ(detail.code, "context_length_exceeded");
  EXPECT_THAT(parsed.status().message(), HasSubstr("in the messages"));
}

engine::GenerateResult sample_result() {
  engine::GenerateResult result;
  result.text = "Hello";
  result.prompt_tokens = 10;
  result.cached_tokens = 4;
  result.completion_tokens = 6;
  result.finish = engine::FinishReason::kStop;
  return result;
}

TEST(OpenAiJsonTest, CompletionResponse) {
  const ResponseMeta meta{ApiKind::kCompletion, "cmpl-1", 1700000000, "synthetic:tiny"};
  const json body = response_json(meta, sample_result());
  EXPECT_EQ(body, json::parse(R"({
    "id": "cmpl-1", "object": "text_completion", "created": 1700000000,
    "model": "synthetic:tiny",
    "choices": [{"text": "Hello", "index": 0, "finish_reason": "stop", "logprobs": null}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16,
              "prompt_tokens_details": {"cached_tokens": 4}}})"));
}

TEST(OpenAiJsonTest, ChatResponse) {
  const ResponseMeta meta{ApiKind::kChat, "chatcmpl-1", 5, "m"};
  engine::GenerateResult result = sample_result();
  result.finish = engine::FinishReason::kLength;
  const json body = response_json(meta, result);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"],
            json::parse(R"({"role":"assistant","content":"Hello"})"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["total_tokens"], 16);
}

TEST(OpenAiJsonTest, CompletionChunks) {
  const ResponseMeta meta{ApiKind::kCompletion, "cmpl-2", 5, "m"};
  const json piece = text_chunk_json(meta, "He", true, false);
  EXPECT_EQ(piece["object"], "text_completion");
  EXPECT_EQ(piece["choices"][0]["text"], "He");
  EXPECT_TRUE(piece["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(piece.contains("usage"));
  const json last = finish_chunk_json(meta, engine::FinishReason::kLength, true);
  EXPECT_EQ(last["choices"][0]["text"], "");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["usage"].is_null());
  const json usage = usage_chunk_json(meta, sample_result());
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAiJsonTest, ChatChunks) {
  const ResponseMeta meta{ApiKind::kChat, "chatcmpl-2", 5, "m"};
  const json first = text_chunk_json(meta, "He", true, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":"He"})"));
  EXPECT_TRUE(first["usage"].is_null());
  const json next = text_chunk_json(meta, "llo", false, false);
  EXPECT_EQ(next["choices"][0]["delta"], json::parse(R"({"content":"llo"})"));
  const json last = finish_chunk_json(meta, engine::FinishReason::kStop, false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiJsonTest, SseFraming) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiJsonTest, Models) {
  EXPECT_EQ(models_json("synthetic:tiny", 42), json::parse(R"({"object":"list","data":[
    {"id":"synthetic:tiny","object":"model","created":42,"owned_by":"siesta"}]})"));
}

TEST(OpenAiJsonTest, ResponseIdsAreUniqueAndPrefixed) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(new_response_id(ApiKind::kCompletion));
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ(ids.begin()->rfind("cmpl-", 0), 0u);
  EXPECT_EQ(ids.begin()->size(), 5u + 24u);
  EXPECT_EQ(new_response_id(ApiKind::kChat).rfind("chatcmpl-", 0), 0u);
}

TEST(OpenAiJsonTest, FinishReasons) {
  EXPECT_EQ(openai_finish_reason(engine::FinishReason::kLength), "length");
  EXPECT_EQ(openai_finish_reason(engine::FinishReason::kStop), "stop");
  EXPECT_EQ(openai_finish_reason(engine::FinishReason::kCancelled), "stop");
}

}  // namespace
}  // namespace siesta::server

namespace siesta::server {
namespace {

const ServedModel kFourSessions{"synthetic:tiny", 256, 4};

TEST(OpenAiJsonTest, PromptCacheKeyIsHashedAndIdSlotRead) {
  Result<ParsedGeneration> parsed = parse_completion_request(
      json({{"prompt", "x"}, {"prompt_cache_key", "user-42"}, {"id_slot", 3}}).dump(),
      kFourSessions, nullptr);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  ASSERT_TRUE(parsed->request.route.key.has_value());
  EXPECT_EQ(*parsed->request.route.key, engine::session_key_of("user-42"));
  EXPECT_EQ(parsed->request.route.slot, 3u);
  // Absent, null and llama.cpp's -1 ("any slot") route by the prompt.
  for (const json& body :
       {json({{"prompt", "x"}}),
        json({{"prompt", "x"}, {"prompt_cache_key", nullptr}, {"id_slot", nullptr}}),
        json({{"prompt", "x"}, {"id_slot", -1}})}) {
    Result<ParsedGeneration> plain = parse_completion_request(body.dump(), kFourSessions, nullptr);
    ASSERT_TRUE(plain.ok()) << body.dump();
    EXPECT_FALSE(plain->request.route.key.has_value()) << body.dump();
    EXPECT_FALSE(plain->request.route.slot.has_value()) << body.dump();
  }
  // The chat endpoint reads both too.
  Result<ParsedGeneration> chatted =
      parse_chat_request(json({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                               {"prompt_cache_key", "k"}})
                             .dump(),
                         kFourSessions, nullptr);
  ASSERT_TRUE(chatted.ok());
  EXPECT_EQ(*chatted->request.route.key, engine::session_key_of("k"));
}

TEST(OpenAiJsonTest, BadRoutingFieldsAreRefusedNamingThem) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", "x"}, {"prompt_cache_key", 5}}, "prompt_cache_key"},
      {{{"prompt", "x"}, {"prompt_cache_key", json::array({"a"})}}, "prompt_cache_key"},
      {{{"prompt", "x"}, {"prompt_cache_key", ""}}, "prompt_cache_key"},
      {{{"prompt", "x"}, {"prompt_cache_key", std::string(257, 'k')}}, "prompt_cache_key"},
      {{{"prompt", "x"}, {"id_slot", "1"}}, "id_slot"},
      {{{"prompt", "x"}, {"id_slot", 1.5}}, "id_slot"},
      {{{"prompt", "x"}, {"id_slot", 4}}, "id_slot"},
      {{{"prompt", "x"}, {"id_slot", -2}}, "id_slot"},
      {{{"prompt", "x"}, {"id_slot", 18446744073709551615ull}}, "id_slot"},
  };
  for (const auto& [body, param] : cases) {
    ErrorDetail detail;
    Result<ParsedGeneration> parsed = parse_completion_request(body.dump(), kFourSessions, &detail);
    SCOPED_TRACE(body.dump());
    expect_bad(parsed, detail, param);
    // The key is never echoed.
    if (!parsed.ok()) {
      EXPECT_THAT(parsed.status().message(), ::testing::Not(HasSubstr("kkkk")));
    }
  }
  // 256 bytes is the longest key accepted.
  EXPECT_TRUE(parse_completion_request(
                  json({{"prompt", "x"}, {"prompt_cache_key", std::string(256, 'k')}}).dump(),
                  kFourSessions, nullptr)
                  .ok());
}

}  // namespace
}  // namespace siesta::server
