#include "server/openai_json.h"

#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "core/base/log_text.h"
#include "engine/sampler.h"
#include "server/chat_template.h"

namespace siesta::server {
namespace {

using nlohmann::json;

// The failure of one field: InvalidArgument "<param>: <why>", and detail->param = param.
Status bad_field(ErrorDetail* detail, const std::string& param, const std::string& why) {
  if (detail != nullptr) detail->param = param;
  return InvalidArgument(param + ": " + why);
}

// A field of `object`; null when absent or JSON null (OpenAI treats null as "not given").
const json* field(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string_view type_name(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // "string", "array", "object", "boolean", "null"
}

Status wrong_type(ErrorDetail* detail, const std::string& param, std::string_view expected,
                  const json& value) {
  return bad_field(detail, param,
                   "expected " + std::string(expected) + ", got " + std::string(type_name(value)));
}

Result<json> parse_object(std::string_view body, ErrorDetail* detail) {
  // nlohmann's lexer takes a NUL byte for the end of its input, so "{...}\0junk" would parse
  // as "{...}"; JSON text never holds a raw NUL (RFC 8259: control characters are escaped).
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return InvalidArgument("the request body is not valid JSON: a NUL byte at offset " +
                           std::to_string(nul));
  }
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end());
  } catch (const std::exception& e) {
    // nlohmann's message names the position; it may quote input bytes, so quote it whole.
    return InvalidArgument("the request body is not valid JSON: " + quote_for_log(e.what()));
  }
  if (!parsed.is_object()) {
    if (detail != nullptr) detail->param.clear();
    return InvalidArgument("the request body must be a JSON object, got " +
                           std::string(type_name(parsed)));
  }
  return parsed;
}

Status check_model(const json& body, const ServedModel& model, ErrorDetail* detail) {
  const json* value = field(body, "model");
  if (value == nullptr) return Status::Ok();
  if (!value->is_string()) return wrong_type(detail, "model", "a string", *value);
  const std::string& name = value->get_ref<const std::string&>();
  if (name == model.name) return Status::Ok();
  if (detail != nullptr) {
    detail->param = "model";
    detail->code = "model_not_found";
  }
  return NotFound("The model " + quote_for_log(name) + " does not exist; this server serves " +
                  quote_for_log(model.name));
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
  const json* value = field(body, "stop");
  if (value == nullptr) return Status::Ok();
  std::vector<const json*> items;
  if (value->is_string()) {
    items.push_back(value);
  } else if (value->is_array()) {
    for (const json& item : *value) items.push_back(&item);
  } else {
    return wrong_type(detail, "stop", "a string or an array of strings", *value);
  }
  if (items.size() > engine::kMaxStopStrings) {
    return bad_field(detail, "stop",
                     "at most " + std::to_string(engine::kMaxStopStrings) +
                         " stop strings are accepted, got " + std::to_string(items.size()));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string param = value->is_array() ? "stop[" + std::to_string(i) + "]" : "stop";
    if (!items[i]->is_string()) return wrong_type(detail, param, "a string", *items[i]);
    const std::string& s = items[i]->get_ref<const std::string&>();
    if (s.empty() || s.size() > engine::kMaxStopBytes) {
      return bad_field(detail, param,
                       "must have 1 to " + std::to_string(engine::kMaxStopBytes) + " bytes, got " +
                           std::to_string(s.size()));
    }
    stop->push_back(s);
  }
  return Status::Ok();
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

Status parse_options(const json& body, ParsedGeneration* out, ErrorDetail* detail) {
  engine::GenerateRequest& request = out->request;
  SIESTA_RETURN_IF_ERROR(parse_stop(body, &request.stop, detail));
  if (const json* value = field(body, "temperature")) {
    if (!value->is_number()) return wrong_type(detail, "temperature", "a number", *value);
    const double t = value->get<double>();
    if (!std::isfinite(t) || t < 0 || t > engine::kMaxTemperature) {
      return bad_field(detail, "temperature",
                       "must be between 0 and " + std::to_string(int(engine::kMaxTemperature)) +
                           ", got " + value->dump());
    }
    request.temperature = static_cast<float>(t);
  }
  if (const json* value = field(body, "seed")) {
    if (!value->is_number_integer()) return wrong_type(detail, "seed", "an integer", *value);
    request.seed = value->is_number_unsigned() ? value->get<uint64_t>()
                                               : static_cast<uint64_t>(value->get<int64_t>());
  }
  if (const json* value = field(body, "n")) {
    if (!value->is_number_integer()) return wrong_type(detail, "n", "an integer", *value);
    if (*value != 1) return bad_field(detail, "n", "only 1 choice per request is served");
  }
  if (const json* value = field(body, "stream")) {
    if (!value->is_boolean()) return wrong_type(detail, "stream", "a boolean", *value);
    out->stream = value->get<bool>();
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
  return Status::Ok();
}

// Sets max_tokens (the default when `asked` is 0) and checks the context.
Status fit_context(uint32_t asked, const ServedModel& model, const char* prompt_param,
                   ParsedGeneration* out, ErrorDetail* detail) {
  const uint64_t prompt_tokens = out->request.prompt.size();
  uint64_t max_tokens = asked;
  if (asked == 0) {
    const uint64_t left = model.context > prompt_tokens ? model.context - prompt_tokens : 0;
    max_tokens = std::max<uint64_t>(1, std::min<uint64_t>(kDefaultMaxTokens, left));
  }
  if (prompt_tokens + max_tokens > model.context) {
    if (detail != nullptr) {
      detail->param = prompt_param;
      detail->code = "context_length_exceeded";
    }
    const std::string where = std::string_view(prompt_param) == "messages" ? "messages" : "prompt";
    return InvalidArgument(
        "This model's maximum context length is " + std::to_string(model.context) +
        " tokens. However, you requested " + std::to_string(prompt_tokens + max_tokens) +
        " tokens (" + std::to_string(prompt_tokens) + " in the " + where + ", " +
        std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
        where + " or completion.");
  }
  out->request.max_tokens = static_cast<uint32_t>(max_tokens);
  return Status::Ok();
}

Result<std::string> parse_content(const json& value, const std::string& param,
                                  ErrorDetail* detail) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) return wrong_type(detail, param, "a string or an array of parts", value);
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string part = param + "[" + std::to_string(i) + "]";
    const json& item = value[i];
    if (!item.is_object()) return wrong_type(detail, part, "an object", item);
    const json* type = field(item, "type");
    if (type == nullptr || !type->is_string() || *type != "text") {
      return bad_field(detail, part + ".type", "only \"text\" parts are served");
    }
    const json* piece = field(item, "text");
    if (piece == nullptr) return bad_field(detail, part + ".text", "missing");
    if (!piece->is_string()) return wrong_type(detail, part + ".text", "a string", *piece);
    text += piece->get_ref<const std::string&>();
  }
  return text;
}

}  // namespace

Result<ParsedGeneration> parse_completion_request(std::string_view body, const ServedModel& model,
                                                  ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(check_model(object, model, detail));
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
  SIESTA_RETURN_IF_ERROR(parse_options(object, &out, detail));
  SIESTA_RETURN_IF_ERROR(parse_route(object, model, &out, detail));
  SIESTA_RETURN_IF_ERROR(fit_context(asked, model, "prompt", &out, detail));
  return out;
}

Result<ParsedGeneration> parse_chat_request(std::string_view body, const ServedModel& model,
                                            ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(check_model(object, model, detail));
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
    SIESTA_ASSIGN_OR_RETURN(std::string text, parse_content(*content, param + ".content", detail));
    chat.push_back({*parsed_role, std::move(text)});
  }
  ParsedGeneration out;
  out.request.prompt = render_chat_prompt(chat);
  SIESTA_ASSIGN_OR_RETURN(uint32_t asked, parse_max_tokens(object, true, detail));
  SIESTA_RETURN_IF_ERROR(parse_options(object, &out, detail));
  SIESTA_RETURN_IF_ERROR(parse_route(object, model, &out, detail));
  SIESTA_RETURN_IF_ERROR(fit_context(asked, model, "messages", &out, detail));
  return out;
}

std::string new_response_id(ApiKind kind) {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-";
  std::lock_guard<std::mutex> lock(mutex);
  for (int word = 0; word < 3; ++word) {
    uint64_t bits = generator();
    for (int i = 0; i < 8; ++i, bits >>= 4) id += kHex[bits & 0xf];
  }
  return id;
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
      {"model", meta.model}};
}

json choice(const ResponseMeta& meta, std::string_view text, const json& finish, bool first,
            bool whole) {
  json c = {{"index", 0}};
  if (meta.kind == ApiKind::kCompletion) {
    c["text"] = std::string(text);
    c["logprobs"] = nullptr;
  } else if (whole) {
    c["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
    c["logprobs"] = nullptr;
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = std::string(text);
    c["delta"] = std::move(delta);
    c["logprobs"] = nullptr;
  }
  c["finish_reason"] = finish;
  return c;
}

}  // namespace

json response_json(const ResponseMeta& meta, const engine::GenerateResult& result) {
  json body = envelope(meta, false);
  body["choices"] = json::array(
      {choice(meta, result.text, std::string(openai_finish_reason(result.finish)), false, true)});
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
