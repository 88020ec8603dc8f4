// OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) as pure
// functions: a request body in, what it asks out; a generation's result in, the response
// object and the stream's events out. The routes (responses_routes.h) keep the conversations
// (response_store.h) and run the engine.
//
// Request fields, each checked (a wrong one InvalidArgument naming it); any other field, and a
// served one at a value the server does not serve, is refused by name:
//   model               optional string; any name is served (answers carry the served id)
//   input               a non-empty string (one user message), or a non-empty array of
//                       messages {"type": "message" (optional), "role": "user" | "assistant" |
//                       "system" | "developer" (read as system), "content": a string or an
//                       array of {"type": "input_text" | "output_text", "text"}}; other items
//                       (function calls, images, files, reasoning) are refused by name
//   instructions        string: a system message before everything else; as OpenAI, it is
//                       not carried over to a response that continues this one
//   previous_response_id  a stored response's id: the conversation continues from it (its
//                       messages, its answer, and the engine's conversation, wherever it is)
//   max_output_tokens   integer >= 1; absent: ServedModel::n_predict (-1: until the context
//                       is full)
//   temperature         [0, 2], 0 (greedy) by default; top_p [0, 1]
//   stream              boolean; store boolean (default true: kept for previous_response_id
//                       and GET; false: nothing is kept)
//   prompt_cache_key    1..256 bytes naming the engine's conversation of a new chain (with
//                       previous_response_id the stored conversation is used and this is
//                       refused)
//   metadata (object), user, safety_identifier, service_tier (strings): accepted, no effect;
//                       metadata is echoed
//   served only at their neutral value: text {"format": {"type": "text"}}, tools [],
//                       tool_choice "none" | "auto", parallel_tool_calls (any boolean),
//                       truncation "disabled", background false, include [], reasoning null
//
// Thread rule: pure functions; new_responses_id() is thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "engine/generate_request.h"
#include "engine/sampler.h"
#include "engine/session_table.h"
#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/response_store.h"
#include "server/served_model.h"

namespace siesta::server {

// What a POST /v1/responses body asks.
struct ResponsesRequest {
  std::optional<std::string> instructions;
  std::vector<ChatMessage> input;  // this turn's messages
  std::optional<std::string> previous_response_id;
  std::optional<engine::SessionKey> cache_key;  // prompt_cache_key's hash
  uint32_t max_output_tokens = 0;               // 0: not given
  float temperature = 0;
  float top_p = 1;
  bool stream = false;
  bool store = true;
  nlohmann::json metadata = nlohmann::json::object();
};

// Parses and checks a body. Failure: InvalidArgument (bad JSON, a wrong type or value, a field
// not served), *detail naming the field; nothing else is touched.
Result<ResponsesRequest> parse_responses_request(std::string_view body, ErrorDetail* detail);

// The engine request of `asked`, continuing `previous` (nullptr: a new conversation): the
// prompt renders instructions, previous->messages and the input (chat_template.h); the
// length is max_output_tokens or the served default; the route is previous's conversation, or
// the cache key, or `fresh_key` (nullopt: routed by the prompt's prefix). Failure: InvalidArgument
// with code "context_length_exceeded" when the prompt and at least one token do not fit the context
// (param "input").
Result<engine::GenerateRequest> responses_generate_request(
    const ResponsesRequest& asked, const StoredResponse* previous, const ServedModel& model,
    std::optional<engine::SessionKey> fresh_key, ErrorDetail* detail);

// The messages a stored response keeps: previous's, the input, and the answer.
std::vector<ChatMessage> responses_conversation(const ResponsesRequest& asked,
                                                const StoredResponse* previous,
                                                std::string_view answer);

// "resp_<24 hex>" or "msg_<24 hex>": unique and unpredictable.
std::string new_responses_id(std::string_view prefix);

// The identity a response's objects and events repeat.
struct ResponsesMeta {
  std::string id;          // resp_...
  std::string message_id;  // msg_...: the one output message
  int64_t created_at = 0;  // Unix seconds
  std::string model;
};

// The response object. Without a result: status "in_progress" and no output (the stream's
// opening). With one: "completed", or "incomplete" with incomplete_details.reason
// "max_output_tokens" when the length ended it; output [one assistant message with one
// output_text part]; usage {input_tokens, input_tokens_details.cached_tokens, output_tokens,
// output_tokens_details.reasoning_tokens 0, total_tokens}.
nlohmann::json response_object_json(const ResponsesMeta& meta, const ResponsesRequest& asked,
                                    const engine::GenerateResult* result);

// The stream's events, in OpenAI's order, each "event: <type>\ndata: <json>\n\n" with an
// increasing sequence_number from 0: begin() response.created, response.in_progress,
// response.output_item.added, response.content_part.added; piece() one
// response.output_text.delta; finish() response.output_text.done, response.content_part.done,
// response.output_item.done, then response.completed or response.incomplete; error() an
// "error" event. No "data: [DONE]". One object per stream, used on one thread.
class ResponsesStream {
 public:
  ResponsesStream(ResponsesMeta meta, ResponsesRequest asked);
  std::string begin();
  std::string piece(std::string_view text);
  std::string finish(const engine::GenerateResult& result);
  std::string error(const ApiError& error);

 private:
  std::string event(std::string_view type, nlohmann::json data);

  ResponsesMeta meta_;
  ResponsesRequest asked_;
  uint64_t sequence_ = 0;
};

}  // namespace siesta::server
