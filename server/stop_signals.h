// StopSignalWaiter: turns the stop signals (main.cc: SIGINT, SIGTERM, SIGHUP) into an ordinary
// function call on an ordinary thread, so that stopping may lock, allocate and join (none of
// which a signal handler may).
//
// The signals must be blocked in every thread (block them in main() before any thread
// starts: threads inherit the mask); this waiter's thread collects them with sigwait().
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace siesta::server {

// Blocks `signals` in the calling thread (and so in every thread it starts later).
// Call first thing in main(). Returns false if the mask could not be set.
bool block_signals(const sigset_t& signals);

class StopSignalWaiter {
 public:
  // Starts the waiting thread: on the first of `signals` it records the signal and calls
  // `on_signal` once, then ends. REQUIRES: `signals` is not empty and is blocked in every
  // thread. Throws std::system_error if the thread cannot start.
  StopSignalWaiter(const sigset_t& signals, std::function<void()> on_signal);
  // Ends the thread (waking it if no signal came) and joins it. Call it after whatever
  // `on_signal` stops has stopped, or on an error path; never from `on_signal`.
  ~StopSignalWaiter();
  StopSignalWaiter(const StopSignalWaiter&) = delete;
  StopSignalWaiter& operator=(const StopSignalWaiter&) = delete;

  // The signal received, or 0 if none (yet). Any thread.
  int received() const { return received_.load(); }

 private:
  const sigset_t signals_;
  int wake_signal_ = 0;  // one of signals_, sent to the thread to end it when none came
  std::atomic<int> received_{0};
  std::atomic<bool> closing_{false};
  std::function<void()> on_signal_;
  std::thread thread_;
};

}  // namespace siesta::server
