// Anthropic's Messages API (POST /v1/messages, POST /v1/messages/count_tokens) as pure
// functions: a request body in, an engine::GenerateRequest out; an engine result in, Anthropic's
// JSON and stream events out.
//
// Requests. Every field Anthropic documents for a text conversation is read; any other field
// (tools, tool_choice, thinking, an image or document block...) is a 400 naming it, never
// silently ignored:
//   model           required, a string; any name is served (one model per server)
//   max_tokens      required, an integer >= 1
//   messages        required, a non-empty array of {"role": "user"|"assistant", "content":
//                   a string or an array of {"type": "text", "text": string} blocks}
//   system          a string or an array of text blocks: the first, system, message
//   temperature     a number in [0, 1] (Anthropic's range); absent: 1.0, Anthropic's default
//   top_p, top_k    nucleus and top-k sampling (top_p in (0, 1], top_k >= 1)
//   stop_sequences  an array of at most 4 strings of 1..64 bytes
//   stream          boolean
//   metadata        an object; its user_id, a string, names nobody the server tracks (it is
//                   accepted and not kept)
// The messages are rendered by chat_template.h, as OpenAI's chat is, so a conversation
// continues by its messages' prefix: the engine reuses the history the rendered prompt repeats
// (`usage.cache_read_input_tokens`). The prompt plus max_tokens must fit the context, else a 400.
//
// Answers: a "message" object ({"id": "msg_<24 hex>", "type": "message", "role": "assistant",
// "model", "content": [{"type": "text", "text"}], "stop_reason": "max_tokens" or
// "stop_sequence", "stop_sequence", "usage": {"input_tokens": the prompt tokens read,
// "output_tokens", "cache_creation_input_tokens": 0, "cache_read_input_tokens": the prompt
// tokens reused}}). Streamed, the events Anthropic sends, each "event: <type>\ndata: <json>\n\n":
// message_start (the message without content, stop_reason null), content_block_start (one text
// block, index 0), ping, content_block_delta (text_delta) per piece, content_block_stop,
// message_delta (stop_reason, stop_sequence, usage.output_tokens), message_stop. Errors are
// {"type": "error", "error": {"type", "message"}}; after the stream began, an "error" event.
//
// Thread rule: pure functions (new_message_id() is thread-safe).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "engine/generate_request.h"
#include "server/api_error.h"
#include "server/openai_json.h"

namespace siesta::server {

inline constexpr double kAnthropicMaxTemperature = 1.0;

struct ParsedMessages {
  engine::GenerateRequest request;  // prompt and options set; on_text and cancel left empty
  bool stream = false;
};

// Parses and checks a /v1/messages body. Failure: InvalidArgument (bad JSON, a wrong type or
// value, an unserved field or block, the context exceeded), *detail naming the field.
Result<ParsedMessages> parse_messages_request(std::string_view body, const ServedModel& model,
                                              ErrorDetail* detail);

// The prompt tokens a /v1/messages/count_tokens body would read (its messages and system
// rendered; max_tokens not required). Failure: as parse_messages_request's.
Result<uint64_t> count_message_tokens(std::string_view body, ErrorDetail* detail);

// "msg_<24 hex>", unique within the process and unpredictable.
std::string new_message_id();

// "max_tokens" (the limit or the context), "stop_sequence"; a cancelled generation has none.
std::string_view anthropic_stop_reason(engine::FinishReason finish);

// The whole answer of a request that was not streamed.
nlohmann::json message_json(std::string_view id, std::string_view model,
                            const engine::GenerateResult& result);

// "event: <type>\ndata: <data>\n\n".
std::string anthropic_event(std::string_view type, const nlohmann::json& data);
// The events that open a stream (message_start, content_block_start, ping), for a prompt of
// `prompt_tokens` of which `cached_tokens` were reused. (The engine says how many only at the
// end: a stream opens with the prompt's length, as Anthropic's input_tokens, and 0 read from
// the cache; the final usage is in message_delta.)
std::string anthropic_stream_begin(std::string_view id, std::string_view model,
                                   uint64_t prompt_tokens);
// One piece of text: a content_block_delta event.
std::string anthropic_stream_piece(std::string_view text);
// The events that end a stream: content_block_stop, message_delta, message_stop.
std::string anthropic_stream_end(const engine::GenerateResult& result);

// Anthropic's error object for `error`: {"type": "error", "error": {"type", "message"}}, the type
// from the HTTP status (400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
// overloaded_error, any other 4xx invalid_request_error, otherwise api_error).
nlohmann::json anthropic_error_json(const ApiError& error);

}  // namespace siesta::server
