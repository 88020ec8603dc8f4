#include "server/responses_json.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/base/log_text.h"
#include "server/json_fields.h"
#include "server/openai_json.h"
#include "server/random_id.h"

namespace siesta::server {
namespace {

using nlohmann::json;

// A message's content: a string, or input_text / output_text parts (text parts of the
// conversation, whoever wrote them).
Result<std::string> message_text(const json& content, const std::string& param,
                                 ErrorDetail* detail) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return wrong_type(detail, param, "a string or an array of parts", content);
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part = param + "[" + std::to_string(i) + "]";
    const json& item = content[i];
    if (!item.is_object()) return wrong_type(detail, part, "an object", item);
    const json* type = field(item, "type");
    if (type == nullptr || !type->is_string() ||
        (*type != "input_text" && *type != "output_text")) {
      return bad_field(detail, part + ".type",
                       "only \"input_text\" and \"output_text\" parts are served, got " +
                           (type == nullptr ? std::string("none") : type->dump()));
    }
    const json* piece = field(item, "text");
    if (piece == nullptr) return bad_field(detail, part + ".text", "missing");
    if (!piece->is_string()) return wrong_type(detail, part + ".text", "a string", *piece);
    text += piece->get_ref<const std::string&>();
  }
  return text;
}

Result<std::vector<ChatMessage>> parse_input(const json& body, ErrorDetail* detail) {
  const json* input = field(body, "input");
  if (input == nullptr) return bad_field(detail, "input", "missing");
  if (input->is_string()) {
    if (input->get_ref<const std::string&>().empty()) {
      return bad_field(detail, "input", "must not be empty");
    }
    return std::vector<ChatMessage>{{ChatRole::kUser, input->get<std::string>()}};
  }
  if (!input->is_array()) return wrong_type(detail, "input", "a string or an array", *input);
  if (input->empty()) return bad_field(detail, "input", "must hold at least one message");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < input->size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    const json& item = (*input)[i];
    if (!item.is_object()) return wrong_type(detail, param, "an object", item);
    if (const json* type = field(item, "type"); type != nullptr && *type != "message") {
      return bad_field(detail, param + ".type",
                       "only messages are served (no tool calls, images, files or reasoning), "
                       "got " +
                           type->dump());
    }
    for (const auto& [name, value] : item.items()) {
      if (name != "type" && name != "role" && name != "content" && name != "id" &&
          name != "status") {
        return bad_field(detail, param + "." + name, "this field is not served by this server");
      }
    }
    const json* role = field(item, "role");
    if (role == nullptr) return bad_field(detail, param + ".role", "missing");
    if (!role->is_string()) return wrong_type(detail, param + ".role", "a string", *role);
    const std::string& name = role->get_ref<const std::string&>();
    // OpenAI's "developer" messages are its newer name for system ones.
    const std::optional<ChatRole> parsed =
        name == "developer" ? std::optional(ChatRole::kSystem) : parse_chat_role(name);
    if (!parsed) {
      return bad_field(detail, param + ".role",
                       "unknown role " + quote_for_log(name) +
                           " (expected \"user\", \"assistant\", \"system\" or \"developer\")");
    }
    const json* content = field(item, "content");
    if (content == nullptr) return bad_field(detail, param + ".content", "missing");
    SIESTA_ASSIGN_OR_RETURN(std::string text, message_text(*content, param + ".content", detail));
    messages.push_back({*parsed, std::move(text)});
  }
  return messages;
}

// The fields with no effect, and those served at one value only.
Status check_neutral_fields(const json& body, ErrorDetail* detail) {
  for (const char* name : {"user", "safety_identifier", "service_tier"}) {
    const json* value = field(body, name);
    if (value != nullptr && !value->is_string())
      return wrong_type(detail, name, "a string", *value);
  }
  if (const json* value = field(body, "parallel_tool_calls");
      value != nullptr && !value->is_boolean()) {
    return wrong_type(detail, "parallel_tool_calls", "a boolean", *value);
  }
  SIESTA_RETURN_IF_ERROR(expect_value(body, "text", json{{"format", {{"type", "text"}}}},
                                      "only {\"format\": {\"type\": \"text\"}} is served", detail));
  SIESTA_RETURN_IF_ERROR(refuse_tools(body, detail));
  SIESTA_RETURN_IF_ERROR(expect_value(body, "truncation", "disabled",
                                      "only \"disabled\" is served (a prompt too long is "
                                      "refused, never cut)",
                                      detail));
  SIESTA_RETURN_IF_ERROR(
      expect_value(body, "background", false, "background responses are not served", detail));
  SIESTA_RETURN_IF_ERROR(
      expect_value(body, "include", json::array(), "no extra output is served", detail));
  return Status::Ok();
}

}  // namespace

Result<ResponsesRequest> parse_responses_request(std::string_view body, ErrorDetail* detail) {
  SIESTA_ASSIGN_OR_RETURN(json object, parse_object(body, detail));
  SIESTA_RETURN_IF_ERROR(refuse_unknown_fields(object,
                                               {"model",
                                                "input",
                                                "instructions",
                                                "previous_response_id",
                                                "max_output_tokens",
                                                "temperature",
                                                "top_p",
                                                "stream",
                                                "store",
                                                "prompt_cache_key",
                                                "metadata",
                                                "user",
                                                "safety_identifier",
                                                "service_tier",
                                                "text",
                                                "tools",
                                                "tool_choice",
                                                "parallel_tool_calls",
                                                "truncation",
                                                "background",
                                                "include",
                                                "reasoning"},
                                               detail));
  SIESTA_RETURN_IF_ERROR(check_neutral_fields(object, detail));
  if (const json* reasoning = field(object, "reasoning")) {
    return bad_field(detail, "reasoning",
                     "this model does not reason (only null is served), got " + reasoning->dump());
  }
  ResponsesRequest out;
  if (const json* model = field(object, "model"); model != nullptr && !model->is_string()) {
    return wrong_type(detail, "model", "a string", *model);
  }
  SIESTA_ASSIGN_OR_RETURN(out.input, parse_input(object, detail));
  if (const json* value = field(object, "instructions")) {
    if (!value->is_string()) return wrong_type(detail, "instructions", "a string", *value);
    out.instructions = value->get<std::string>();
  }
  if (const json* value = field(object, "previous_response_id")) {
    if (!value->is_string()) {
      return wrong_type(detail, "previous_response_id", "a string", *value);
    }
    out.previous_response_id = value->get<std::string>();
  }
  if (const json* value = field(object, "prompt_cache_key")) {
    if (!value->is_string()) return wrong_type(detail, "prompt_cache_key", "a string", *value);
    const std::string& key = value->get_ref<const std::string&>();
    if (key.empty() || key.size() > kMaxPromptCacheKeyBytes) {
      return bad_field(detail, "prompt_cache_key",
                       "must have 1 to " + std::to_string(kMaxPromptCacheKeyBytes) +
                           " bytes, got " + std::to_string(key.size()));
    }
    if (out.previous_response_id) {
      return bad_field(detail, "prompt_cache_key",
                       "a response continued with previous_response_id stays in that "
                       "response's conversation");
    }
    out.cache_key = engine::session_key_of(key);
  }
  if (field(object, "max_output_tokens") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(int64_t n,
                            integer_in(object, "max_output_tokens", 1, UINT32_MAX, detail));
    out.max_output_tokens = static_cast<uint32_t>(n);
  }
  if (field(object, "temperature") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(
        double t, number_in(object, "temperature", 0, engine::kMaxTemperature, false, detail));
    out.temperature = static_cast<float>(t);
  }
  if (field(object, "top_p") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(double p, number_in(object, "top_p", 0, 1, false, detail));
    out.top_p = static_cast<float>(p);
  }
  if (field(object, "stream") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(out.stream, boolean_of(object, "stream", detail));
  }
  if (field(object, "store") != nullptr) {
    SIESTA_ASSIGN_OR_RETURN(out.store, boolean_of(object, "store", detail));
  }
  if (const json* value = field(object, "metadata")) {
    if (!value->is_object()) return wrong_type(detail, "metadata", "an object", *value);
    out.metadata = *value;
  }
  return out;
}

std::vector<ChatMessage> responses_conversation(const ResponsesRequest& asked,
                                                const StoredResponse* previous,
                                                std::string_view answer) {
  std::vector<ChatMessage> messages;
  if (previous != nullptr) messages = previous->messages;
  messages.insert(messages.end(), asked.input.begin(), asked.input.end());
  messages.push_back({ChatRole::kAssistant, std::string(answer)});
  return messages;
}

Result<engine::GenerateRequest> responses_generate_request(
    const ResponsesRequest& asked, const StoredResponse* previous, const ServedModel& model,
    std::optional<engine::SessionKey> fresh_key, ErrorDetail* detail) {
  std::vector<ChatMessage> messages;
  if (asked.instructions) messages.push_back({ChatRole::kSystem, *asked.instructions});
  if (previous != nullptr) {
    messages.insert(messages.end(), previous->messages.begin(), previous->messages.end());
  }
  messages.insert(messages.end(), asked.input.begin(), asked.input.end());
  engine::GenerateRequest request;
  request.prompt = render_chat_prompt(messages);
  request.temperature = asked.temperature;
  // 0 (OpenAI accepts it) keeps the most probable token alone.
  request.top_p = asked.top_p > 0 ? asked.top_p : std::numeric_limits<float>::min();
  if (previous != nullptr) {
    request.route.key = previous->key;
  } else {
    request.route.key = asked.cache_key ? asked.cache_key : fresh_key;
  }
  const uint64_t prompt_tokens = request.prompt.size();
  const uint64_t left = model.context > prompt_tokens ? model.context - prompt_tokens : 0;
  uint64_t length = asked.max_output_tokens;  // 0: until the context is full
  if (length == 0 && model.n_predict > 0) {
    length = std::max<uint64_t>(1, std::min<uint64_t>(model.n_predict, left));
  }
  const uint64_t needed = prompt_tokens + std::max<uint64_t>(length, 1);
  if (needed > model.context) {
    if (detail != nullptr) {
      detail->param = "input";
      detail->code = "context_length_exceeded";
    }
    return InvalidArgument(
        "Your input exceeds the context window of this model: " + std::to_string(prompt_tokens) +
        " tokens of conversation and " + std::to_string(needed - prompt_tokens) +
        " to generate need " + std::to_string(needed) + " of its " + std::to_string(model.context) +
        " tokens.");
  }
  request.max_tokens = static_cast<uint32_t>(length);
  return request;
}

std::string new_responses_id(std::string_view prefix) { return random_id(prefix); }

namespace {

json output_message(const ResponsesMeta& meta, std::string_view status, const std::string* text) {
  json content = json::array();
  if (text != nullptr) {
    content.push_back({{"type", "output_text"}, {"text", *text}, {"annotations", json::array()}});
  }
  return {{"type", "message"},
          {"id", meta.message_id},
          {"status", std::string(status)},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

}  // namespace

json response_object_json(const ResponsesMeta& meta, const ResponsesRequest& asked,
                          const engine::GenerateResult* result) {
  const bool incomplete = result != nullptr && result->finish == engine::FinishReason::kLength;
  json body = {
      {"id", meta.id},
      {"object", "response"},
      {"created_at", meta.created_at},
      {"status", result == nullptr ? "in_progress"
                 : incomplete      ? "incomplete"
                                   : "completed"},
      {"error", nullptr},
      {"incomplete_details", incomplete ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
      {"instructions", asked.instructions ? json(*asked.instructions) : json(nullptr)},
      {"max_output_tokens",
       asked.max_output_tokens > 0 ? json(asked.max_output_tokens) : json(nullptr)},
      {"model", meta.model},
      {"output", json::array()},
      {"parallel_tool_calls", true},
      {"previous_response_id",
       asked.previous_response_id ? json(*asked.previous_response_id) : json(nullptr)},
      {"reasoning", nullptr},
      {"store", asked.store},
      {"temperature", asked.temperature},
      {"text", {{"format", {{"type", "text"}}}}},
      {"tool_choice", "auto"},
      {"tools", json::array()},
      {"top_p", asked.top_p},
      {"truncation", "disabled"},
      {"usage", nullptr},
      {"metadata", asked.metadata},
  };
  if (result != nullptr) {
    body["output"].push_back(
        output_message(meta, incomplete ? "incomplete" : "completed", &result->text));
    body["usage"] = {{"input_tokens", result->prompt_tokens},
                     {"input_tokens_details", {{"cached_tokens", result->cached_tokens}}},
                     {"output_tokens", result->completion_tokens},
                     {"output_tokens_details", {{"reasoning_tokens", 0}}},
                     {"total_tokens", uint64_t{result->prompt_tokens} + result->completion_tokens}};
  }
  return body;
}

ResponsesStream::ResponsesStream(ResponsesMeta meta, ResponsesRequest asked)
    : meta_(std::move(meta)), asked_(std::move(asked)) {}

std::string ResponsesStream::event(std::string_view type, json data) {
  data["type"] = std::string(type);
  data["sequence_number"] = sequence_++;
  return "event: " + std::string(type) + "\ndata: " + dump_json(data) + "\n\n";
}

std::string ResponsesStream::begin() {
  const json opening = response_object_json(meta_, asked_, nullptr);
  std::string out = event("response.created", {{"response", opening}});
  out += event("response.in_progress", {{"response", opening}});
  out += event("response.output_item.added",
               {{"output_index", 0}, {"item", output_message(meta_, "in_progress", nullptr)}});
  out += event("response.content_part.added",
               {{"item_id", meta_.message_id},
                {"output_index", 0},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  return out;
}

std::string ResponsesStream::piece(std::string_view text) {
  return event("response.output_text.delta", {{"item_id", meta_.message_id},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"delta", std::string(text)}});
}

std::string ResponsesStream::finish(const engine::GenerateResult& result) {
  const json whole = response_object_json(meta_, asked_, &result);
  std::string out = event("response.output_text.done", {{"item_id", meta_.message_id},
                                                        {"output_index", 0},
                                                        {"content_index", 0},
                                                        {"text", result.text}});
  out += event("response.content_part.done", {{"item_id", meta_.message_id},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"part", whole["output"][0]["content"][0]}});
  out += event("response.output_item.done", {{"output_index", 0}, {"item", whole["output"][0]}});
  out += event(whole["status"] == "completed" ? "response.completed" : "response.incomplete",
               {{"response", whole}});
  return out;
}

std::string ResponsesStream::error(const ApiError& error) {
  return event("error", {{"code", error.code.empty() ? json(nullptr) : json(error.code)},
                         {"message", error.message},
                         {"param", error.param.empty() ? json(nullptr) : json(error.param)}});
}

}  // namespace siesta::server
