// The OpenAI request and response bodies of /v1/completions, /v1/chat/completions and
// /v1/models, as pure functions: JSON text in, an engine::GenerateRequest out; an engine
// result in, JSON out. The routes (api_routes.h) only move bytes between these and the
// engine.
//
// Requests. Every field is either served or refused: a field this server does not implement
// (grammar, json_schema, tools, audio, a penalty other than 0, n > 1...) is InvalidArgument
// naming it, never ignored. Fields with no effect on the answer (user, metadata,
// service_tier, safety_identifier, parallel_tool_calls) are accepted. The served ones, each
// checked, a wrong one InvalidArgument with ErrorDetail::param naming it:
//   model        optional, a string; any name is served (one model per server, as
//                llama-server does: SDKs always send one), and responses carry the served
//                model's id (ServedModel::name: --alias, or the model's name)
//   prompt       (completions) a non-empty string, or an array holding one such string
//   messages     (chat) a non-empty array of {"role": "system"|"user"|"assistant",
//                "content": string or array of {"type":"text","text":string} parts};
//                rendered by chat_template.h
//   max_tokens   integer >= 1 (chat: max_completion_tokens is an alias; both given must
//                agree). Absent: ServedModel::n_predict (--n-predict): -1 generates until a
//                stop string or the context is full; N is lowered to what the context leaves
//   stop         a string or an array of at most 4 strings, each 1..64 bytes
//   temperature  number in [0, 2]; 0 is greedy (the default)
//   top_p        number in [0, 1] (1: off; 0 keeps only the most probable token); top_k
//                integer >= 0 (llama-server's; 0: off). Both apply when temperature > 0
//   logit_bias   {"<token id>": bias in [-100, 100]}, token ids 0..255 in decimal
//   logprobs     completions: integer 0..5, the most probable tokens shown per position;
//                chat: boolean, with top_logprobs 0..20 (top_logprobs needs logprobs true).
//                The model's real log-probabilities (engine/generate_request.h); not served
//                with stream
//   seed         integer (a negative one is taken modulo 2^64); the sampler's seed
//   n            1 (one choice per request); echo false, best_of 1, suffix "" (completions);
//                presence_penalty and frequency_penalty 0; response_format {"type":"text"},
//                tools [], tool_choice "none" or "auto", modalities ["text"], store false (chat)
//   stream       boolean; stream_options.include_usage boolean
//   prompt_cache_key  a string of 1..256 bytes naming the conversation (OpenAI's routing
//                field); hashed at once (engine::session_key_of), never kept or echoed
//   id_slot      an integer session number 0..sessions-1, or -1 for "any" (llama.cpp's)
// The prompt plus max_tokens (at least 1) must fit the context, else InvalidArgument with code
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
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/served_model.h"

namespace siesta::server {

enum class ApiKind { kCompletion, kChat };

inline constexpr size_t kMaxPromptCacheKeyBytes = 256;
// OpenAI's bounds: completions' logprobs, chat's top_logprobs.
inline constexpr uint32_t kMaxCompletionLogprobs = 5;

struct ParsedGeneration {
  engine::GenerateRequest request;  // prompt and options set; on_text and cancel left empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The most probable tokens to show per generated token (completions' logprobs, chat's
  // top_logprobs); nullopt: "logprobs": null. request.logprobs is max(this, 1).
  std::optional<uint32_t> shown_logprobs;
};

// Parses and checks a request body. Failure: InvalidArgument (bad JSON, a wrong type or value,
// context exceeded), with *detail (when not null) naming the
// field and the code; nothing else is touched.
Result<ParsedGeneration> parse_completion_request(std::string_view body, const ServedModel& model,
                                                  ErrorDetail* detail);
Result<ParsedGeneration> parse_chat_request(std::string_view body, const ServedModel& model,
                                            ErrorDetail* detail);

// The prompt a chat request's "messages" (as above) render to (chat_template.h), for
// llama-server's POST /apply-template. Failure: as parse_chat_request's for the body and the
// messages.
Result<std::string> render_chat_request_prompt(std::string_view body, ErrorDetail* detail);

// The identity every chunk of one response repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // new_response_id(kind)
  int64_t created = 0;  // Unix seconds
  std::string model;
  std::string system_fingerprint{};          // ServedModel::system_fingerprint
  std::optional<uint32_t> shown_logprobs{};  // ParsedGeneration's
};

// "cmpl-<24 hex>" or "chatcmpl-<24 hex>", unique within the process and unpredictable.
std::string new_response_id(ApiKind kind);

// "stop" or "length" (a cancelled generation has no OpenAI reason: "stop").
std::string_view openai_finish_reason(engine::FinishReason finish);

// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}
nlohmann::json usage_json(const engine::GenerateResult& result);

// The whole non-streamed response: a "text_completion" or "chat.completion" object. With
// meta.shown_logprobs, the choice's logprobs cover the text's tokens (a matched stop string's
// are left out, as its text is): completions {"tokens", "token_logprobs", "top_logprobs":
// [{token: logprob}], "text_offset"}, chat {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}. A token that is not
// UTF-8 alone (a byte >= 0x80) is named "bytes:\\xNN", as OpenAI names partial characters.
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
