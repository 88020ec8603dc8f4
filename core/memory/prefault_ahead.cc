#include "core/memory/prefault_ahead.h"

#include <algorithm>
#include <utility>

#include "core/memory/host_address_space.h"

namespace siesta {

PrefaultAhead::PrefaultAhead(ThreadPool& pool, std::vector<std::span<std::byte>> extents,
                             size_t min_bytes) {
  size_t total = 0;
  for (const std::span<std::byte>& extent : extents) total += extent.size();
  if (total == 0 || total < min_bytes) return;
  state_ = std::make_shared<State>();
  state_->extents = std::move(extents);
  pool.post([state = state_] { run(*state); });
}

void PrefaultAhead::run(State& state) {
  {
    MutexLock lock(state.mu);
    if (state.stop) {
      state.progress = Progress::kDone;  // stopped before it started: nothing touched
      state.changed.notify_all();
      return;
    }
    state.progress = Progress::kRunning;
  }
  for (const std::span<std::byte>& extent : state.extents) {
    for (size_t done = 0; done < extent.size(); done += kPieceBytes) {
      {
        MutexLock lock(state.mu);
        if (state.stop) break;
      }
      const size_t bytes = std::min(kPieceBytes, extent.size() - done);
      // A hint: on failure the writes fault as they would have.
      (void)host_address_space::prefault_for_write(extent.data() + done, bytes);
    }
  }
  MutexLock lock(state.mu);
  state.progress = Progress::kDone;
  state.changed.notify_all();
}

void PrefaultAhead::wait() {
  if (state_ == nullptr) return;
  MutexLock lock(state_->mu);
  lock.wait(state_->changed,
            [this]() SIESTA_REQUIRES(state_->mu) { return state_->progress == Progress::kDone; });
}

PrefaultAhead::~PrefaultAhead() {
  if (state_ == nullptr) return;
  MutexLock lock(state_->mu);
  state_->stop = true;
  // Queued: the task, when the pool gets to it, touches nothing; no need to wait for that.
  lock.wait(state_->changed, [this]() SIESTA_REQUIRES(state_->mu) {
    return state_->progress != Progress::kRunning;
  });
}

}  // namespace siesta
