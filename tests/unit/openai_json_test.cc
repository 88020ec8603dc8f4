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

const ServedModel kModel{.name = "synthetic:tiny", .context = 256};
// A server started with --n-predict 16.
const ServedModel kSixteen{.name = "synthetic:tiny", .context = 256, .n_predict = 16};

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
  // --n-predict's default -1: until a stop string or the context is full (the engine's 0).
  EXPECT_EQ(parsed->request.max_tokens, 0u);
  EXPECT_FALSE(parsed->shown_logprobs);
  EXPECT_EQ(parsed->request.logprobs, 0u);
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
                                                {"top_k", 5},
                                                {"logit_bias", {{"65", -100}, {"0", 2.5}}},
                                                {"user", "ignored"},
                                                {"echo", false},
                                                {"best_of", 1},
                                                {"suffix", ""},
                                                {"presence_penalty", 0},
                                                {"frequency_penalty", 0.0},
                                                {"logprobs", nullptr}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.prompt, "Hi");
  EXPECT_EQ(parsed->request.max_tokens, 7u);
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_FLOAT_EQ(parsed->request.temperature, 0.5f);
  EXPECT_EQ(parsed->request.seed, ~uint64_t{0});
  EXPECT_FLOAT_EQ(parsed->request.top_p, 0.9f);
  EXPECT_EQ(parsed->request.top_k, 5u);
  EXPECT_EQ(parsed->request.logit_bias,
            (std::vector<std::pair<uint8_t, float>>{{0, 2.5f}, {65, -100.0f}}));
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);
}

TEST(OpenAiJsonTest, StopMayBeOneStringAndNullsMeanAbsent) {
  Result<ParsedGeneration> parsed =
      completion({{"prompt", "x"}, {"stop", "\n"}, {"max_tokens", nullptr}, {"model", nullptr}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(parsed->request.max_tokens, 0u);
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
      {{{"prompt", "x"}, {"top_p", 1.5}}, "top_p"},
      {{{"prompt", "x"}, {"top_p", "0.5"}}, "top_p"},
      {{{"prompt", "x"}, {"top_k", -1}}, "top_k"},
      {{{"prompt", "x"}, {"logit_bias", json::array()}}, "logit_bias"},
      {{{"prompt", "x"}, {"logit_bias", {{"256", 1}}}}, "logit_bias.256"},
      {{{"prompt", "x"}, {"logit_bias", {{"065", 1}}}}, "logit_bias.065"},
      {{{"prompt", "x"}, {"logit_bias", {{"a", 1}}}}, "logit_bias.a"},
      {{{"prompt", "x"}, {"logit_bias", {{"65", 101}}}}, "logit_bias.65"},
      {{{"prompt", "x"}, {"logit_bias", {{"65", "1"}}}}, "logit_bias.65"},
      {{{"prompt", "x"}, {"logprobs", 6}}, "logprobs"},
      {{{"prompt", "x"}, {"logprobs", true}}, "logprobs"},
      {{{"prompt", "x"}, {"logprobs", 2}, {"stream", true}}, "logprobs"},
      {{{"prompt", "x"}, {"echo", true}}, "echo"},
      {{{"prompt", "x"}, {"best_of", 2}}, "best_of"},
      {{{"prompt", "x"}, {"suffix", "end"}}, "suffix"},
      {{{"prompt", "x"}, {"presence_penalty", 0.5}}, "presence_penalty"},
      {{{"prompt", "x"}, {"frequency_penalty", "0"}}, "frequency_penalty"},
      {{{"prompt", "x"}, {"user", 5}}, "user"},
      // llama-server's and chat's fields this endpoint does not serve: refused, not ignored.
      {{{"prompt", "x"}, {"grammar", "root ::= \"a\""}}, "grammar"},
      {{{"prompt", "x"}, {"json_schema", json::object()}}, "json_schema"},
      {{{"prompt", "x"}, {"n_probs", 3}}, "n_probs"},
      {{{"prompt", "x"}, {"response_format", {{"type", "text"}}}}, "response_format"},
  };
  for (const auto& [body, param] : cases) {
    ErrorDetail detail;
    Result<ParsedGeneration> parsed = completion(body, &detail);
    SCOPED_TRACE(body.dump());
    expect_bad(parsed, detail, param);
  }
}

// One model per server, as llama-server: any name an SDK sends is served; only its type counts.
TEST(OpenAiJsonTest, AnyModelNameIsServed) {
  for (const char* name : {"gpt-4", "synthetic:tiny", "", "my-alias"}) {
    EXPECT_TRUE(completion({{"prompt", "x"}, {"model", name}}).ok()) << name;
  }
  ErrorDetail detail;
  Result<ParsedGeneration> parsed = completion({{"prompt", "x"}, {"model", 4}}, &detail);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(detail.param, "model");
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

// --n-predict N: the length of a request that names none, lowered to what the context leaves.
TEST(OpenAiJsonTest, DefaultMaxTokensShrinksToWhatTheContextLeaves) {
  Result<ParsedGeneration> parsed =
      parse_completion_request(json({{"prompt", "abc"}}).dump(), kSixteen, nullptr);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.max_tokens, 16u);
  parsed =
      parse_completion_request(json({{"prompt", std::string(250, 'a')}}).dump(), kSixteen, nullptr);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.max_tokens, 6u);
  for (const ServedModel& model : {kModel, kSixteen}) {
    ErrorDetail detail;
    Result<ParsedGeneration> full =
        parse_completion_request(json({{"prompt", std::string(256, 'a')}}).dump(), model, &detail);
    expect_bad(full, detail, "prompt");
    EXPECT_EQ(detail.code, "context_length_exceeded");
    EXPECT_THAT(full.status().message(), HasSubstr("you requested 257 tokens"));
  }
  // -1 with a prompt one token short of the context: room for one token, so served.
  parsed = completion({{"prompt", std::string(255, 'a')}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.max_tokens, 0u);
}

TEST(OpenAiJsonTest, TopPZeroKeepsOnlyTheMostProbableToken) {
  Result<ParsedGeneration> parsed = completion({{"prompt", "x"}, {"top_p", 0}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_GT(parsed->request.top_p, 0.0f);
  EXPECT_LT(parsed->request.top_p, 1e-30f);
}

TEST(OpenAiJsonTest, CompletionLogprobsAskTheEngineForAtLeastOne) {
  for (int n : {0, 1, 5}) {
    Result<ParsedGeneration> parsed = completion({{"prompt", "x"}, {"logprobs", n}});
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    ASSERT_TRUE(parsed->shown_logprobs);
    EXPECT_EQ(*parsed->shown_logprobs, static_cast<uint32_t>(n));
    EXPECT_EQ(parsed->request.logprobs, static_cast<uint32_t>(std::max(n, 1)));
  }
}

TEST(OpenAiJsonTest, ChatLogprobsAndTopLogprobs) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  Result<ParsedGeneration> parsed = chat({{"messages", messages}, {"logprobs", true}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->shown_logprobs, std::optional<uint32_t>(0));
  EXPECT_EQ(parsed->request.logprobs, 1u);
  parsed = chat({{"messages", messages}, {"logprobs", true}, {"top_logprobs", 20}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->shown_logprobs, std::optional<uint32_t>(20));
  EXPECT_EQ(parsed->request.logprobs, 20u);
  parsed = chat({{"messages", messages}, {"logprobs", false}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_FALSE(parsed->shown_logprobs);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"messages", messages}, {"top_logprobs", 2}}, "top_logprobs"},
      {{{"messages", messages}, {"logprobs", false}, {"top_logprobs", 2}}, "top_logprobs"},
      {{{"messages", messages}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"messages", messages}, {"logprobs", 3}}, "logprobs"},
      {{{"messages", messages}, {"logprobs", true}, {"stream", true}}, "logprobs"},
  };
  for (const auto& [body, param] : cases) {
    ErrorDetail detail;
    SCOPED_TRACE(body.dump());
    expect_bad(chat(body, &detail), detail, param);
  }
}

// What chat serves only at its neutral value, and what it does not serve at all: each refused
// by name, never ignored.
TEST(OpenAiJsonTest, ChatFieldsNotServedAreRefusedByName) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto with = [&](const char* name, json value) {
    json body = {{"messages", messages}};
    body[name] = std::move(value);
    return body;
  };
  for (const json& body :
       {with("response_format", {{"type", "text"}}), with("tools", json::array()),
        with("tool_choice", "none"), with("tool_choice", "auto"),
        with("modalities", json::array({"text"})), with("store", false),
        with("metadata", {{"a", "b"}}), with("service_tier", "auto"),
        with("parallel_tool_calls", true), with("safety_identifier", "x"), with("user", "u"),
        with("presence_penalty", 0), with("n", 1)}) {
    EXPECT_TRUE(chat(body).ok()) << body.dump();
  }
  const std::vector<std::pair<json, std::string>> refused = {
      {with("response_format", {{"type", "json_object"}}), "response_format"},
      {with("response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}),
       "response_format"},
      {with("response_format", {{"type", "sound"}}), "response_format"},
      {with("tools", json::array({{{"type", "function"}}})), "tools"},
      {with("tool_choice", "required"), "tool_choice"},
      {with("modalities", json::array({"text", "audio"})), "modalities"},
      {with("store", true), "store"},
      {with("n", 2), "n"},
      {with("frequency_penalty", 1), "frequency_penalty"},
      {with("metadata", "x"), "metadata"},
      {with("audio", json::object()), "audio"},
      {with("functions", json::array()), "functions"},
      {with("reasoning_effort", "low"), "reasoning_effort"},
      {with("prediction", json::object()), "prediction"},
      {with("json_schema", json::object()), "json_schema"},
      {with("grammar", "x"), "grammar"},
      {with("echo", false), "echo"},
  };
  for (const auto& [body, param] : refused) {
    ErrorDetail detail;
    SCOPED_TRACE(body.dump());
    expect_bad(chat(body, &detail), detail, param);
  }
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
  const ResponseMeta meta{.kind = ApiKind::kCompletion,
                          .id = "cmpl-1",
                          .created = 1700000000,
                          .model = "synthetic:tiny",
                          .system_fingerprint = "fp_0123456789ab"};
  const json body = response_json(meta, sample_result());
  EXPECT_EQ(body, json::parse(R"({
    "id": "cmpl-1", "object": "text_completion", "created": 1700000000,
    "model": "synthetic:tiny", "system_fingerprint": "fp_0123456789ab",
    "choices": [{"text": "Hello", "index": 0, "finish_reason": "stop", "logprobs": null}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16,
              "prompt_tokens_details": {"cached_tokens": 4}}})"));
}

TEST(OpenAiJsonTest, ChatResponse) {
  const ResponseMeta meta{.kind = ApiKind::kChat, .id = "chatcmpl-1", .created = 5, .model = "m"};
  engine::GenerateResult result = sample_result();
  result.finish = engine::FinishReason::kLength;
  const json body = response_json(meta, result);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"],
            json::parse(R"({"role":"assistant","content":"Hello","refusal":null})"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["total_tokens"], 16);
}

TEST(OpenAiJsonTest, CompletionChunks) {
  const ResponseMeta meta{.kind = ApiKind::kCompletion, .id = "cmpl-2", .created = 5, .model = "m"};
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
  const ResponseMeta meta{.kind = ApiKind::kChat, .id = "chatcmpl-2", .created = 5, .model = "m"};
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

// An engine result of the text "A" then a stop string "\xc3" (one token past the text), each
// token with two most probable alternatives.
engine::GenerateResult logprob_result() {
  engine::GenerateResult result = sample_result();
  result.text = "A";
  result.tokens = {'A', 0xc3};
  result.completion_tokens = 2;
  result.logprobs = {{'A', -0.25f, {{'A', -0.25f}, {0xe9, -2.0f}}},
                     {0xc3, -0.5f, {{0xc3, -0.5f}, {'b', -1.5f}}}};
  return result;
}

TEST(OpenAiJsonTest, CompletionLogprobsCoverTheTextsTokens) {
  ResponseMeta meta{.kind = ApiKind::kCompletion,
                    .id = "cmpl-3",
                    .created = 5,
                    .model = "m",
                    .system_fingerprint = "fp_x",
                    .shown_logprobs = 1};
  const json logprobs = response_json(meta, logprob_result())["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs, json::parse(R"({"tokens": ["A"], "token_logprobs": [-0.25],
                                      "top_logprobs": [{"A": -0.25}], "text_offset": [0]})"));
  meta.shown_logprobs = 0;
  EXPECT_EQ(response_json(meta, logprob_result())["choices"][0]["logprobs"]["top_logprobs"],
            json::parse("[{}]"));
  meta.shown_logprobs.reset();
  EXPECT_TRUE(response_json(meta, logprob_result())["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiJsonTest, ChatLogprobsNameBytesThatAreNoCharacterAlone) {
  engine::GenerateResult result = logprob_result();
  result.text = "A\xc3";  // no stop string this time: both tokens are text
  result.finish = engine::FinishReason::kLength;
  const ResponseMeta meta{.kind = ApiKind::kChat,
                          .id = "chatcmpl-3",
                          .created = 5,
                          .model = "m",
                          .system_fingerprint = "fp_x",
                          .shown_logprobs = 2};
  const json logprobs = response_json(meta, result)["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs, json::parse(R"({"refusal": null, "content": [
      {"token": "A", "logprob": -0.25, "bytes": [65], "top_logprobs": [
          {"token": "A", "logprob": -0.25, "bytes": [65]},
          {"token": "bytes:\\xe9", "logprob": -2.0, "bytes": [233]}]},
      {"token": "bytes:\\xc3", "logprob": -0.5, "bytes": [195], "top_logprobs": [
          {"token": "bytes:\\xc3", "logprob": -0.5, "bytes": [195]},
          {"token": "b", "logprob": -1.5, "bytes": [98]}]}]})"));
}

TEST(OpenAiJsonTest, EveryChunkCarriesTheSystemFingerprint) {
  const ResponseMeta meta{.kind = ApiKind::kChat,
                          .id = "chatcmpl-4",
                          .created = 5,
                          .model = "m",
                          .system_fingerprint = "fp_abc"};
  EXPECT_EQ(text_chunk_json(meta, "x", true, false)["system_fingerprint"], "fp_abc");
  EXPECT_EQ(finish_chunk_json(meta, engine::FinishReason::kStop, false)["system_fingerprint"],
            "fp_abc");
  EXPECT_EQ(usage_chunk_json(meta, sample_result())["system_fingerprint"], "fp_abc");
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

const ServedModel kFourSessions{.name = "synthetic:tiny", .context = 256, .sessions = 4};

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
