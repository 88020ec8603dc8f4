// StopSignalWaiter: a blocked signal becomes one call on the waiter's thread; with no signal,
// destruction wakes and joins the thread.
#include "server/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <future>

namespace siesta::server {
namespace {

sigset_t only(int signal_number) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal_number);
  return set;
}

TEST(StopSignalsTest, ASignalCallsTheCallbackOnce) {
  // SIGUSR1 rather than SIGTERM: if blocking failed, the test process would not be killed
  // by its own test... but it is blocked here before the waiter's thread starts.
  const sigset_t signals = only(SIGUSR1);
  ASSERT_TRUE(block_signals(signals));
  std::promise<void> called;
  int calls = 0;
  {
    StopSignalWaiter waiter(signals, [&] {
      ++calls;
      called.set_value();
    });
    ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);
    called.get_future().wait();
    EXPECT_EQ(waiter.received(), SIGUSR1);
  }
  EXPECT_EQ(calls, 1);
}

TEST(StopSignalsTest, NoSignalDestructionJoinsWithoutCalling) {
  const sigset_t signals = only(SIGUSR2);
  ASSERT_TRUE(block_signals(signals));
  bool called = false;
  {
    StopSignalWaiter waiter(signals, [&] { called = true; });
    EXPECT_EQ(waiter.received(), 0);
  }
  EXPECT_FALSE(called);
  // The wake-up signal was consumed by the waiter, not left pending for the process.
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGUSR2), 0);
}

}  // namespace
}  // namespace siesta::server
