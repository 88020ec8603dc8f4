// Generation: one generate command's work on its session, cut into steps -- the prefix reuse
// with the first prefill block, each further prefill block, each generated token -- so that
// the engine can run several conversations' generations by turns, one step each, and a short
// request does not wait for a long one to end. A step never waits for anything but the
// device; between two steps the session is consistent (its history is a prefix of the prompt
// and the tokens generated so far), so the steps of other sessions may run in between.
//
// Errors: as Engine::generate() says. A request refused for its input is refused by the first
// step, before the session is touched; a device or kernels error discards the history
// (discard_history_after) and ends the generation with that error.
//
// Thread rule: the engine thread (it drives the session and the kernels).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/offload/offloader.h"
#include "engine/generate_request.h"
#include "engine/model_config.h"
#include "engine/prefill_pacer.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/stop_matcher.h"

namespace siesta::engine {

// The whole request checked before the session is touched, so a refused request leaves it
// exactly as it was. InvalidArgument names what is wrong.
Status validate_request(const GenerateRequest& request, const ModelConfig& config);

// A device error left the session's state unspecified: forgets its history, so the next prompt
// is read from the start, and returns `error` (with the discard's own failure added, if any).
Status discard_history_after(Session& session, Status error);

class Generation {
 public:
  // `session`, `kernels`, `request` and `prefill_speed` (the device's, shared by the engine's
  // generations: engine/prefill_pacer.h) must outlive the generation; `session_id` is the
  // number of the conversation `session` holds (GenerateResult::session); `on_progress` is
  // called after every step that changed the session's history (the engine publishes its
  // length).
  Generation(const GenerateRequest& request, Session& session, Kernels& kernels,
             const ModelConfig& config, Admission admission, uint32_t session_id,
             PrefillSpeed& prefill_speed, std::function<void()> on_progress);

  // Runs the next step. Returns true once the generation has ended (successfully, cancelled or
  // failed); take_result() then gives its outcome. REQUIRES: not ended.
  bool step();

  // The outcome. REQUIRES: step() returned true; once.
  Result<GenerateResult> take_result();

 private:
  enum class Phase : uint8_t { kStart, kPrefill, kDecode, kEnded };
  bool cancelled() const { return request_.cancel && request_.cancel->load(); }
  // Ends the generation with `outcome`; returns true (step()'s answer).
  bool end(Result<GenerateResult> outcome);
  bool start();
  bool prefill_block();
  // The prompt is fed: keeps the session's prompt-end checkpoint and moves on to decoding.
  // Returns false when that failed (the generation has ended with the error).
  bool end_prefill();
  bool decode_token();
  void emit(const std::string& piece);

  const GenerateRequest& request_;
  Session& session_;
  Kernels& kernels_;
  const ModelConfig& config_;
  PrefillSpeed& prefill_speed_;
  std::function<void()> on_progress_;
  Phase phase_ = Phase::kStart;
  std::vector<Token> prompt_;
  size_t fed_ = 0;      // prompt tokens whose KV is computed
  uint32_t limit_ = 0;  // tokens to generate at most (max_tokens, or what the context holds)
  std::optional<Sampler> sampler_;  // temperature > 0 or a logit bias: chosen on the host
  std::optional<PrefillPacer> pacer_;
  StopMatcher matcher_;
  GenerateResult result_;
  std::optional<Result<GenerateResult>> outcome_;
};

}  // namespace siesta::engine
