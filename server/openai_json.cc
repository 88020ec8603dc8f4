#include "server/openai_json.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <span>
#include <vector>

#include "core/base/log_text.h"
#include "engine/sampler.h"
#include "server/chat_template.h"
#include "server/json_fields.h"
#include "server/random_id.h"

namespace siesta::server {
namespace {

using nlohmann::json;

Status check_model(const json& body, ErrorDetail* detail) {
  const json* value = field(body, "model");
  if (value == nullptr || value->is_string()) return Status::Ok();
  return wrong_type(detail, "model", "a string", *value);
}

// max_tokens (and its chat alias); 0 when neither is given.
Result<uint32_t> parse_max_tokens(const json& body, bool chat, ErrorDetail* detail) {
  uint32_t chosen = 0;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(name) == "max_completion_tokens") continue;
    const json* value = field(body, name);
    if (value == nullptr) continue;
    if (!value->is_number_integer()) return wrong_type(detail, name, "an integer", *value);
    const bool negative = value->is_number_unsigned() ? false : value->get<int64_t>() < 1;
    if (negative || (value->is_number_unsigned() && value->get<uint64_t>() == 0)) {
      return bad_field(detail, name, "must be at least 1, got " + value->dump());
    }
    const uint64_t n = value->is_number_unsigned() ? value->get<uint64_t>()
                                                   : static_cast<uint64_t>(value->get<int64_t>());
    if (n > std::numeric_limits<uint32_t>::max()) {
      return bad_field(detail, name,
                       "must be at most " + std::to_string(std::numeric_limits<uint32_t>::max()) +
                           ", got " + value->dump());
    }
    if (chosen != 0 && chosen != n) {
      return bad_field(detail, name, "max_tokens and max_completion_tokens disagree");
    }
    chosen = static_cast<uint32_t>(n);
  }
  return chosen;
}

Status parse_stop(const json& body, std::vector<std::string>* stop, ErrorDetail* detail) {
  return parse_stop_strings(body, "stop", engine::kMaxStopStrings, engine::kMaxStopBytes, stop,
                            detail);
}

// Everything but the prompt, shared by both endpoints.
// prompt_cache_key (OpenAI) and id_slot (llama.cpp): which conversation continues. The key is
// hashed at once; it is never kept, logged or echoed.
Status parse_route(const json& body, const ServedModel& model, ParsedGeneration* out,
                   ErrorDetail* detail) {
  engine::SessionRoute& route = out->request.route;
  if (const json* value = field(body, "prompt_cache_key"); value != nullptr && !value->is_null()) {
    if (!value->is_string()) return wrong_type(detail, "prompt_cache_key", "a string", *value);
    const std::string& key = value->get_ref<const std::string&>();
    if (key.empty() || key.size() > kMaxPromptCacheKeyBytes) {
      return bad_field(detail, "prompt_cache_key",
                       "must have 1 to " + std::to_string(kMaxPromptCacheKeyBytes) +
                           " bytes, got " + std::to_string(key.size()));
    }
    route.key = engine::session_key_of(key);
  }
  if (const json* value = field(body, "id_slot"); value != nullptr && !value->is_null()) {
    if (!value->is_number_integer()) return wrong_type(detail, "id_slot", "an integer", *value);
    // llama.cpp's -1 means "any slot": routed as if absent.
    if (!value->is_number_unsigned() && value->get<int64_t>() == -1) return Status::Ok();
    const bool negative = !value->is_number_unsigned() && value->get<int64_t>() < 0;
    if (negative || value->get<uint64_t>() >= model.sessions) {
      return bad_field(detail, "id_slot",
                       "must be -1 or a session number 0.." + std::to_string(model.sessions - 1) +
                           ", got " + value->dump());
    }
    route.slot = static_cast<uint32_t>(value->get<uint64_t>());
  }
  return Status::Ok();
}

// The fields each endpoint knows (served, or accepted only at the value that changes
// nothing); any other is refused by name.
Status refuse_unknown(const json& body, ApiKind kind, ErrorDetail* detail) {
  if (kind == ApiKind::kCompletion) {
    return refuse_unknown_fields(
        body,
        {"model",          "prompt",           "max_tokens",       "stop", "temperature", "top_p",
         "top_k",          "logit_bias",       "logprobs",         "seed", "n",           "stream",
         "stream_options", "prompt_cache_key", "id_slot",          "user", "echo",        "best_of",
         "suffix",         "presence_penalty", "frequency_penalty"},
        detail);
  }
  return refuse_unknown_fields(body,
                               {"model",
                                "messages",
                                "max_tokens",
                                "max_completion_tokens",
                                "stop",
                                "temperature",
                                "top_p",
                                "top_k",
                                "logit_bias",
                                "logprobs",
                                "top_logprobs",
                                "seed",
                                "n",
                                "stream",
                                "stream_options",
                                "prompt_cache_key",
                                "id_slot",
                                "user",
                                "metadata",
                                "service_tier",
                                "safety_identifier",
                                "store",
                                "parallel_tool_calls",
                                "response_format",
                                "tools",
                                "tool_choice",
                                "modalities",
                                "presence_penalty",
                                "frequency_penalty"},
                               detail);
}

// The fields with no effect on the answer, type-checked; those of one served value.
Status check_inert_fields(const json& body, ApiKind kind, ErrorDetail* detail) {
  for (const char* name : {"user", "service_tier", "safety_identifier"}) {
    const json* value = field(body, name);
    if (value != nullptr && !value->is_string())
      return wrong_type(detail, name, "a string", *value);
  }
  if (const json* value = field(body, "metadata"); value != nullptr && !value->is_object()) {
    return wrong_type(detail, "metadata", "an object", *value);
  }
  if (const json* value = field(body, "parallel_tool_calls");
      value != nullptr && !value->is_boolean()) {
    return wrong_type(detail, "parallel_tool_calls", "a boolean", *value);
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    const json* value = field(body, penalty);
    if (value == nullptr) continue;
    if (!value->is_number()) return wrong_type(detail, penalty, "a number", *value);
    if (value->get<double>() != 0) {
      return bad_field(detail, penalty, "penalties are not served (only 0), got " + value->dump());
    }
  }
  SIESTA_RETURN_IF_ERROR(expect_value(body, "n", 1, "only 1 choice per request is served", detail));
  if (kind == ApiKind::kCompletion) {
    SIESTA_RETURN_IF_ERROR(expect_value(body, "echo", false, "echo is not served", detail));
    SIESTA_RETURN_IF_ERROR(
        expect_value(body, "best_of", 1, "only 1 candidate per request is served", detail));
    return expect_value(body, "suffix", "", "a suffix is not served", detail);
  }
  SIESTA_RETURN_IF_ERROR(expect_value(body, "response_format", json{{"type", "text"}},
                                      "only {\"type\": \"text\"} is served", detail));
  SIESTA_RETURN_IF_ERROR(refuse_tools(body, detail));
  SIESTA_RETURN_IF_ERROR(
      expect_value(body, "modalities", json::array({"text"}), "only [\"text\"] is served", detail));
  return expect_value(body, "store", false,
                      "stored chat completions are not served (the Responses API keeps "
                      "conversations: /v1/responses)",
                      detail);
}

// logit_bias: {"<token id>": bias}. Token ids are bytes (engine/tokenizer.h), in decimal as
// the client's tokenizer would write them; OpenAI's bias range.
Status parse_logit_bias(const json& body, engine::GenerateRequest* request, ErrorDetail* detail) {
  const json* value = field(body, "logit_bias");
  if (value == nullptr) return Status::Ok();
  if (!value->is_object()) return wrong_type(detail, "logit_bias", "an object", *value);
  for (const auto& [key, bias] : value->items()) {
    const std::string param = "logit_bias." + key;
    const bool decimal = !key.empty() && key.size() <= 3 && (key == "0" || key[0] != '0') &&
                         key.find_first_not_of("0123456789") == std::string::npos;
    if (!decimal || std::stoi(key) >= static_cast<int>(engine::kVocabSize)) {
      return bad_field(
          detail, param,
          "keys must be token ids 0.." + std::to_string(engine::kVocabSize - 1) + " in decimal");
    }
    if (!bias.is_number()) return wrong_type(detail, param, "a number", bias);
    const double b = bias.get<double>();
    if (!std::isfinite(b) || b < -100 || b > 100) {
      return bad_field(detail, param, "must be within [-100, 100], got " + bias.dump());
    }
    request->logit_bias.emplace_back(static_cast<uint8_t>(std::stoi(key)), static_cast<float>(b));
  }
  return Status::Ok();
}

// logprobs (and chat's top_logprobs): what to show, and what the engine computes.
Status parse_logprobs(const json& body, ApiKind kind, ParsedGeneration* out, ErrorDetail* detail) {
  std::optional<uint32_t> shown;
  if (kind == ApiKind::kCompletion) {
    if (field(body, "logprobs") != nullptr) {
      SIESTA_ASSIGN_OR_RETURN(int64_t n,
                              integer_in(body, "logprobs", 0, kMaxCompletionLogprobs, detail));
      shown = static_cast<uint32_t>(n);
    }
  } else {
    bool wanted = false;
    if (field(body, "logprobs") != nullptr) {
      SIESTA_ASSIGN_OR_RETURN(wanted, boolean_of(body, "logprobs", detail));
    }
    if (field(body, "top_logprobs") != nullptr) {
      SIESTA_ASSIGN_OR_RETURN(int64_t n,
                              integer_in(body, "top_logprobs", 0, engine::kMaxTopLogprobs, detail));
      if (!wanted) return bad_field(detail, "top_logprobs", "needs \"logprobs\": true");
      shown = static_cast<uint32_t>(n);
    } else if (wanted) {
      shown = 0;
    }
  }
  if (shown && out->stream) {
    return bad_field(detail, "logprobs",
                     "not served with stream: ask without stream for the log probabilities");
  }
  out->shown_logprobs = shown;
  if (shown) out->request.logprobs = std::max<uint32_t>(*shown, 1);
  return Status::Ok();
}

Status parse_options(const json& body, ApiKind kind, ParsedGeneration* out, ErrorDetail* detail) {
  engine::GenerateRequest& request = out->request;
  SIESTA_RETURN_IF_ERROR(refuse_unknown(body, kind, detail));
  SIESTA_RETURN_IF_ERROR(check_inert_fields(body, kind, detail));
  SIESTA_RETURN_IF_ERROR(parse_stop(body, &request.stop, detail));
  if (field(body, "temperature") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(
        double t, number_in(body, "temperature", 0, engine::kMaxTemperature, false, detail));
    request.temperature = static_cast<float>(t);
  }
  if (field(body, "top_p") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(double p, number_in(body, "top_p", 0, 1, false, detail));
    // 0 (OpenAI accepts it) keeps the most probable token alone: the smallest set reaching
    // any positive mass.
    request.top_p = p > 0 ? static_cast<float>(p) : std::numeric_limits<float>::min();
  }
  if (field(body, "top_k") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(int64_t k, integer_in(body, "top_k", 0, INT32_MAX, detail));
    request.top_k = static_cast<uint32_t>(k);
  }
  SIESTA_RETURN_IF_ERROR(parse_logit_bias(body, &request, detail));
  if (const json* value = field(body, "seed")) {
    if (!value->is_number_integer()) return wrong_type(detail, "seed", "an integer", *value);
    request.seed = value->is_number_unsigned() ? value->get<uint64_t>()
                                               : static_cast<uint64_t>(value->get<int64_t>());
  }
  if (field(body, "stream") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(out->stream, boolean_of(body, "stream", detail));
  }
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) {
      return wrong_type(detail, "stream_options", "an object", *options);
    }
    if (const json* value = field(*options, "include_usage")) {
      if (!value->is_boolean()) {
        return wrong_type(detail, "stream_options.include_usage", "a boolean", *value);
      }
      out->include_usage = value->get<bool>();
    }
  }
  return parse_logprobs(body, kind, out, detail);
}

// Sets max_tokens (the server's default when `asked` is 0) and checks the context.
Status fit_context(uint32_t asked, const ServedModel& model, const char* prompt_param,
                   ParsedGeneration* out, ErrorDetail* detail) {
  const uint64_t prompt_tokens = out->request.prompt.size();
  const uint64_t left = model.context > prompt_tokens ? model.context - prompt_tokens : 0;
  // 0 for the engine: until a stop string or the context is full.
  uint64_t max_tokens = asked;
  if (asked == 0 && model.n_predict > 0) {
    max_tokens = std::max<uint64_t>(1, std::min<uint64_t>(model.n_predict, left));
  }
  const uint64_t needed = prompt_tokens + std::max<uint64_t>(max_tokens, 1);
  if (needed > model.context) {
    if (detail != nullptr) {
      detail->param = prompt_param;
      detail->code = "context_length_exceeded";
    }
    const std::string where = std::string_view(prompt_param) == "messages" ? "messages" : "prompt";
    return InvalidArgument("This model's maximum context length is " +
                           std::to_string(model.context) + " tokens. However, you requested " +
                           std::to_string(needed) + " tokens (" + std::to_string(prompt_tokens) +
                           " in the " + where + ", " + std::to_string(needed - prompt_tokens) +
                           " in the completion). Please reduce the length of the " + where +
                           " or completion.");
  }
  out->request.max_tokens = static_cast<uint32_t>(max_tokens);
  return Status::Ok();
}

}  // namespace

Result<ParsedGeneration> parse_completion_request(std::string_view body, const ServedModel& model,
                                                  ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(check_model(object, detail));
  ParsedGeneration out;
  const json* prompt = field(object, "prompt");
  if (prompt == nullptr) return bad_field(detail, "prompt", "missing");
  if (prompt->is_array()) {
    if (prompt->size() != 1 || !(*prompt)[0].is_string()) {
      return bad_field(detail, "prompt", "an array prompt must hold exactly one string");
    }
    prompt = &(*prompt)[0];
  }
  if (!prompt->is_string()) return wrong_type(detail, "prompt", "a string", *prompt);
  out.request.prompt = prompt->get<std::string>();
  if (out.request.prompt.empty()) return bad_field(detail, "prompt", "must not be empty");
  SIESTA_ASSIGN_OR_RETURN(uint32_t asked, parse_max_tokens(object, false, detail));
  SIESTA_RETURN_IF_ERROR(parse_options(object, ApiKind::kCompletion, &out, detail));
  SIESTA_RETURN_IF_ERROR(parse_route(object, model, &out, detail));
  SIESTA_RETURN_IF_ERROR(fit_context(asked, model, "prompt", &out, detail));
  return out;
}

namespace {

// The "messages" of a chat request, checked and rendered (chat_template.h).
Result<std::string> render_chat_messages(const json& object, ErrorDetail* detail) {
  const json* messages = field(object, "messages");
  if (messages == nullptr) return bad_field(detail, "messages", "missing");
  if (!messages->is_array()) return wrong_type(detail, "messages", "an array", *messages);
  if (messages->empty()) return bad_field(detail, "messages", "must not be empty");
  std::vector<ChatMessage> chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const json& message = (*messages)[i];
    if (!message.is_object()) return wrong_type(detail, param, "an object", message);
    const json* role = field(message, "role");
    if (role == nullptr) return bad_field(detail, param + ".role", "missing");
    if (!role->is_string()) return wrong_type(detail, param + ".role", "a string", *role);
    std::optional<ChatRole> parsed_role = parse_chat_role(role->get_ref<const std::string&>());
    if (!parsed_role) {
      return bad_field(detail, param + ".role",
                       "unknown role " + quote_for_log(role->get_ref<const std::string&>()) +
                           " (expected \"system\", \"user\" or \"assistant\")");
    }
    const json* content = field(message, "content");
    if (content == nullptr) return bad_field(detail, param + ".content", "missing");
    SIESTA_ASSIGN_OR_RETURN(std::string text,
                            parse_text_content(*content, param + ".content", detail));
    chat.push_back({*parsed_role, std::move(text)});
  }
  return render_chat_prompt(chat);
}

}  // namespace

Result<std::string> render_chat_request_prompt(std::string_view body, ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  return render_chat_messages(object, detail);
}

Result<ParsedGeneration> parse_chat_request(std::string_view body, const ServedModel& model,
                                            ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(check_model(object, detail));
  ParsedGeneration out;
  SIESTA_ASSIGN_OR_RETURN(out.request.prompt, render_chat_messages(object, detail));
  SIESTA_ASSIGN_OR_RETURN(uint32_t asked, parse_max_tokens(object, true, detail));
  SIESTA_RETURN_IF_ERROR(parse_options(object, ApiKind::kChat, &out, detail));
  SIESTA_RETURN_IF_ERROR(parse_route(object, model, &out, detail));
  SIESTA_RETURN_IF_ERROR(fit_context(asked, model, "messages", &out, detail));
  return out;
}

std::string new_response_id(ApiKind kind) {
  return random_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
}

std::string_view openai_finish_reason(engine::FinishReason finish) {
  return finish == engine::FinishReason::kLength ? "length" : "stop";
}

json usage_json(const engine::GenerateResult& result) {
  return {{"prompt_tokens", result.prompt_tokens},
          {"completion_tokens", result.completion_tokens},
          {"total_tokens", uint64_t{result.prompt_tokens} + result.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", result.cached_tokens}}}};
}

namespace {

json envelope(const ResponseMeta& meta, bool chunk) {
  const bool chat = meta.kind == ApiKind::kChat;
  return {
      {"id", meta.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", meta.created},
      {"model", meta.model},
      {"system_fingerprint", meta.system_fingerprint}};
}

// A token's text: the byte itself when it is UTF-8 alone (ASCII), else "bytes:\\xNN".
std::string token_text(uint8_t token) {
  if (token < 0x80) return std::string(1, static_cast<char>(token));
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("bytes:\\x") + kHex[token >> 4] + kHex[token & 0xf];
}

json chat_token_json(uint8_t token, float logprob) {
  return {{"token", token_text(token)}, {"logprob", logprob}, {"bytes", json::array({token})}};
}

// The choice's "logprobs": null, or the text's tokens (see response_json()).
json logprobs_json(const ResponseMeta& meta, const engine::GenerateResult& result) {
  if (!meta.shown_logprobs) return nullptr;
  const uint32_t shown = *meta.shown_logprobs;
  const size_t count = std::min(result.text.size(), result.logprobs.size());
  auto tops = [&](const engine::TokenLogprob& entry) {
    return std::span(entry.top.data(), std::min<size_t>(shown, entry.top.size()));
  };
  if (meta.kind == ApiKind::kChat) {
    json content = json::array();
    for (size_t i = 0; i < count; ++i) {
      const engine::TokenLogprob& entry = result.logprobs[i];
      json item = chat_token_json(entry.token, entry.logprob);
      json top = json::array();
      for (const auto& [token, logprob] : tops(entry))
        top.push_back(chat_token_json(token, logprob));
      item["top_logprobs"] = std::move(top);
      content.push_back(std::move(item));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < count; ++i) {
    const engine::TokenLogprob& entry = result.logprobs[i];
    tokens.push_back(token_text(entry.token));
    token_logprobs.push_back(entry.logprob);
    json top = json::object();
    for (const auto& [token, logprob] : tops(entry)) top[token_text(token)] = logprob;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(i);  // one token per byte
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

json choice(const ResponseMeta& meta, std::string_view text, const json& finish, bool first,
            bool whole, json logprobs = nullptr) {
  json c = {{"index", 0}};
  if (meta.kind == ApiKind::kCompletion) {
    c["text"] = std::string(text);
  } else if (whole) {
    c["message"] = {{"role", "assistant"}, {"content", std::string(text)}, {"refusal", nullptr}};
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = std::string(text);
    c["delta"] = std::move(delta);
  }
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish;
  return c;
}

}  // namespace

json response_json(const ResponseMeta& meta, const engine::GenerateResult& result) {
  json body = envelope(meta, false);
  body["choices"] =
      json::array({choice(meta, result.text, std::string(openai_finish_reason(result.finish)),
                          false, true, logprobs_json(meta, result))});
  body["usage"] = usage_json(result);
  return body;
}

json text_chunk_json(const ResponseMeta& meta, std::string_view text, bool first,
                     bool include_usage) {
  json body = envelope(meta, true);
  body["choices"] = json::array({choice(meta, text, nullptr, first, false)});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

json finish_chunk_json(const ResponseMeta& meta, engine::FinishReason finish, bool include_usage) {
  json body = envelope(meta, true);
  body["choices"] =
      json::array({choice(meta, "", std::string(openai_finish_reason(finish)), false, false)});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

json usage_chunk_json(const ResponseMeta& meta, const engine::GenerateResult& result) {
  json body = envelope(meta, true);
  body["choices"] = json::array();
  body["usage"] = usage_json(result);
  return body;
}

std::string sse_event(const json& chunk) { return "data: " + dump_json(chunk) + "\n\n"; }

json model_json(std::string_view model, int64_t created) {
  return {{"id", std::string(model)},
          {"object", "model"},
          {"created", created},
          {"owned_by", "siesta"}};
}

json models_json(std::string_view model, int64_t created) {
  return {{"object", "list"}, {"data", json::array({model_json(model, created)})}};
}

}  // namespace siesta::server
