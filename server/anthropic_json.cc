#include "server/anthropic_json.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "server/chat_template.h"
#include "server/json_fields.h"
#include "server/random_id.h"

namespace siesta::server {
namespace {

using nlohmann::json;

// Anthropic's stop_sequences: OpenAI's bounds, which the engine's stop matcher has.
constexpr size_t kMaxStopSequences = engine::kMaxStopStrings;

// The fields a /v1/messages body may hold; any other is refused by name (tools with their own
// message).
Status refuse_unknown_fields(const json& body, ErrorDetail* detail) {
  for (const char* tools : {"tools", "tool_choice"}) {
    if (body.contains(tools))
      return bad_field(detail, tools, "tools are not served by this server");
  }
  return refuse_unknown_fields(body,
                               {"model", "max_tokens", "messages", "system", "temperature", "top_p",
                                "top_k", "stop_sequences", "stream", "metadata"},
                               detail);
}

// Text blocks only: a string, or an array of {"type": "text", "text"} (an image, a document, a
// tool result... is refused with its block named).
Result<std::string> block_text(const json& value, const std::string& param, ErrorDetail* detail) {
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const json& block = value[i];
      const json* type = block.is_object() ? field(block, "type") : nullptr;
      if (type != nullptr && type->is_string() && *type != "text") {
        return bad_field(detail, param + "[" + std::to_string(i) + "].type",
                         "only \"text\" blocks are served, got " + type->dump());
      }
    }
  }
  return parse_text_content(value, param, detail);
}

// system and messages, rendered as chat_template.h renders a chat.
Result<std::string> render_prompt(const json& body, ErrorDetail* detail) {
  std::vector<ChatMessage> messages;
  if (const json* system = field(body, "system")) {
    SIESTA_ASSIGN_OR_RETURN(std::string text, block_text(*system, "system", detail));
    messages.push_back({ChatRole::kSystem, std::move(text)});
  }
  const json* list = field(body, "messages");
  if (list == nullptr) return bad_field(detail, "messages", "missing");
  if (!list->is_array()) return wrong_type(detail, "messages", "an array", *list);
  if (list->empty()) return bad_field(detail, "messages", "must hold at least one message");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const json& message = (*list)[i];
    if (!message.is_object()) return wrong_type(detail, param, "an object", message);
    const json* role = field(message, "role");
    if (role == nullptr) return bad_field(detail, param + ".role", "missing");
    if (!role->is_string() || (*role != "user" && *role != "assistant")) {
      return bad_field(detail, param + ".role", "must be \"user\" or \"assistant\"");
    }
    const json* content = field(message, "content");
    if (content == nullptr) return bad_field(detail, param + ".content", "missing");
    SIESTA_ASSIGN_OR_RETURN(std::string text, block_text(*content, param + ".content", detail));
    messages.push_back({*role == "user" ? ChatRole::kUser : ChatRole::kAssistant, std::move(text)});
  }
  return render_chat_prompt(messages);
}

// The stop sequence that ended the generation: the generated tokens past the text (the text
// leaves the matched stop string out; the tokens hold it: one token per byte).
std::string stop_sequence_of(const engine::GenerateResult& result) {
  if (result.finish != engine::FinishReason::kStop || result.tokens.size() < result.text.size()) {
    return {};
  }
  return std::string(result.tokens.begin() + static_cast<ptrdiff_t>(result.text.size()),
                     result.tokens.end());
}

json usage_of(const engine::GenerateResult& result) {
  return {
      {"input_tokens", result.prompt_tokens - std::min(result.cached_tokens, result.prompt_tokens)},
      {"output_tokens", result.completion_tokens},
      {"cache_creation_input_tokens", 0},
      {"cache_read_input_tokens", result.cached_tokens}};
}

}  // namespace

Result<ParsedMessages> parse_messages_request(std::string_view body, const ServedModel& model,
                                              ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(refuse_unknown_fields(object, detail));
  ParsedMessages out;
  engine::GenerateRequest& request = out.request;
  const json* name = field(object, "model");
  if (name == nullptr) return bad_field(detail, "model", "missing");
  if (!name->is_string()) return wrong_type(detail, "model", "a string", *name);
  const json* max_tokens = field(object, "max_tokens");
  if (max_tokens == nullptr) return bad_field(detail, "max_tokens", "missing");
  if (!max_tokens->is_number_integer()) {
    return wrong_type(detail, "max_tokens", "an integer", *max_tokens);
  }
  if (max_tokens->is_number_integer() &&
      (!max_tokens->is_number_unsigned() && max_tokens->get<int64_t>() < 1)) {
    return bad_field(detail, "max_tokens", "must be at least 1, got " + max_tokens->dump());
  }
  const uint64_t asked = max_tokens->get<uint64_t>();
  if (asked == 0) return bad_field(detail, "max_tokens", "must be at least 1, got 0");
  SIESTA_ASSIGN_OR_RETURN(request.prompt, render_prompt(object, detail));
  request.temperature = static_cast<float>(kAnthropicMaxTemperature);  // Anthropic's default
  if (field(object, "temperature") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(const double t, number_in(object, "temperature", 0,
                                                      kAnthropicMaxTemperature, false, detail));
    request.temperature = static_cast<float>(t);
  }
  if (field(object, "top_p") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(const double p, number_in(object, "top_p", 0, 1, true, detail));
    request.top_p = static_cast<float>(p);
  }
  if (const json* k = field(object, "top_k")) {
    if (!k->is_number_integer()) return wrong_type(detail, "top_k", "an integer", *k);
    if (!k->is_number_unsigned() || k->get<uint64_t>() == 0) {
      return bad_field(detail, "top_k", "must be at least 1, got " + k->dump());
    }
    request.top_k = static_cast<uint32_t>(std::min<uint64_t>(k->get<uint64_t>(), UINT32_MAX));
  }
  SIESTA_RETURN_IF_ERROR(parse_stop_strings(object, "stop_sequences", kMaxStopSequences,
                                            engine::kMaxStopBytes, &request.stop, detail));
  if (const json* stream = field(object, "stream")) {
    if (!stream->is_boolean()) return wrong_type(detail, "stream", "a boolean", *stream);
    out.stream = stream->get<bool>();
  }
  if (const json* metadata = field(object, "metadata")) {
    if (!metadata->is_object()) return wrong_type(detail, "metadata", "an object", *metadata);
    for (const auto& [key, value] : metadata->items()) {
      if (key != "user_id") {
        return bad_field(detail, "metadata." + key, "this field is not served by this server");
      }
      if (!value.is_null() && !value.is_string()) {
        return wrong_type(detail, "metadata.user_id", "a string", value);
      }
    }
  }
  const uint64_t prompt_tokens = request.prompt.size();
  if (prompt_tokens + asked > model.context) {
    if (detail != nullptr) detail->param = "max_tokens";
    return InvalidArgument("prompt is too long: " + std::to_string(prompt_tokens) +
                           " tokens and max_tokens " + std::to_string(asked) + " exceed the " +
                           std::to_string(model.context) + "-token context");
  }
  request.max_tokens = static_cast<uint32_t>(asked);
  return out;
}

Result<uint64_t> count_message_tokens(std::string_view body, ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(refuse_unknown_fields(object, detail));
  SIESTA_ASSIGN_OR_RETURN(std::string prompt, render_prompt(object, detail));
  return prompt.size();
}

std::string new_message_id() { return random_id("msg_"); }

std::string_view anthropic_stop_reason(engine::FinishReason finish) {
  return finish == engine::FinishReason::kStop ? "stop_sequence" : "max_tokens";
}

json message_json(std::string_view id, std::string_view model,
                  const engine::GenerateResult& result) {
  const std::string stop = stop_sequence_of(result);
  return {{"id", std::string(id)},
          {"type", "message"},
          {"role", "assistant"},
          {"model", std::string(model)},
          {"content", json::array({{{"type", "text"}, {"text", result.text}}})},
          {"stop_reason", std::string(anthropic_stop_reason(result.finish))},
          {"stop_sequence", stop.empty() ? json(nullptr) : json(stop)},
          {"usage", usage_of(result)}};
}

std::string anthropic_event(std::string_view type, const json& data) {
  return "event: " + std::string(type) +
         "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string anthropic_stream_begin(std::string_view id, std::string_view model,
                                   uint64_t prompt_tokens) {
  const json message = {{"id", std::string(id)},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", std::string(model)},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage",
                         {{"input_tokens", prompt_tokens},
                          {"output_tokens", 0},
                          {"cache_creation_input_tokens", 0},
                          {"cache_read_input_tokens", 0}}}};
  return anthropic_event("message_start", {{"type", "message_start"}, {"message", message}}) +
         anthropic_event("content_block_start",
                         {{"type", "content_block_start"},
                          {"index", 0},
                          {"content_block", {{"type", "text"}, {"text", ""}}}}) +
         anthropic_event("ping", {{"type", "ping"}});
}

std::string anthropic_stream_piece(std::string_view text) {
  return anthropic_event("content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", 0},
                          {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}});
}

std::string anthropic_stream_end(const engine::GenerateResult& result) {
  const std::string stop = stop_sequence_of(result);
  return anthropic_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
         anthropic_event("message_delta",
                         {{"type", "message_delta"},
                          {"delta",
                           {{"stop_reason", std::string(anthropic_stop_reason(result.finish))},
                            {"stop_sequence", stop.empty() ? json(nullptr) : json(stop)}}},
                          {"usage", usage_of(result)}}) +
         anthropic_event("message_stop", {{"type", "message_stop"}});
}

json anthropic_error_json(const ApiError& error) {
  std::string_view type;
  switch (error.http_status) {
    case 400: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: type = error.http_status < 500 ? "invalid_request_error" : "api_error"; break;
  }
  return {{"type", "error"}, {"error", {{"type", std::string(type)}, {"message", error.message}}}};
}

}  // namespace siesta::server
