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
#include <vector>

#include "core/offload/offloader.h"
#include "engine/session_table.h"

namespace siesta::engine {

inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopBytes = 64;

enum class FinishReason : uint8_t { kLength, kStop, kCancelled };
std::string_view finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled"

struct GenerateRequest {
  std::string prompt;  // bytes; one token per byte
  uint32_t max_tokens = 16;
  // At most kMaxStopStrings, each 1..kMaxStopBytes bytes of valid UTF-8.
  std::vector<std::string> stop;
  float temperature = 0;  // 0: greedy; otherwise finite, at most kMaxTemperature
  uint64_t seed = 0;      // the sampler's seed (temperature > 0)
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

struct GenerateResult {
  std::string text;  // without the stop string, if one matched
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens whose KV was reused from the history
  // Tokens generated, including those of a matched stop string (the model did compute them,
  // and it is what OpenAI's usage counts); so completion_tokens >= text.size().
  uint32_t completion_tokens = 0;
  FinishReason finish = FinishReason::kLength;
  // What the offloader did before the generation: restored, fell back (the history was
  // discarded, so cached_tokens is 0), or nothing.
  Admission admission;
};

}  // namespace siesta::engine
