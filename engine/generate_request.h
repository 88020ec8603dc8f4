// What a generate command asks for and what it returns (Engine::generate(), Generation).
//
// Thread rule: plain values; GenerateRequest::on_text and cancel as their comments say.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/offload/offloader.h"
#include "engine/session_table.h"

namespace siesta::engine {

inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopBytes = 64;
// The most alternatives GenerateRequest::logprobs may ask for per token (OpenAI's limit).
inline constexpr uint32_t kMaxTopLogprobs = 20;

enum class FinishReason : uint8_t { kLength, kStop, kCancelled };
std::string_view finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled"

struct GenerateRequest {
  std::string prompt;  // bytes; one token per byte
  // Tokens to generate at most. 0: until a stop string matches or the context is full
  // (prompt + generated tokens = the context: finish kLength). The model has no end token, so
  // without a stop string a request of 0 always runs to the full context.
  // prompt + max_tokens (at least 1) must fit the context.
  uint32_t max_tokens = 16;
  // At most kMaxStopStrings, each 1..kMaxStopBytes bytes of valid UTF-8.
  std::vector<std::string> stop;
  float temperature = 0;  // 0: greedy; otherwise finite, at most kMaxTemperature
  uint64_t seed = 0;      // the sampler's seed (temperature > 0)
  // Sampling controls, applied only when temperature > 0 (greedy ignores them, as llama.cpp
  // does), before the temperature draw, to the printable tokens' probabilities at temperature
  // 1, deterministically (ties by the lowest token index): engine/sampler.h.
  float top_p = 1.0f;  // nucleus: the smallest set of the most probable whose sum >= top_p;
                       // finite, 0 < top_p <= 1 (1: off)
  uint32_t top_k = 0;  // 0: off; else only the k most probable
  // 0: off; else only the tokens whose probability is at least min_p times the most probable
  // one's (applied after top_k and top_p); finite, 0 <= min_p <= 1.
  float min_p = 0.0f;
  // Added to the logits of these tokens before the choice, greedy or sampled: a bias of -100
  // or less bans the token, +100 or more forces it (when printable; the lowest such index
  // among several). Finite, each token at most once, not every printable token banned. A
  // request with a bias reads the logits on the host for every token (a download of
  // kVocabSize floats each); greedy decoding without one picks on the device as before.
  std::vector<std::pair<uint8_t, float>> logit_bias;
  // 0: none. N (at most kMaxTopLogprobs): GenerateResult::logprobs gets, for every generated
  // token, its log probability and the N most probable tokens at its position. Costs a
  // download of the logits (kVocabSize floats) per generated token; 0 costs nothing.
  uint32_t logprobs = 0;
  // Called on the engine thread once, when the generation begins on its conversation (the
  // request has passed validate_request(), no prompt token is read yet, no on_text has come),
  // with that conversation's number: GenerateResult::session. May be empty.
  std::function<void(uint32_t session)> on_start;
  // Called on the engine thread with each piece of text as soon as it is certain (a piece
  // that might begin a stop string is held back until it cannot). The pieces concatenate to
  // GenerateResult::text. May be empty.
  std::function<void(std::string_view)> on_text;
  // Read between prefill blocks and between generated tokens; when true, generation ends with
  // kCancelled. The prefill waits for the device often enough that about 50 ms of queued
  // blocks (at least one) separate a raised flag from the end of the command.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // Which conversation continues (engine/session_table.h): a prompt_cache_key's hash, a slot
  // number, or neither (routed by the prompt's prefix).
  SessionRoute route;
};

// One generated token's log probability, and the most probable tokens at its position: the
// log-softmax of the model's raw logits (temperature 1, over the whole vocabulary, before any
// logit bias, top_p or top_k), i.e. the model's real probabilities, whatever chose the token.
// `top` holds GenerateRequest::logprobs entries, most probable first (ties by the lowest
// token index); it includes the chosen token when that is among them, and may name
// non-printable tokens (the model gives them probability; generation never picks them).
struct TokenLogprob {
  uint8_t token = 0;
  float logprob = 0;
  std::vector<std::pair<uint8_t, float>> top;
};

struct GenerateResult {
  std::string text;  // without the stop string, if one matched
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens whose KV was reused from the history
  // Tokens generated, including those of a matched stop string (the model did compute them,
  // and it is what OpenAI's usage counts); so completion_tokens >= text.size().
  uint32_t completion_tokens = 0;
  // Every generated token id, in order, a matched stop string's included (so tokens.size() ==
  // completion_tokens). One token per byte (engine/tokenizer.h): the bytes of `text` are a
  // prefix of these.
  std::vector<uint8_t> tokens;
  // With GenerateRequest::logprobs > 0, one entry per generated token (as `tokens`, a matched
  // stop string's included: the server cuts what it shows); empty otherwise.
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kLength;
  // The conversation that served it (its number, 0..max_sessions-1: what SessionRoute::slot,
  // a client's id_slot, names).
  uint32_t session = 0;
  // What the offloader did before the generation: restored, fell back (the history was
  // discarded, so cached_tokens is 0), or nothing.
  Admission admission;
};

}  // namespace siesta::engine
