// The OpenAI request and response bodies of /v1/completions, /v1/chat/completions and
// /v1/models, as pure functions: JSON text in, an engine::GenerateRequest out; an engine
// result in, JSON out. The routes (api_routes.h) only move bytes between these and the
// engine.
//
// Requests. Fields we do not serve (top_p, user, logprobs, presence_penalty...) are ignored,
// as OpenAI-compatible servers commonly do, so stock clients work; the fields below are
// checked, and a wrong one is InvalidArgument with ErrorDetail::param naming it:
//   model        optional; when given it must equal the served model's name, else NotFound
//                with code "model_not_found" (OpenAI answers 404 for an unknown model)
//   prompt       (completions) a non-empty string, or an array holding one such string
//   messages     (chat) a non-empty array of {"role": "system"|"user"|"assistant",
//                "content": string or array of {"type":"text","text":string} parts};
//                rendered by chat_template.h
//   max_tokens   integer >= 1 (chat: max_completion_tokens is an alias; both given must
//                agree). Absent: 16, lowered to what the context leaves (at least 1)
//   stop         a string or an array of at most 4 strings, each 1..64 bytes
//   temperature  number in [0, 2]; 0 is greedy (the default)
//   seed         integer (a negative one is taken modulo 2^64); the sampler's seed
//   n            1 if present (one choice per request)
//   stream       boolean; stream_options.include_usage boolean
//   prompt_cache_key  a string of 1..256 bytes naming the conversation (OpenAI's routing
//                field); hashed at once (engine::session_key_of), never kept or echoed
//   id_slot      an integer session number 0..sessions-1, or -1 for "any" (llama.cpp's)
// The prompt plus max_tokens must fit the context, else InvalidArgument with code
// "context_length_exceeded" and OpenAI's message. Bodies are parsed by nlohmann::json, which
// refuses invalid UTF-8 and lone surrogate escapes, so every string we accept is UTF-8.
//
// Streaming. Each piece of text is one server-sent event `data: <chunk>\n\n`; the last chunk
// carries finish_reason; with stream_options.include_usage true, every chunk has
// "usage": null and one more chunk with "choices": [] and the usage follows, exactly as
// OpenAI streams; then `data: [DONE]\n\n`.
//
// Thread rule: pure functions (new_response_id() is thread-safe).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "engine/engine.h"
#include "server/api_error.h"

namespace siesta::server {

inline constexpr uint32_t kDefaultMaxTokens = 16;

enum class ApiKind { kCompletion, kChat };

// What a request is checked against.
struct ServedModel {
  std::string name;  // "synthetic:tiny"
  uint32_t context = 0;
  uint32_t sessions = 1;  // conversations kept: id_slot's range
};

inline constexpr size_t kMaxPromptCacheKeyBytes = 256;

struct ParsedGeneration {
  engine::GenerateRequest request;  // prompt and options set; on_text and cancel left empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses and checks a request body. Failure: InvalidArgument (bad JSON, a wrong type or value,
// context exceeded) or NotFound (another model), with *detail (when not null) naming the
// field and the code; nothing else is touched.
Result<ParsedGeneration> parse_completion_request(std::string_view body, const ServedModel& model,
                                                  ErrorDetail* detail);
Result<ParsedGeneration> parse_chat_request(std::string_view body, const ServedModel& model,
                                            ErrorDetail* detail);

// The identity every chunk of one response repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // new_response_id(kind)
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// "cmpl-<24 hex>" or "chatcmpl-<24 hex>", unique within the process and unpredictable.
std::string new_response_id(ApiKind kind);

// "stop" or "length" (a cancelled generation has no OpenAI reason: "stop").
std::string_view openai_finish_reason(engine::FinishReason finish);

// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}
nlohmann::json usage_json(const engine::GenerateResult& result);

// The whole non-streamed response: a "text_completion" or "chat.completion" object.
nlohmann::json response_json(const ResponseMeta& meta, const engine::GenerateResult& result);

// One streamed chunk carrying `text`. For chat, `first` adds "role": "assistant" to the delta
// (OpenAI's first chunk).
nlohmann::json text_chunk_json(const ResponseMeta& meta, std::string_view text, bool first,
                               bool include_usage);
// The chunk that ends the choice: empty text/delta and finish_reason.
nlohmann::json finish_chunk_json(const ResponseMeta& meta, engine::FinishReason finish,
                                 bool include_usage);
// The usage chunk sent after the finish chunk when include_usage: "choices": [] and usage.
nlohmann::json usage_chunk_json(const ResponseMeta& meta, const engine::GenerateResult& result);

// "data: <json>\n\n".
std::string sse_event(const nlohmann::json& chunk);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models.
nlohmann::json models_json(std::string_view model, int64_t created);

// One model object, as GET /v1/models/{model} answers it (and as models_json() lists it):
// {"id", "object": "model", "created", "owned_by": "siesta"}.
nlohmann::json model_json(std::string_view model, int64_t created);

}  // namespace siesta::server
