// CommitFaultSwitch: a backend's CommitFaultHook (core/memory/commit_fault_hook.h) that a test
// arms to fail the next commit before one step of one chunk, recording every (step, chunk) the
// backend asked about since it was armed. The conformance suites use it on every backend.
//
// Thread rule: any thread (the hook runs on the committing thread; one mutex).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/memory/commit_fault_hook.h"

namespace siesta::test_util {

class CommitFaultSwitch {
 public:
  using Calls = std::vector<std::pair<CommitStep, size_t>>;

  // The next commit fails with DeviceError ("injected ...") before `step` of chunk `chunk`;
  // the list of calls starts again.
  void arm(CommitStep step, size_t chunk) {
    std::lock_guard lock(mutex_);
    armed_ = true;
    step_ = step;
    chunk_ = chunk;
    calls_.clear();
  }
  Calls calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

  // The hook for the backend's options; it keeps the switch alive.
  static CommitFaultHook hook(std::shared_ptr<CommitFaultSwitch> self) {
    return
        [self = std::move(self)](CommitStep step, size_t chunk) { return self->ask(step, chunk); };
  }

 private:
  Status ask(CommitStep step, size_t chunk) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(step, chunk);
    if (!armed_ || step != step_ || chunk != chunk_) return Status::Ok();
    armed_ = false;
    return DeviceError("injected failure before step " + std::to_string(static_cast<int>(step)) +
                       " of chunk " + std::to_string(chunk));
  }

  mutable std::mutex mutex_;
  bool armed_ = false;
  CommitStep step_ = CommitStep::kCreate;
  size_t chunk_ = 0;
  Calls calls_;
};

}  // namespace siesta::test_util
