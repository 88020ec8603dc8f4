#include "server/llama_json.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "engine/model_config.h"
#include "engine/sampler.h"
#include "server/json_fields.h"

namespace siesta::server {
namespace {

using nlohmann::json;

// The one sampler order served: the engine's chain (engine/sampler.h).
constexpr std::string_view kSamplerOrder[] = {"top_k", "top_p", "min_p", "temperature"};

Status check_known_fields(const json& body, ErrorDetail* detail) {
  return refuse_unknown_fields(body,
                               {"prompt",
                                "n_predict",
                                "temperature",
                                "top_k",
                                "top_p",
                                "min_p",
                                "samplers",
                                "seed",
                                "stop",
                                "stream",
                                "cache_prompt",
                                "id_slot",
                                "n_probs",
                                "return_tokens",
                                "logit_bias",
                                "ignore_eos",
                                "model",
                                "typical_p",
                                "repeat_penalty",
                                "presence_penalty",
                                "frequency_penalty",
                                "mirostat",
                                "n_keep",
                                "dynatemp_range"},
                               detail);
}

// A field served only at its neutral value(s): a number (an integer for `integer`) equal to
// one of `neutral`, else refused by name with `why`.
Status expect_neutral(const json& body, const char* name, std::initializer_list<double> neutral,
                      bool integer, const char* why, ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr) return Status::Ok();
  if (integer ? !value->is_number_integer() : !value->is_number()) {
    return wrong_type(detail, name, integer ? "an integer" : "a number", *value);
  }
  const double v = value->get<double>();
  if (std::find(neutral.begin(), neutral.end(), v) != neutral.end()) return Status::Ok();
  return bad_field(detail, name, std::string(why) + ", got " + value->dump());
}

Status check_neutral_fields(const json& body, ErrorDetail* detail) {
  SIESTA_RETURN_IF_ERROR(expect_neutral(body, "typical_p", {1}, false,
                                        "locally typical sampling is not served (only 1)", detail));
  SIESTA_RETURN_IF_ERROR(expect_neutral(body, "repeat_penalty", {1}, false,
                                        "penalties are not served (only 1)", detail));
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    SIESTA_RETURN_IF_ERROR(
        expect_neutral(body, penalty, {0}, false, "penalties are not served (only 0)", detail));
  }
  SIESTA_RETURN_IF_ERROR(
      expect_neutral(body, "mirostat", {0}, true, "mirostat is not served (only 0)", detail));
  SIESTA_RETURN_IF_ERROR(expect_neutral(
      body, "n_keep", {0, -1}, true,
      "the context is never shifted, so no tokens are kept from it (only 0 or -1)", detail));
  SIESTA_RETURN_IF_ERROR(expect_neutral(body, "dynatemp_range", {0}, false,
                                        "dynamic temperature is not served (only 0)", detail));
  if (const json* model = field(body, "model"); model != nullptr && !model->is_string()) {
    return wrong_type(detail, "model", "a string", *model);
  }
  if (field(body, "cache_prompt") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(bool cache, boolean_of(body, "cache_prompt", detail));
    if (!cache) {
      return bad_field(detail, "cache_prompt",
                       "false is not served: a conversation's history is always reused");
    }
  }
  return Status::Ok();
}

// "prompt": a string, or one array of token ids and strings.
Result<std::string> parse_prompt(const json& body, ErrorDetail* detail) {
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) return bad_field(detail, "prompt", "missing");
  std::string text;
  if (prompt->is_string()) {
    text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    const bool strings_only =
        std::all_of(prompt->begin(), prompt->end(), [](const json& e) { return e.is_string(); });
    if (strings_only && prompt->size() > 1) {
      return bad_field(detail, "prompt",
                       "an array of strings alone is several prompts: one prompt per request is "
                       "served (a string, or an array of token ids and strings)");
    }
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& item = (*prompt)[i];
      const std::string param = "prompt[" + std::to_string(i) + "]";
      if (item.is_string()) {
        text += item.get_ref<const std::string&>();
      } else if (item.is_number_integer()) {
        if (!item.is_number_unsigned() || item.get<uint64_t>() >= engine::kVocabSize) {
          return bad_field(detail, param,
                           "token ids are 0.." + std::to_string(engine::kVocabSize - 1) +
                               " (one token per byte), got " + item.dump());
        }
        text += static_cast<char>(item.get<uint64_t>());
      } else if (item.is_array() || item.is_object()) {
        return bad_field(detail, param,
                         "one prompt per request is served: not several prompts, nor "
                         "multimodal data");
      } else {
        return wrong_type(detail, param, "a token id or a string", item);
      }
    }
  } else {
    return wrong_type(detail, "prompt", "a string or an array of token ids and strings", *prompt);
  }
  if (text.empty()) return bad_field(detail, "prompt", "must not be empty");
  return text;
}

// "samplers": which of top_k, top_p, min_p run, in the chain's order, temperature last.
Result<std::vector<std::string>> parse_samplers(const json& body, ErrorDetail* detail) {
  const json* value = field(body, "samplers");
  if (value == nullptr)
    return std::vector<std::string>(std::begin(kSamplerOrder), std::end(kSamplerOrder));
  if (!value->is_array()) return wrong_type(detail, "samplers", "an array of names", *value);
  std::vector<std::string> out;
  size_t next = 0;  // the first position of kSamplerOrder still allowed
  for (size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    const std::string param = "samplers[" + std::to_string(i) + "]";
    if (!item.is_string()) return wrong_type(detail, param, "a sampler name", item);
    const std::string& name = item.get_ref<const std::string&>();
    const auto* found = std::find(std::begin(kSamplerOrder), std::end(kSamplerOrder), name);
    if (found == std::end(kSamplerOrder)) {
      return bad_field(
          detail, param,
          "sampler " + item.dump() + " is not served (only top_k, top_p, min_p and temperature)");
    }
    const auto position = static_cast<size_t>(found - std::begin(kSamplerOrder));
    if (position < next) {
      return bad_field(detail, param,
                       "the samplers run in the order top_k, top_p, min_p, temperature, each "
                       "once; " +
                           item.dump() + " is out of that order");
    }
    next = position + 1;
    out.push_back(name);
  }
  if (out.empty() || out.back() != "temperature") {
    return bad_field(detail, "samplers", "must end with \"temperature\"");
  }
  return out;
}

bool has_sampler(const std::vector<std::string>& samplers, std::string_view name) {
  return std::find(samplers.begin(), samplers.end(), name) != samplers.end();
}

// One bias: a finite number, or false (banned).
Result<float> parse_bias(const json& value, const std::string& param, ErrorDetail* detail) {
  if (value.is_boolean()) {
    if (value.get<bool>()) {
      return bad_field(detail, param, "a bias is a number, or false to ban the token");
    }
    return engine::kLogitBiasBan;
  }
  if (!value.is_number()) return wrong_type(detail, param, "a number or false", value);
  const double bias = value.get<double>();
  if (!std::isfinite(bias) || std::abs(bias) > std::numeric_limits<float>::max()) {
    return bad_field(detail, param, "must be a finite number, got " + value.dump());
  }
  return static_cast<float>(bias);
}

// "logit_bias": [[id, bias], ...] or {"<id>": bias}.
Status parse_logit_bias(const json& body, std::vector<std::pair<uint8_t, float>>* out,
                        ErrorDetail* detail) {
  const json* value = field(body, "logit_bias");
  if (value == nullptr) return Status::Ok();
  std::set<uint8_t> seen;
  auto add = [&](uint64_t token, float bias, const std::string& param) -> Status {
    if (!seen.insert(static_cast<uint8_t>(token)).second) {
      return bad_field(detail, param, "token " + std::to_string(token) + " is named twice");
    }
    out->emplace_back(static_cast<uint8_t>(token), bias);
    return Status::Ok();
  };
  const std::string ids = "0.." + std::to_string(engine::kVocabSize - 1);
  if (value->is_object()) {
    for (const auto& [key, bias] : value->items()) {
      const std::string param = "logit_bias." + key;
      const bool decimal = !key.empty() && key.size() <= 3 && (key == "0" || key[0] != '0') &&
                           key.find_first_not_of("0123456789") == std::string::npos;
      if (!decimal || std::stoul(key) >= engine::kVocabSize) {
        return bad_field(
            detail, param,
            "keys must be token ids " + ids + " in decimal (token strings are not served)");
      }
      SIESTA_ASSIGN_OR_RETURN(float b, parse_bias(bias, param, detail));
      SIESTA_RETURN_IF_ERROR(add(std::stoul(key), b, param));
    }
  } else if (value->is_array()) {
    for (size_t i = 0; i < value->size(); ++i) {
      const json& pair = (*value)[i];
      const std::string param = "logit_bias[" + std::to_string(i) + "]";
      if (!pair.is_array() || pair.size() != 2) {
        return bad_field(detail, param, "expected [token id, bias], got " + pair.dump());
      }
      if (!pair[0].is_number_unsigned() || pair[0].get<uint64_t>() >= engine::kVocabSize) {
        return bad_field(detail, param,
                         "the token must be an id " + ids +
                             " (token strings are not served), got " + pair[0].dump());
      }
      SIESTA_ASSIGN_OR_RETURN(float b, parse_bias(pair[1], param, detail));
      SIESTA_RETURN_IF_ERROR(add(pair[0].get<uint64_t>(), b, param));
    }
  } else {
    return wrong_type(detail, "logit_bias", "an array of [token id, bias] or an object", *value);
  }
  if (Status valid = engine::validate_logit_bias(*out); !valid.ok()) {
    return bad_field(detail, "logit_bias", valid.message());
  }
  return Status::Ok();
}

// "seed": -1, llama's 4294967295 or absent: `random_seed`.
Result<uint64_t> parse_seed(const json& body, uint64_t random_seed, ErrorDetail* detail) {
  const json* value = field(body, "seed");
  if (value == nullptr) return random_seed;
  if (!value->is_number_integer()) return wrong_type(detail, "seed", "an integer", *value);
  if (value->is_number_unsigned()) {
    const uint64_t seed = value->get<uint64_t>();
    return seed == kLlamaRandomSeed ? random_seed : seed;
  }
  if (value->get<int64_t>() == -1) return random_seed;
  return bad_field(detail, "seed", "must be -1 (random) or a seed >= 0, got " + value->dump());
}

// "id_slot": -1 (any) or a conversation number.
Status parse_slot(const json& body, const ServedModel& model, engine::SessionRoute* route,
                  ErrorDetail* detail) {
  const json* value = field(body, "id_slot");
  if (value == nullptr) return Status::Ok();
  if (!value->is_number_integer()) return wrong_type(detail, "id_slot", "an integer", *value);
  if (!value->is_number_unsigned() && value->get<int64_t>() == -1) return Status::Ok();
  if (!value->is_number_unsigned() || value->get<uint64_t>() >= model.sessions) {
    return bad_field(detail, "id_slot",
                     "must be -1 or a session number 0.." + std::to_string(model.sessions - 1) +
                         ", got " + value->dump());
  }
  route->slot = static_cast<uint32_t>(value->get<uint64_t>());
  return Status::Ok();
}

// n_predict and the context: the engine's max_tokens and the n_predict used.
Status fit_context(const json& body, const ServedModel& model, ParsedNativeCompletion* out,
                   ErrorDetail* detail) {
  int64_t asked = -1;
  if (field(body, "n_predict") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(
        asked, integer_in(body, "n_predict", -1, std::numeric_limits<int64_t>::max(), detail));
    if (asked == 0) {
      return bad_field(detail, "n_predict",
                       "0 (evaluate the prompt only) is not served: ask for -1 or at least 1");
    }
  }
  if (asked == -1) asked = model.n_predict;
  const uint64_t prompt_tokens = out->request.prompt.size();
  if (prompt_tokens >= model.context) {
    if (detail != nullptr) {
      detail->param = "prompt";
      detail->code = "context_length_exceeded";
      detail->type = "exceed_context_size_error";
      detail->extra = {{"n_prompt_tokens", prompt_tokens}, {"n_ctx", model.context}};
    }
    return InvalidArgument("request (" + std::to_string(prompt_tokens) +
                           " tokens) exceeds the available context size (" +
                           std::to_string(model.context) +
                           " tokens): no room is left for a generated token; shorten the prompt "
                           "or start the server with a larger --ctx");
  }
  const uint64_t left = model.context - prompt_tokens;
  // 0 for the engine: until a stop string or the context is full.
  const uint64_t max_tokens =
      asked < 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(asked), left);
  out->request.max_tokens = static_cast<uint32_t>(max_tokens);
  out->params.n_predict = max_tokens == 0 ? -1 : static_cast<int64_t>(max_tokens);
  return Status::Ok();
}

// The sampling fields, with the samplers left out of the chain neutral.
Status parse_sampling(const json& body, ParsedNativeCompletion* out, ErrorDetail* detail) {
  NativeParams& params = out->params;
  SIESTA_ASSIGN_OR_RETURN(params.samplers, parse_samplers(body, detail));
  if (field(body, "temperature") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(params.temperature, number_in(body, "temperature", 0,
                                                          engine::kMaxTemperature, false, detail));
  }
  if (field(body, "top_k") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(int64_t k, integer_in(body, "top_k", 0, INT32_MAX, detail));
    params.top_k = static_cast<uint32_t>(k);
  }
  if (field(body, "top_p") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(params.top_p, number_in(body, "top_p", 0, 1, false, detail));
  }
  if (field(body, "min_p") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(params.min_p, number_in(body, "min_p", 0, 1, false, detail));
  }
  if (!has_sampler(params.samplers, "top_k")) params.top_k = 0;
  if (!has_sampler(params.samplers, "top_p")) params.top_p = 1;
  if (!has_sampler(params.samplers, "min_p")) params.min_p = 0;
  engine::GenerateRequest& request = out->request;
  request.temperature = static_cast<float>(params.temperature);
  request.top_k = params.top_k;
  // 0 keeps the most probable token alone: the smallest set reaching any positive mass.
  request.top_p =
      params.top_p > 0 ? static_cast<float>(params.top_p) : std::numeric_limits<float>::min();
  request.min_p = static_cast<float>(params.min_p);
  return Status::Ok();
}

std::string token_string(uint8_t token) { return std::string(1, static_cast<char>(token)); }

json token_json(uint8_t token, float logprob) {
  return {{"id", token},
          {"token", token_string(token)},
          {"bytes", json::array({token})},
          {"logprob", logprob}};
}

// Per token of the content: the token, its log probability and the n_probs most probable.
json probabilities_json(const engine::GenerateResult& result, uint32_t n_probs) {
  json out = json::array();
  const size_t count = std::min(result.text.size(), result.logprobs.size());
  for (size_t i = 0; i < count; ++i) {
    const engine::TokenLogprob& entry = result.logprobs[i];
    json item = token_json(entry.token, entry.logprob);
    json top = json::array();
    const size_t shown = std::min<size_t>(n_probs, entry.top.size());
    for (size_t j = 0; j < shown; ++j)
      top.push_back(token_json(entry.top[j].first, entry.top[j].second));
    item["top_logprobs"] = std::move(top);
    out.push_back(std::move(item));
  }
  return out;
}

json token_ids(std::string_view text) {
  json ids = json::array();
  for (unsigned char byte : text) ids.push_back(byte);
  return ids;
}

// The matched stop string: the generated tokens past the text (one token per byte).
std::string stopping_word(const engine::GenerateResult& result) {
  if (result.finish != engine::FinishReason::kStop || result.tokens.size() < result.text.size()) {
    return {};
  }
  return std::string(result.tokens.begin() + static_cast<ptrdiff_t>(result.text.size()),
                     result.tokens.end());
}

double per_token(double ms, uint64_t n) { return n == 0 ? 0 : ms / static_cast<double>(n); }
double per_second(double ms, uint64_t n) {
  return ms <= 0 ? 0 : static_cast<double>(n) * 1000.0 / ms;
}

}  // namespace

NativeParams native_defaults(const ServerConfig& config) {
  NativeParams defaults;
  defaults.n_predict = config.n_predict;
  return defaults;
}

json native_params_json(const NativeParams& params) {
  json bias = json::array();
  for (const auto& [token, value] : params.logit_bias) {
    bias.push_back(
        json::array({token, value <= engine::kLogitBiasBan ? json(false) : json(value)}));
  }
  return {{"n_predict", params.n_predict},
          {"seed", params.seed},
          {"temperature", params.temperature},
          {"dynatemp_range", 0.0},
          {"dynatemp_exponent", 1.0},
          {"top_k", params.top_k},
          {"top_p", params.top_p},
          {"min_p", params.min_p},
          {"typical_p", 1.0},
          {"repeat_last_n", 0},
          {"repeat_penalty", 1.0},
          {"presence_penalty", 0.0},
          {"frequency_penalty", 0.0},
          {"mirostat", 0},
          {"stop", params.stop},
          {"max_tokens", params.n_predict},
          {"n_keep", 0},
          {"ignore_eos", params.ignore_eos},
          {"stream", params.stream},
          {"n_probs", params.n_probs},
          {"logit_bias", std::move(bias)},
          {"samplers", params.samplers}};
}

Result<ParsedNativeCompletion> parse_native_completion(std::string_view body,
                                                       const ServedModel& model,
                                                       uint64_t random_seed, ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(check_known_fields(object, detail));
  ParsedNativeCompletion out;
  out.params.n_predict = model.n_predict;
  SIESTA_ASSIGN_OR_RETURN(out.request.prompt, parse_prompt(object, detail));
  SIESTA_RETURN_IF_ERROR(check_neutral_fields(object, detail));
  SIESTA_RETURN_IF_ERROR(parse_sampling(object, &out, detail));
  SIESTA_ASSIGN_OR_RETURN(out.params.seed, parse_seed(object, random_seed, detail));
  out.request.seed = out.params.seed;
  SIESTA_RETURN_IF_ERROR(parse_stop_strings(object, "stop", engine::kMaxStopStrings,
                                            engine::kMaxStopBytes, &out.request.stop, detail));
  out.params.stop = out.request.stop;
  if (field(object, "stream") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(out.params.stream, boolean_of(object, "stream", detail));
  }
  if (field(object, "ignore_eos") != nullptr) {  // any value: the model has no end token
    SIESTA_ASSIGN_OR_RETURN(out.params.ignore_eos, boolean_of(object, "ignore_eos", detail));
  }
  if (field(object, "return_tokens") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(out.return_tokens, boolean_of(object, "return_tokens", detail));
  }
  if (field(object, "n_probs") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(int64_t n,
                            integer_in(object, "n_probs", 0, engine::kMaxTopLogprobs, detail));
    out.params.n_probs = static_cast<uint32_t>(n);
  }
  if (out.params.n_probs > 0 && out.params.stream) {
    return bad_field(detail, "n_probs",
                     "not served with stream: ask without stream for the probabilities");
  }
  out.request.logprobs = out.params.n_probs;
  SIESTA_RETURN_IF_ERROR(parse_logit_bias(object, &out.params.logit_bias, detail));
  out.request.logit_bias = out.params.logit_bias;
  SIESTA_RETURN_IF_ERROR(parse_slot(object, model, &out.request.route, detail));
  SIESTA_RETURN_IF_ERROR(fit_context(object, model, &out, detail));
  return out;
}

json native_timings_json(const engine::GenerateResult& result, const NativeTimings& timings) {
  const uint64_t cached = std::min(result.cached_tokens, result.prompt_tokens);
  const uint64_t read = result.prompt_tokens - cached;
  const uint64_t predicted = result.completion_tokens;
  return {{"prompt_n", read},
          {"prompt_ms", timings.prompt_ms},
          {"prompt_per_token_ms", per_token(timings.prompt_ms, read)},
          {"prompt_per_second", per_second(timings.prompt_ms, read)},
          {"predicted_n", predicted},
          {"predicted_ms", timings.predicted_ms},
          {"predicted_per_token_ms", per_token(timings.predicted_ms, predicted)},
          {"predicted_per_second", per_second(timings.predicted_ms, predicted)},
          {"cache_n", cached}};
}

json native_completion_json(const NativeMeta& meta, const engine::GenerateResult& result,
                            const NativeTimings& timings) {
  const bool stopped_by_word = result.finish == engine::FinishReason::kStop;
  json body = {{"index", 0},
               {"content", result.text},
               {"tokens", meta.return_tokens ? token_ids(result.text) : json::array()},
               {"id_slot", result.session},
               {"stop", true},
               {"model", meta.model},
               {"tokens_predicted", result.completion_tokens},
               {"tokens_evaluated", result.prompt_tokens},
               {"tokens_cached", result.cached_tokens},
               {"generation_settings", native_params_json(meta.params)},
               {"prompt", meta.prompt},
               {"has_new_line", result.text.find('\n') != std::string::npos},
               {"truncated", false},
               {"stop_type", stopped_by_word ? "word" : "limit"},
               {"stopping_word", stopping_word(result)},
               {"timings", native_timings_json(result, timings)}};
  if (meta.params.n_probs > 0) {
    body["completion_probabilities"] = probabilities_json(result, meta.params.n_probs);
  }
  return body;
}

json native_piece_json(std::string_view piece, uint32_t session) {
  return {{"index", 0},
          {"content", std::string(piece)},
          {"tokens", token_ids(piece)},
          {"stop", false},
          {"id_slot", session}};
}

json native_final_json(const NativeMeta& meta, const engine::GenerateResult& result,
                       const NativeTimings& timings) {
  NativeMeta streamed = meta;
  streamed.params.n_probs = 0;
  json body = native_completion_json(streamed, result, timings);
  body["content"] = "";
  body["tokens"] = json::array();
  body["generation_settings"] = native_params_json(meta.params);
  return body;
}

}  // namespace siesta::server
