// llama-server's native generation API, POST /completion (and its alias POST /completions;
// OpenAI's is /v1/completions), as pure functions: JSON text in, an engine::GenerateRequest
// out; an engine result in, JSON out. The route (llama_routes.cc) only moves bytes between
// these and the engine. Field names and shapes follow the README of ggml-org/llama.cpp's
// tools/server.
//
// Requests. Every field is served or refused by name (InvalidArgument with ErrorDetail::param
// naming it): a field this server does not implement (grammar, json_schema, dry_*, xtc_*,
// n_cmpl, lora, response_fields, max_tokens...) is refused, never ignored; so is a field it
// serves only at its neutral value when another value is sent. The fields:
//   prompt        a string; an array of token ids (0..255: one token per byte) and strings,
//                 concatenated; one prompt only: an array of several strings alone (llama's
//                 multiple prompts), a nested array or an object is refused; not empty
//   n_predict     -1 (the default): the server's --n-predict (ServedModel::n_predict: -1 until
//                 a stop string matches or the context is full); N >= 1: at most N tokens,
//                 lowered to what the context leaves after the prompt. 0 is refused (llama's
//                 "evaluate the prompt only" is not served: every request generates a token)
//   temperature   [0, 2], default 0.8 (0: greedy)
//   top_k         integer >= 0, default 40 (0: off)
//   top_p         [0, 1], default 0.95 (1: off; 0 keeps the most probable token)
//   min_p         [0, 1], default 0.05 (0: off): tokens at least min_p times as probable as
//                 the most probable. top_k, top_p and min_p apply when temperature > 0
//   samplers      an array naming which of top_k, top_p, min_p run, then "temperature" last,
//                 in that order (the one order served: the engine's chain); a sampler left out
//                 is off (its field then counts as neutral); default all four
//   seed          integer; -1, 4294967295 (llama's "random", as GET /props shows it) or absent:
//                 a fresh random seed (`random_seed`, the caller's); generation_settings
//                 reports the seed used. Another negative number is refused
//   stop          an array of at most 4 strings (or one string), each 1..64 bytes
//   stream        boolean
//   cache_prompt  boolean; true (the default) is served: a conversation's history is always
//                 reused. false is refused
//   id_slot       -1 (any) or a conversation number 0..sessions-1 (as /v1/completions)
//   n_probs       integer 0..20 (engine::kMaxTopLogprobs): with N > 0 the answer has
//                 completion_probabilities; not served with stream
//   return_tokens boolean: the answer's "tokens" holds the content's token ids
//   logit_bias    [[id, bias], ...] with bias a finite number or false (banned), or
//                 {"<id>": bias or false}; ids 0..255 (decimal in the object form), each once;
//                 a bias of -100 or less bans, +100 or more forces (engine/sampler.h). Token
//                 strings (llama's [["text", bias]]) are refused
//   ignore_eos    boolean: any value (the model has no end-of-stream token)
//   model         a string: any name (one model per server); answers carry the served one
//   neutral only: typical_p 1, repeat_penalty 1, presence_penalty 0, frequency_penalty 0,
//                 mirostat 0, n_keep 0 or -1, dynatemp_range 0
// A prompt that leaves no room for one generated token (prompt tokens >= the context) is
// InvalidArgument with llama-server's error: type "exceed_context_size_error", code
// "context_length_exceeded", and "n_prompt_tokens" and "n_ctx" in the error object.
//
// Answers: native_completion_json() (see there); streamed, one native_piece_json() per piece
// of text and native_final_json() last, each as "data: <json>\n\n", with no "[DONE]".
//
// Thread rule: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/served_model.h"
#include "server/server_config.h"

namespace siesta::server {

// llama's seed that means "a random one" (LLAMA_DEFAULT_SEED).
inline constexpr uint64_t kLlamaRandomSeed = 4294967295u;

// The generation settings of POST /completion, named as llama-server's "params" object names
// them: the defaults (native_defaults()) or a request's as used (the "generation_settings" of
// an answer).
struct NativeParams {
  int64_t n_predict = -1;  // -1: until a stop string or the full context; else a maximum
  uint64_t seed = kLlamaRandomSeed;
  double temperature = 0.8;
  uint32_t top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  std::vector<std::string> stop;
  std::vector<std::pair<uint8_t, float>> logit_bias;
  bool ignore_eos = false;
  bool stream = false;
  uint32_t n_probs = 0;
  std::vector<std::string> samplers = {"top_k", "top_p", "min_p", "temperature"};
};

// The defaults of POST /completion, llama-server's (its README's): sampling at temperature
// 0.8 over the top 40 tokens within p 0.95 and min_p 0.05, and --n-predict tokens (-1: until
// a stop string or the context is full). GET /props and GET /slots report them.
NativeParams native_defaults(const ServerConfig& config);

// llama-server's "params" object: n_predict, seed, temperature, dynatemp_range,
// dynatemp_exponent, top_k, top_p, min_p, typical_p, repeat_last_n, repeat_penalty,
// presence_penalty, frequency_penalty, mirostat, stop, max_tokens (= n_predict), n_keep,
// ignore_eos, stream, n_probs, logit_bias ([[id, bias]]; a ban's bias is false, as llama
// writes -inf), samplers.
nlohmann::json native_params_json(const NativeParams& params);

struct ParsedNativeCompletion {
  // prompt and options set; on_text, on_start and cancel left empty.
  engine::GenerateRequest request;
  NativeParams params;  // as used: the seed drawn, n_predict as lowered to the context
  bool return_tokens = false;
};

// Parses and checks a POST /completion body (above). `random_seed` is the seed used when the
// request asks for a random one. Success: the request; failure: InvalidArgument with *detail
// (when not null) naming the field (and, for the context, llama's type and numbers); nothing
// else is touched.
Result<ParsedNativeCompletion> parse_native_completion(std::string_view body,
                                                       const ServedModel& model,
                                                       uint64_t random_seed, ErrorDetail* detail);

// Times measured around one generation (milliseconds): reading the prompt (up to the first
// piece of text, or the end when none came) and generating after it.
struct NativeTimings {
  double prompt_ms = 0;
  double predicted_ms = 0;
};

// What every answer of one request repeats.
struct NativeMeta {
  std::string model;  // ServedModel::name
  NativeParams params;
  std::string prompt;  // the prompt as read (token ids as their bytes)
  bool return_tokens = false;
};

// llama's "timings": prompt_n (prompt tokens read: not reused), prompt_ms,
// prompt_per_token_ms, prompt_per_second, predicted_n (generated tokens, a matched stop
// string's included), predicted_ms, predicted_per_token_ms, predicted_per_second, cache_n
// (prompt tokens reused). A rate over 0 tokens or 0 ms is 0.
nlohmann::json native_timings_json(const engine::GenerateResult& result,
                                   const NativeTimings& timings);

// The whole answer: index 0, content (the text, without a matched stop string), tokens (the
// content's token ids with return_tokens, else []), id_slot (GenerateResult::session), stop
// true, model, tokens_predicted, tokens_evaluated (prompt tokens), tokens_cached,
// generation_settings (native_params_json of meta.params), prompt, has_new_line, truncated
// false, stop_type ("word" when a stop string matched, else "limit"; never "eos": the model
// has none), stopping_word (the matched stop string, else ""), timings, and, when
// params.n_probs > 0, completion_probabilities: per token of the content {id, token, bytes,
// logprob, top_logprobs: [{id, token, bytes, logprob}] (n_probs of them, most probable first)}
// (a token is its byte; one that is not UTF-8 alone is written as U+FFFD by the serialiser,
// its bytes exact).
nlohmann::json native_completion_json(const NativeMeta& meta, const engine::GenerateResult& result,
                                      const NativeTimings& timings);

// One streamed piece: {"index": 0, "content": piece, "tokens": [its token ids], "stop": false,
// "id_slot": session}.
nlohmann::json native_piece_json(std::string_view piece, uint32_t session);

// The stream's last event: native_completion_json() with content "" and tokens [] (the pieces
// carried them) and no completion_probabilities.
nlohmann::json native_final_json(const NativeMeta& meta, const engine::GenerateResult& result,
                                 const NativeTimings& timings);

}  // namespace siesta::server
