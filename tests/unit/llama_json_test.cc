// llama-server's POST /completion bodies -> engine requests (every field, every refusal naming
// its param, the context error's llama fields), and engine results -> the native answer, its
// stream pieces and last event, its timings and probabilities.
#include "server/llama_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const ServedModel kModel{.name = "synthetic:tiny", .context = 256, .sessions = 3};
// A server started with --n-predict 16.
const ServedModel kSixteen{
    .name = "synthetic:tiny", .context = 256, .sessions = 1, .n_predict = 16};
constexpr uint64_t kRandom = 0x1234567890abcdefull;  // the "fresh" seed the tests hand in

Result<ParsedNativeCompletion> parse(const json& body, ErrorDetail* detail = nullptr,
                                     const ServedModel& model = kModel) {
  return parse_native_completion(body.dump(), model, kRandom, detail);
}

// Expects InvalidArgument naming `param` (in the detail and in the message).
void expect_bad(const json& body, const std::string& param, const std::string& why = "") {
  ErrorDetail detail;
  Result<ParsedNativeCompletion> parsed = parse(body, &detail);
  ASSERT_FALSE(parsed.ok()) << body.dump();
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << parsed.status().to_string();
  EXPECT_EQ(detail.param, param) << body.dump() << ": " << parsed.status().to_string();
  EXPECT_THAT(parsed.status().message(), HasSubstr(param));
  if (!why.empty()) {
    EXPECT_THAT(parsed.status().message(), HasSubstr(why)) << body.dump();
  }
}

json with(json body, const json& more) {
  for (const auto& [name, value] : more.items()) body[name] = value;
  return body;
}

const json kBase = {{"prompt", "Hello"}};

TEST(LlamaJsonTest, DefaultsAreLlamaServers) {
  Result<ParsedNativeCompletion> parsed = parse(kBase);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const engine::GenerateRequest& r = parsed->request;
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_EQ(r.max_tokens, 0u) << "-1: until a stop string or the context is full";
  EXPECT_FLOAT_EQ(r.temperature, 0.8f);
  EXPECT_EQ(r.top_k, 40u);
  EXPECT_FLOAT_EQ(r.top_p, 0.95f);
  EXPECT_FLOAT_EQ(r.min_p, 0.05f);
  EXPECT_EQ(r.seed, kRandom) << "absent: a fresh random seed";
  EXPECT_TRUE(r.stop.empty());
  EXPECT_TRUE(r.logit_bias.empty());
  EXPECT_EQ(r.logprobs, 0u);
  EXPECT_FALSE(r.route.slot);
  EXPECT_FALSE(r.route.key);
  EXPECT_FALSE(parsed->return_tokens);
  EXPECT_FALSE(parsed->params.stream);
  EXPECT_EQ(parsed->params.n_predict, -1);
  EXPECT_EQ(parsed->params.seed, kRandom) << "generation_settings reports the seed used";
  EXPECT_EQ(parsed->params.samplers,
            (std::vector<std::string>{"top_k", "top_p", "min_p", "temperature"}));
}

TEST(LlamaJsonTest, NativeDefaultsAndTheirParams) {
  ServerConfig config;
  config.n_predict = 32;
  const NativeParams defaults = native_defaults(config);
  EXPECT_EQ(defaults.n_predict, 32);
  const json params = native_params_json(defaults);
  EXPECT_EQ(params["n_predict"], 32);
  EXPECT_EQ(params["max_tokens"], 32);
  EXPECT_EQ(params["seed"], 4294967295u) << "llama's 'random'";
  EXPECT_DOUBLE_EQ(params["temperature"].get<double>(), 0.8);
  EXPECT_EQ(params["top_k"], 40);
  EXPECT_DOUBLE_EQ(params["top_p"].get<double>(), 0.95);
  EXPECT_DOUBLE_EQ(params["min_p"].get<double>(), 0.05);
  EXPECT_EQ(params["samplers"], json({"top_k", "top_p", "min_p", "temperature"}));
  for (const char* neutral : {"typical_p", "repeat_penalty", "dynatemp_exponent"}) {
    EXPECT_EQ(params[neutral], 1.0) << neutral;
  }
  for (const char* neutral :
       {"presence_penalty", "frequency_penalty", "dynatemp_range", "mirostat", "n_keep"}) {
    EXPECT_EQ(params[neutral], 0) << neutral;
  }
  EXPECT_EQ(params["stop"], json::array());
  EXPECT_EQ(params["logit_bias"], json::array());
}

TEST(LlamaJsonTest, PromptForms) {
  auto prompt_of = [](const json& prompt) {
    Result<ParsedNativeCompletion> parsed = parse({{"prompt", prompt}});
    EXPECT_TRUE(parsed.ok()) << prompt.dump() << ": " << parsed.status().to_string();
    return parsed.ok() ? parsed->request.prompt : std::string();
  };
  EXPECT_EQ(prompt_of("Hi there"), "Hi there");
  EXPECT_EQ(prompt_of(json({72, 105})), "Hi") << "token ids are bytes";
  EXPECT_EQ(prompt_of(json({72, "ello", 33})), "Hello!") << "ids and strings, concatenated";
  EXPECT_EQ(prompt_of(json({"one"})), "one") << "an array of one string is one prompt";
  EXPECT_EQ(prompt_of(json({0, 255})), std::string("\0\xff", 2)) << "every byte is a token";
  expect_bad({{"prompt", json({"one", "two"})}}, "prompt", "several prompts");
  expect_bad({{"prompt", json({json({1, 2}), json({3})})}}, "prompt[0]", "one prompt");
  expect_bad({{"prompt", json({1, json({2})})}}, "prompt[1]", "one prompt");
  expect_bad({{"prompt", json::array({json::object({{"prompt_string", "x"}})})}}, "prompt[0]",
             "multimodal");
  expect_bad({{"prompt", {{"prompt_string", "x"}}}}, "prompt", "expected");
  expect_bad({{"prompt", json({256})}}, "prompt[0]", "0..255");
  expect_bad({{"prompt", json({-1})}}, "prompt[0]", "0..255");
  expect_bad({{"prompt", json({1.5})}}, "prompt[0]", "a token id or a string");
  expect_bad({{"prompt", json({true})}}, "prompt[0]", "a token id or a string");
  expect_bad({{"prompt", ""}}, "prompt", "empty");
  expect_bad({{"prompt", json::array()}}, "prompt", "empty");
  expect_bad({{"prompt", json({""})}}, "prompt", "empty");
  expect_bad({{"prompt", 5}}, "prompt", "expected");
  expect_bad(json::object(), "prompt", "missing");
}

TEST(LlamaJsonTest, NPredictAndTheContext) {
  auto max_tokens = [](const json& body, const ServedModel& model = kModel) {
    Result<ParsedNativeCompletion> parsed = parse(body, nullptr, model);
    EXPECT_TRUE(parsed.ok()) << body.dump() << ": " << parsed.status().to_string();
    return parsed.ok() ? std::pair{parsed->request.max_tokens, parsed->params.n_predict}
                       : std::pair{0u, int64_t{0}};
  };
  EXPECT_EQ(max_tokens(with(kBase, {{"n_predict", 7}})), std::pair(7u, int64_t{7}));
  EXPECT_EQ(max_tokens(with(kBase, {{"n_predict", -1}})), std::pair(0u, int64_t{-1}));
  // N is lowered to what the context leaves after the prompt (256 - 5).
  EXPECT_EQ(max_tokens(with(kBase, {{"n_predict", 1000}})), std::pair(251u, int64_t{251}));
  EXPECT_EQ(max_tokens(with(kBase, {{"n_predict", std::numeric_limits<int64_t>::max()}})),
            std::pair(251u, int64_t{251}));
  // -1 and absent are the server's --n-predict, lowered the same way.
  EXPECT_EQ(max_tokens(kBase, kSixteen), std::pair(16u, int64_t{16}));
  EXPECT_EQ(max_tokens(with(kBase, {{"n_predict", -1}}), kSixteen), std::pair(16u, int64_t{16}));
  EXPECT_EQ(max_tokens({{"prompt", std::string(250, 'a')}}, kSixteen), std::pair(6u, int64_t{6}));
  EXPECT_EQ(max_tokens({{"prompt", std::string(255, 'a')}, {"n_predict", 9}}),
            std::pair(1u, int64_t{1}))
      << "one token of room is enough";
  expect_bad(with(kBase, {{"n_predict", 0}}), "n_predict", "not served");
  expect_bad(with(kBase, {{"n_predict", -2}}), "n_predict");
  expect_bad(with(kBase, {{"n_predict", 1.5}}), "n_predict", "integer");
  expect_bad(with(kBase, {{"max_tokens", 4}}), "max_tokens", "not served");
}

TEST(LlamaJsonTest, APromptThatFillsTheContextIsLlamasContextError) {
  for (size_t length : {256u, 300u}) {
    ErrorDetail detail;
    Result<ParsedNativeCompletion> parsed =
        parse({{"prompt", std::string(length, 'a')}, {"n_predict", 1}}, &detail);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("request (" + std::to_string(length) +
                          " tokens) exceeds the available context size (256 tokens)"));
    EXPECT_EQ(detail.type, "exceed_context_size_error");
    EXPECT_EQ(detail.code, "context_length_exceeded");
    EXPECT_EQ(detail.param, "prompt");
    EXPECT_EQ(detail.extra, json({{"n_prompt_tokens", length}, {"n_ctx", 256}}));
    // As the error body carries it: llama's members beside ours.
    const json error = api_error_json(api_error_from_status(parsed.status(), detail))["error"];
    EXPECT_EQ(error["type"], "exceed_context_size_error");
    EXPECT_EQ(error["n_prompt_tokens"], length);
    EXPECT_EQ(error["n_ctx"], 256);
    EXPECT_EQ(error["code"], "context_length_exceeded");
    EXPECT_EQ(api_error_from_status(parsed.status(), detail).http_status, 400);
  }
}

TEST(LlamaJsonTest, SamplingFields) {
  Result<ParsedNativeCompletion> parsed = parse(with(
      kBase, {{"temperature", 1.5}, {"top_k", 3}, {"top_p", 0.5}, {"min_p", 0.25}, {"seed", 7}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_FLOAT_EQ(parsed->request.temperature, 1.5f);
  EXPECT_EQ(parsed->request.top_k, 3u);
  EXPECT_FLOAT_EQ(parsed->request.top_p, 0.5f);
  EXPECT_FLOAT_EQ(parsed->request.min_p, 0.25f);
  EXPECT_EQ(parsed->request.seed, 7u);
  EXPECT_EQ(parsed->params.seed, 7u);
  // The bounds are inclusive; top_p 0 keeps the most probable token (the smallest positive).
  Result<ParsedNativeCompletion> bounds =
      parse(with(kBase, {{"temperature", 2}, {"top_p", 0}, {"min_p", 1}, {"top_k", 0}}));
  ASSERT_TRUE(bounds.ok()) << bounds.status().to_string();
  EXPECT_FLOAT_EQ(bounds->request.temperature, 2.0f);
  EXPECT_EQ(bounds->request.top_p, std::numeric_limits<float>::min());
  EXPECT_FLOAT_EQ(bounds->request.min_p, 1.0f);
  EXPECT_TRUE(engine::validate_top_p(bounds->request.top_p).ok());
  // -1 and llama's 4294967295 are "random": the seed handed in.
  for (const json& random : {json(-1), json(4294967295u)}) {
    Result<ParsedNativeCompletion> seeded = parse(with(kBase, {{"seed", random}}));
    ASSERT_TRUE(seeded.ok()) << seeded.status().to_string();
    EXPECT_EQ(seeded->request.seed, kRandom) << random.dump();
  }
  expect_bad(with(kBase, {{"seed", -2}}), "seed");
  expect_bad(with(kBase, {{"seed", "1"}}), "seed", "integer");
  expect_bad(with(kBase, {{"temperature", 2.01}}), "temperature");
  expect_bad(with(kBase, {{"temperature", -0.1}}), "temperature");
  expect_bad(with(kBase, {{"top_p", 1.01}}), "top_p");
  expect_bad(with(kBase, {{"min_p", -0.01}}), "min_p");
  expect_bad(with(kBase, {{"min_p", 1.5}}), "min_p");
  expect_bad(with(kBase, {{"min_p", "0.1"}}), "min_p", "number");
  expect_bad(with(kBase, {{"top_k", -1}}), "top_k");
  expect_bad(with(kBase, {{"top_k", 2.5}}), "top_k");
}

TEST(LlamaJsonTest, SamplersNameWhichFiltersRunInTheOneOrderServed) {
  Result<ParsedNativeCompletion> parsed = parse(
      with(kBase,
           {{"samplers", {"top_k", "temperature"}}, {"top_p", 0.5}, {"min_p", 0.3}, {"top_k", 5}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.top_k, 5u);
  EXPECT_EQ(parsed->request.top_p, 1.0f) << "top_p is not in the chain: off";
  EXPECT_EQ(parsed->request.min_p, 0.0f) << "min_p is not in the chain: off";
  EXPECT_EQ(parsed->params.samplers, (std::vector<std::string>{"top_k", "temperature"}));
  EXPECT_EQ(native_params_json(parsed->params)["top_p"], 1.0) << "the params as used";
  Result<ParsedNativeCompletion> bare = parse(with(kBase, {{"samplers", {"temperature"}}}));
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  EXPECT_EQ(bare->request.top_k, 0u);
  expect_bad(with(kBase, {{"samplers", {"dry", "temperature"}}}), "samplers[0]", "not served");
  expect_bad(with(kBase, {{"samplers", {"top_k", "typ_p", "temperature"}}}), "samplers[1]",
             "not served");
  expect_bad(with(kBase, {{"samplers", {"top_p", "top_k", "temperature"}}}), "samplers[1]",
             "order");
  expect_bad(with(kBase, {{"samplers", {"top_k", "top_k", "temperature"}}}), "samplers[1]",
             "order");
  expect_bad(with(kBase, {{"samplers", {"temperature", "top_k"}}}), "samplers[1]", "order");
  expect_bad(with(kBase, {{"samplers", {"top_k"}}}), "samplers", "temperature");
  expect_bad(with(kBase, {{"samplers", json::array()}}), "samplers", "temperature");
  expect_bad(with(kBase, {{"samplers", "kpmt"}}), "samplers", "array");
  expect_bad(with(kBase, {{"samplers", {1}}}), "samplers[0]");
}

TEST(LlamaJsonTest, StopStreamSlotProbsTokensAndIgnoreEos) {
  Result<ParsedNativeCompletion> parsed = parse(with(kBase, {{"stop", {"\n", "END"}},
                                                             {"stream", true},
                                                             {"id_slot", 2},
                                                             {"return_tokens", true},
                                                             {"ignore_eos", true},
                                                             {"cache_prompt", true},
                                                             {"model", "any-name"}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->request.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(parsed->params.stop, parsed->request.stop);
  EXPECT_TRUE(parsed->params.stream);
  EXPECT_EQ(parsed->request.route.slot, 2u);
  EXPECT_TRUE(parsed->return_tokens);
  EXPECT_TRUE(parsed->params.ignore_eos);
  Result<ParsedNativeCompletion> probs = parse(with(kBase, {{"n_probs", 20}, {"id_slot", -1}}));
  ASSERT_TRUE(probs.ok()) << probs.status().to_string();
  EXPECT_EQ(probs->request.logprobs, 20u);
  EXPECT_EQ(probs->params.n_probs, 20u);
  EXPECT_FALSE(probs->request.route.slot) << "-1: any slot";
  expect_bad(with(kBase, {{"n_probs", 21}}), "n_probs");
  expect_bad(with(kBase, {{"n_probs", -1}}), "n_probs");
  expect_bad(with(kBase, {{"n_probs", 1}, {"stream", true}}), "n_probs", "stream");
  expect_bad(with(kBase, {{"id_slot", 3}}), "id_slot", "0..2");
  expect_bad(with(kBase, {{"id_slot", -2}}), "id_slot");
  expect_bad(with(kBase, {{"id_slot", "0"}}), "id_slot", "integer");
  expect_bad(with(kBase, {{"stop", {"a", "b", "c", "d", "e"}}}), "stop");
  expect_bad(with(kBase, {{"stop", {""}}}), "stop[0]");
  expect_bad(with(kBase, {{"stream", "yes"}}), "stream", "boolean");
  expect_bad(with(kBase, {{"return_tokens", 1}}), "return_tokens", "boolean");
  expect_bad(with(kBase, {{"ignore_eos", "no"}}), "ignore_eos", "boolean");
  expect_bad(with(kBase, {{"cache_prompt", false}}), "cache_prompt", "not served");
  expect_bad(with(kBase, {{"cache_prompt", 0}}), "cache_prompt", "boolean");
  expect_bad(with(kBase, {{"model", 3}}), "model", "string");
}

TEST(LlamaJsonTest, LogitBiasForms) {
  Result<ParsedNativeCompletion> pairs =
      parse(with(kBase, {{"logit_bias", {{65, 2.5}, {66, false}, {0, -1}}}}));
  ASSERT_TRUE(pairs.ok()) << pairs.status().to_string();
  EXPECT_EQ(pairs->request.logit_bias,
            (std::vector<std::pair<uint8_t, float>>{{65, 2.5f}, {66, -100.0f}, {0, -1.0f}}));
  EXPECT_EQ(native_params_json(pairs->params)["logit_bias"],
            json({{65, 2.5}, {66, false}, {0, -1.0}}))
      << "a ban is written false, as llama writes -inf";
  Result<ParsedNativeCompletion> object =
      parse(with(kBase, {{"logit_bias", {{"65", 3}, {"255", false}}}}));
  ASSERT_TRUE(object.ok()) << object.status().to_string();
  EXPECT_EQ(object->request.logit_bias,
            (std::vector<std::pair<uint8_t, float>>{{255, -100.0f}, {65, 3.0f}}));
  expect_bad(with(kBase, {{"logit_bias", {{65, true}}}}), "logit_bias[0]", "false");
  expect_bad(with(kBase, {{"logit_bias", json::array({json::array({"Hello", -0.5})})}}),
             "logit_bias[0]", "token strings");
  expect_bad(with(kBase, {{"logit_bias", {{256, 1}}}}), "logit_bias[0]", "0..255");
  expect_bad(with(kBase, {{"logit_bias", {{-1, 1}}}}), "logit_bias[0]");
  expect_bad(with(kBase, {{"logit_bias", {{65}}}}), "logit_bias[0]", "[token id, bias]");
  expect_bad(with(kBase, {{"logit_bias", {65, 1}}}), "logit_bias[0]");
  expect_bad(with(kBase, {{"logit_bias", {{65, 1}, {65, 2}}}}), "logit_bias[1]", "twice");
  expect_bad(with(kBase, {{"logit_bias", {{65, "x"}}}}), "logit_bias[0]", "a number or false");
  expect_bad(with(kBase, {{"logit_bias", {{"x", 1}}}}), "logit_bias.x", "token ids");
  expect_bad(with(kBase, {{"logit_bias", {{"065", 1}}}}), "logit_bias.065", "token ids");
  expect_bad(with(kBase, {{"logit_bias", {{"256", 1}}}}), "logit_bias.256", "token ids");
  expect_bad(with(kBase, {{"logit_bias", 5}}), "logit_bias");
  json every = json::array();
  for (uint32_t t = engine::kFirstPrintable; t <= engine::kLastPrintable; ++t) {
    every.push_back({t, false});
  }
  expect_bad(with(kBase, {{"logit_bias", every}}), "logit_bias", "every printable token");
}

TEST(LlamaJsonTest, NeutralOnlyFieldsAndUnknownFields) {
  ASSERT_TRUE(parse(with(kBase, {{"typical_p", 1},
                                 {"repeat_penalty", 1.0},
                                 {"presence_penalty", 0},
                                 {"frequency_penalty", 0.0},
                                 {"mirostat", 0},
                                 {"n_keep", -1},
                                 {"dynatemp_range", 0}}))
                  .ok());
  ASSERT_TRUE(parse(with(kBase, {{"n_keep", 0}})).ok());
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, json>>{{"typical_p", 0.9},
                                                 {"repeat_penalty", 1.1},
                                                 {"presence_penalty", 0.5},
                                                 {"frequency_penalty", -0.5},
                                                 {"mirostat", 2},
                                                 {"n_keep", 4},
                                                 {"dynatemp_range", 0.5},
                                                 {"typical_p", "1"},
                                                 {"mirostat", 0.0}}) {
    SCOPED_TRACE(name + " " + value.dump());
    expect_bad(with(kBase, {{name, value}}), name);
  }
  for (const char* unknown : {"grammar", "json_schema", "dry_multiplier", "xtc_probability",
                              "n_cmpl", "lora", "response_fields", "post_sampling_probs",
                              "repeat_last_n", "timings_per_token", "messages"}) {
    expect_bad(with(kBase, {{unknown, 1}}), unknown, "not served");
  }
}

// A result as the engine gives it: "Hi!" then the stop string "##" (its tokens generated).
engine::GenerateResult stopped_result() {
  engine::GenerateResult result;
  result.text = "Hi!";
  result.tokens = {'H', 'i', '!', '#', '#'};
  result.prompt_tokens = 10;
  result.cached_tokens = 4;
  result.completion_tokens = 5;
  result.finish = engine::FinishReason::kStop;
  result.session = 2;
  for (uint8_t token : result.tokens) {
    result.logprobs.push_back(
        {token, -0.5f, {{token, -0.5f}, {0x80, -1.0f}, {'\n', -2.0f}, {'z', -3.0f}}});
  }
  return result;
}

NativeMeta meta_of(uint32_t n_probs, bool return_tokens) {
  NativeMeta meta;
  meta.model = "my-model";
  meta.params.n_predict = 20;
  meta.params.seed = 99;
  meta.params.stop = {"##"};
  meta.params.n_probs = n_probs;
  meta.prompt = "the prompt";
  meta.return_tokens = return_tokens;
  return meta;
}

TEST(LlamaJsonTest, TheWholeAnswer) {
  const engine::GenerateResult result = stopped_result();
  const json body = native_completion_json(meta_of(0, false), result, {40.0, 10.0});
  EXPECT_EQ(body["index"], 0);
  EXPECT_EQ(body["content"], "Hi!");
  EXPECT_EQ(body["tokens"], json::array()) << "without return_tokens";
  EXPECT_EQ(body["id_slot"], 2);
  EXPECT_EQ(body["stop"], true);
  EXPECT_EQ(body["model"], "my-model");
  EXPECT_EQ(body["tokens_predicted"], 5);
  EXPECT_EQ(body["tokens_evaluated"], 10);
  EXPECT_EQ(body["tokens_cached"], 4);
  EXPECT_EQ(body["generation_settings"], native_params_json(meta_of(0, false).params));
  EXPECT_EQ(body["generation_settings"]["seed"], 99);
  EXPECT_EQ(body["prompt"], "the prompt");
  EXPECT_EQ(body["has_new_line"], false);
  EXPECT_EQ(body["truncated"], false);
  EXPECT_EQ(body["stop_type"], "word");
  EXPECT_EQ(body["stopping_word"], "##");
  EXPECT_FALSE(body.contains("completion_probabilities"));
  const json& timings = body["timings"];
  EXPECT_EQ(timings["prompt_n"], 6) << "the prompt tokens read: 10 - 4 reused";
  EXPECT_EQ(timings["cache_n"], 4);
  EXPECT_DOUBLE_EQ(timings["prompt_ms"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(timings["prompt_per_token_ms"].get<double>(), 40.0 / 6);
  EXPECT_DOUBLE_EQ(timings["prompt_per_second"].get<double>(), 6 * 1000.0 / 40.0);
  EXPECT_EQ(timings["predicted_n"], 5);
  EXPECT_DOUBLE_EQ(timings["predicted_ms"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(timings["predicted_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(timings["predicted_per_second"].get<double>(), 500.0);
  // return_tokens: the content's token ids (the stop string's are not content).
  EXPECT_EQ(native_completion_json(meta_of(0, true), result, {})["tokens"], json({72, 105, 33}));
}

TEST(LlamaJsonTest, LengthLimitedAnswerAndZeroRates) {
  engine::GenerateResult result = stopped_result();
  result.text = "Hi!##";
  result.finish = engine::FinishReason::kLength;
  result.cached_tokens = 10;  // the whole prompt reused: nothing read
  const json body = native_completion_json(meta_of(0, false), result, {0.0, 0.0});
  EXPECT_EQ(body["stop_type"], "limit");
  EXPECT_EQ(body["stopping_word"], "");
  EXPECT_EQ(body["timings"]["prompt_n"], 0);
  EXPECT_EQ(body["timings"]["prompt_per_token_ms"], 0.0);
  EXPECT_EQ(body["timings"]["prompt_per_second"], 0.0);
  EXPECT_EQ(body["timings"]["predicted_per_second"], 0.0) << "0 ms: no rate";
  result.text = "a\nb";
  EXPECT_EQ(native_completion_json(meta_of(0, false), result, {})["has_new_line"], true);
}

TEST(LlamaJsonTest, CompletionProbabilitiesCoverTheContent) {
  const json body = native_completion_json(meta_of(2, false), stopped_result(), {});
  const json& probs = body["completion_probabilities"];
  ASSERT_EQ(probs.size(), 3u) << "the content's tokens: the stop string's are left out";
  const json first = {
      {"id", 'H'},
      {"token", "H"},
      {"bytes", {'H'}},
      {"logprob", -0.5},
      {"top_logprobs",
       {{{"id", 'H'}, {"token", "H"}, {"bytes", {'H'}}, {"logprob", -0.5}},
        {{"id", 0x80}, {"token", std::string(1, '\x80')}, {"bytes", {0x80}}, {"logprob", -1.0}}}}};
  EXPECT_EQ(probs[0], first);
  for (const json& entry : probs) EXPECT_EQ(entry["top_logprobs"].size(), 2u) << "n_probs 2";
  // The byte that is not UTF-8 alone is serialised as U+FFFD; its bytes stay exact.
  EXPECT_THAT(dump_json(probs[0]), HasSubstr("\"token\":\"\xef\xbf\xbd\""));
}

TEST(LlamaJsonTest, StreamPiecesAndTheLastEvent) {
  EXPECT_EQ(native_piece_json("Hi", 1), json({{"index", 0},
                                              {"content", "Hi"},
                                              {"tokens", {72, 105}},
                                              {"stop", false},
                                              {"id_slot", 1}}));
  const engine::GenerateResult result = stopped_result();
  NativeMeta meta = meta_of(0, true);
  meta.params.stream = true;
  const json last = native_final_json(meta, result, {3.0, 4.0});
  json whole = native_completion_json(meta, result, {3.0, 4.0});
  EXPECT_EQ(last["content"], "") << "the pieces carried the content";
  EXPECT_EQ(last["tokens"], json::array());
  EXPECT_EQ(last["stop"], true);
  whole["content"] = "";
  whole["tokens"] = json::array();
  EXPECT_EQ(last, whole) << "every other field is the whole answer's";
}

}  // namespace
}  // namespace siesta::server
