// PrefillPacer: how the engine reads a prompt so that a cancel (a client gone, SIGTERM) is
// read within about a quarter of a second, on any device, without changing a byte.
//
// Session::feed_block() only enqueues a block's operations. Unpaced, a prefill queues the
// whole prompt in moments and then waits for all of it in the first download, so a cancel flag
// raised meanwhile is read only once every queued block has run (45 s for a 600-token prompt
// of synthetic:large on the host kernels of a 2-core machine, read token by token). And one
// block can itself be long: 64 tokens of synthetic:large take seconds on two CPU cores, more
// under a sanitizer. So the pacer chooses both:
//   - the window: it waits for the device every `window` blocks, sized from the time the last
//     window took so that about kQueuedWork of work is queued past each cancel check, and
//     after every block of a length not timed yet;
//   - the block: the next block holds next_block() tokens, which starts at 1 and at most
//     doubles from one block to the next, up to the session's prefill block and to what the
//     last measured time per token says fits in kBlockTime.
// A fast device (the H200) reaches its full block within a few blocks; a slow one reads the
// prompt in shorter blocks. Any cut gives the same bytes (compute/kernel_contract.h), so the
// pacing changes only when the cancel is read.
//
// Thread rule: one pacer per prefill, on the engine thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace siesta::engine {

class PrefillPacer {
 public:
  // max_block: the session's prefill block (Session::prefill_block()), at least 1. `clock`
  // times the device (the engine passes SystemClock: the device's real speed, whatever clock
  // its timers run on); it must outlive the pacer.
  PrefillPacer(Kernels& kernels, uint32_t max_block, const Clock& clock);

  // The tokens the next block may hold (1 .. max_block).
  uint32_t next_block() const { return block_; }

  // Call after each block is fed, with its token count. Failure: the device's error
  // (synchronize()).
  Status after_feed(uint32_t tokens);

  // What the pacer aims at: the work queued past a cancel check, and the longest block.
  static constexpr std::chrono::duration<double> kQueuedWork{0.05};
  static constexpr std::chrono::duration<double> kBlockTime{0.25};

 private:
  static constexpr uint32_t kMaxWindow = 256;  // a fast device waits once per 256 blocks

  Kernels& kernels_;
  const uint32_t max_block_;
  const Clock& clock_;
  uint32_t block_ = 1;  // the first block measures a token's time
  uint32_t limit_ = 1;  // the longest block the last measurement allows
  uint32_t window_ = 1;
  uint32_t timed_block_ = 0;  // the block length the window was sized for
  uint32_t blocks_ = 0;       // fed since the last wait
  uint64_t tokens_ = 0;
  Clock::Duration since_;
};

}  // namespace siesta::engine
