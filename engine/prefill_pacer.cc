#include "engine/prefill_pacer.h"

#include <algorithm>

namespace siesta::engine {

PrefillPacer::PrefillPacer(Kernels& kernels, uint32_t max_block, const Clock& clock)
    : kernels_(kernels), max_block_(std::max(max_block, 1u)), clock_(clock), since_(clock.now()) {}

Status PrefillPacer::after_feed(uint32_t tokens) {
  ++blocks_;
  tokens_ += tokens;
  // A block of a new length is timed before more are queued behind it: a window sized from
  // shorter blocks would queue too much work past the next cancel check.
  if (blocks_ >= window_ || tokens != timed_block_) {
    SIESTA_RETURN_IF_ERROR(kernels_.synchronize());
    const Clock::Duration now = clock_.now();
    const double elapsed = std::chrono::duration<double>(now - since_).count();
    const double per_block = elapsed / blocks_;
    const double per_token = elapsed / static_cast<double>(std::max<uint64_t>(tokens_, 1));
    const double fits_window = per_block > 0 ? kQueuedWork.count() / per_block : kMaxWindow;
    const double fits_block =
        per_token > 0 ? kBlockTime.count() / per_token : static_cast<double>(max_block_);
    window_ = static_cast<uint32_t>(std::clamp(fits_window, 1.0, double{kMaxWindow}));
    limit_ = static_cast<uint32_t>(std::clamp(fits_block, 1.0, static_cast<double>(max_block_)));
    blocks_ = 0;
    tokens_ = 0;
    since_ = now;
    timed_block_ = tokens;
  }
  block_ = std::clamp(2 * block_, 1u, limit_);
  return Status::Ok();
}

}  // namespace siesta::engine
