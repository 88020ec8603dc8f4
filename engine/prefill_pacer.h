// PrefillPacer: how the engine reads a prompt so that a cancel (a client gone, SIGTERM) is
// read within about a quarter of a second, on any device, without changing a byte, and
// without costing a short prompt anything on a device whose speed is known.
//
// Session::feed_block() only enqueues a block's operations. Unpaced, a prefill queues the
// whole prompt in moments and then waits for all of it in the first download, so a cancel flag
// raised meanwhile is read only once every queued block has run (45 s for a 600-token prompt
// of synthetic:large on the host kernels of a 2-core machine, read token by token). And one
// block can itself be long: 64 tokens of synthetic:large take seconds on two CPU cores, more
// under a sanitizer. So the pacer chooses both, from the device's measured time per token:
//   - the block: what that time fits in kBlockTime, up to the session's prefill block;
//   - the window: it waits for the device once the tokens queued since the last wait are
//     worth kQueuedWork, and measures the time per token again there.
// The time per token is the device's, not the prompt's: the engine keeps it across prefills
// (PrefillSpeed), so only the first prompt a device ever reads starts blind, with a block of
// one token, waited for and timed before the next. Every later prompt starts with the block
// the last measurement allows -- on a fast device the whole prompt, or the session's block, at
// once -- and waits only when it has queued kQueuedWork. A token costs more the longer the
// history it attends to, so a measurement is kept with the history it was taken at, and
// applied to a longer one scaled by (history + B) / (measured history + B), B the session's
// block: an upper bound wherever a token's time grows at most linearly with its history and
// its fixed part is worth at least B tokens of attention (a block's launches are). The time
// per token of a block of one token overstates a larger block's (its fixed cost is not
// shared), so the first jump from it never overshoots kBlockTime. Any cut gives the same
// bytes (compute/kernel_contract.h), so the pacing changes only when the cancel is read.
//
// Thread rule: one pacer per prefill, on the engine thread; a PrefillSpeed is shared by the
// pacers of one engine, all on that thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace siesta::engine {

// What the pacers of one device have learned of it: seconds per prompt token over the last
// window waited for (0 until the first measurement), and the history its tokens attended to
// (the window's middle).
struct PrefillSpeed {
  double seconds_per_token = 0;
  uint64_t history_tokens = 0;
  bool known() const { return seconds_per_token > 0; }
};

class PrefillPacer {
 public:
  // max_block: the session's prefill block (Session::prefill_block()), at least 1. `history`:
  // the tokens the session holds before the first block (the reused prefix). `clock` times the
  // device (the engine passes SystemClock: the device's real speed, whatever clock its timers
  // run on). `speed` is read at the start and updated at every measurement; `clock` and
  // `speed` must outlive the pacer.
  PrefillPacer(Kernels& kernels, uint32_t max_block, uint64_t history, const Clock& clock,
               PrefillSpeed& speed);

  // The tokens the next block may hold (1 .. max_block).
  uint32_t next_block() const { return block_; }

  // Call after each block is fed, with its token count. Failure: the device's error
  // (synchronize()).
  Status after_feed(uint32_t tokens);

  // What the pacer aims at: the work queued past a cancel check, and the longest block.
  static constexpr std::chrono::duration<double> kQueuedWork{0.05};
  static constexpr std::chrono::duration<double> kBlockTime{0.25};

 private:
  // A fast device waits at least once per this many tokens queued.
  static constexpr uint64_t kMaxWindowTokens = uint64_t{1} << 16;

  // Sizes the block and the window from the speed.
  void plan();

  Kernels& kernels_;
  const uint32_t max_block_;
  const Clock& clock_;
  PrefillSpeed& speed_;
  uint32_t block_ = 1;          // unknown speed: the first block measures a token's time
  uint64_t window_tokens_ = 1;  // tokens queued before the next wait
  uint64_t history_;            // the session's tokens after the blocks fed so far
  uint64_t tokens_ = 0;         // fed since the last wait
  Clock::Duration since_;
};

}  // namespace siesta::engine
