#include "server/stop_signals.h"

#include <pthread.h>

#include <utility>

namespace siesta::server {

bool block_signals(const sigset_t& signals) {
  return pthread_sigmask(SIG_BLOCK, &signals, nullptr) == 0;
}

StopSignalWaiter::StopSignalWaiter(const sigset_t& signals, std::function<void()> on_signal)
    : signals_(signals), on_signal_(std::move(on_signal)) {
  for (int candidate = 1; candidate < NSIG && wake_signal_ == 0; ++candidate) {
    if (sigismember(&signals_, candidate) == 1) wake_signal_ = candidate;
  }
  thread_ = std::thread([this] {
    int signal_number = 0;
    if (sigwait(&signals_, &signal_number) != 0 || closing_.load()) return;
    received_.store(signal_number);
    on_signal_();
  });
}

StopSignalWaiter::~StopSignalWaiter() {
  closing_.store(true);
  if (received_.load() == 0 && wake_signal_ != 0) {
    // One of the waited-for signals, aimed at the waiting thread: it is blocked there and
    // collected by sigwait(), so it wakes the thread rather than ending anything. If a real
    // signal won the race, this one stays pending on a thread that is about to end.
    pthread_kill(thread_.native_handle(), wake_signal_);
  }
  thread_.join();
}

}  // namespace siesta::server
