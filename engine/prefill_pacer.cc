#include "engine/prefill_pacer.h"

#include <algorithm>

namespace siesta::engine {

PrefillPacer::PrefillPacer(Kernels& kernels, uint32_t max_block, uint64_t history,
                           const Clock& clock, PrefillSpeed& speed)
    : kernels_(kernels),
      max_block_(std::max(max_block, 1u)),
      clock_(clock),
      speed_(speed),
      history_(history),
      since_(clock.now()) {
  if (speed_.known()) plan();
}

void PrefillPacer::plan() {
  // The measured time, scaled up to the longer history the next tokens attend to.
  const double b = max_block_;
  const double scale = std::max(
      1.0, (static_cast<double>(history_) + b) / (static_cast<double>(speed_.history_tokens) + b));
  const double per_token = speed_.seconds_per_token * scale;
  block_ = static_cast<uint32_t>(
      std::clamp(kBlockTime.count() / per_token, 1.0, static_cast<double>(max_block_)));
  window_tokens_ = static_cast<uint64_t>(
      std::clamp(kQueuedWork.count() / per_token, 1.0, static_cast<double>(kMaxWindowTokens)));
}

Status PrefillPacer::after_feed(uint32_t tokens) {
  tokens_ += tokens;
  history_ += tokens;
  if (tokens_ < window_tokens_) return Status::Ok();
  SIESTA_RETURN_IF_ERROR(kernels_.synchronize());
  const Clock::Duration now = clock_.now();
  const double elapsed = std::chrono::duration<double>(now - since_).count();
  // A device too fast for the clock to see still gets a speed: one nanosecond a token.
  speed_.seconds_per_token = std::max(elapsed / static_cast<double>(tokens_), 1e-9);
  speed_.history_tokens = history_ - tokens_ / 2;
  tokens_ = 0;
  since_ = now;
  plan();
  return Status::Ok();
}

}  // namespace siesta::engine
