// The Executor seam: ManualExecutor runs exactly what is due, in order; ThreadExecutor runs
// posted tasks on its own thread, in order, and timers once the clock reaches them, and
// wait_idle() returns once nothing due is left.
#include "core/base/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <thread>
#include <vector>

namespace siesta {
namespace {

using std::chrono::seconds;

TEST(ManualExecutorTest, RunsOnlyWhatIsDueInDueThenPostingOrder) {
  ManualClock clock;
  ManualExecutor executor(clock);
  std::vector<int> ran;
  executor.post_at(clock.now() + seconds(2), [&] { ran.push_back(3); });
  executor.post_at(clock.now() + seconds(1), [&] { ran.push_back(1); });
  executor.post_at(clock.now() + seconds(1), [&] { ran.push_back(2); });
  executor.post([&] { ran.push_back(0); });
  EXPECT_EQ(executor.run_due(), 1u);
  EXPECT_EQ(ran, (std::vector<int>{0}));
  clock.advance(seconds(1));
  EXPECT_EQ(executor.run_due(), 2u);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(executor.pending(), 1u);
  EXPECT_EQ(executor.next_due(), clock.now() + seconds(1));
  clock.advance(seconds(1));
  executor.run_due();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(executor.next_due(), Clock::Duration::max());
}

TEST(ManualExecutorTest, TasksPostedByATaskForNowRunInTheSameCall) {
  ManualClock clock;
  ManualExecutor executor(clock);
  int ran = 0;
  executor.post([&] {
    ++ran;
    executor.post([&] { ++ran; });
  });
  EXPECT_EQ(executor.run_due(), 2u);
  EXPECT_EQ(ran, 2);
}

TEST(ThreadExecutorTest, RunsPostedTasksInOrderOnItsOwnThread) {
  ThreadExecutor executor(SystemClock::instance());
  std::vector<int> ran;
  std::promise<std::thread::id> worker;
  for (int i = 0; i < 100; ++i) executor.post([&ran, i] { ran.push_back(i); });
  executor.post([&] { worker.set_value(std::this_thread::get_id()); });
  const std::thread::id id = worker.get_future().get();
  EXPECT_NE(id, std::this_thread::get_id());
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
}

TEST(ThreadExecutorTest, RunsATimerOnlyOnceItsTimeHasCome) {
  const Clock& clock = SystemClock::instance();
  ThreadExecutor executor(clock);
  std::promise<Clock::Duration> fired;
  const Clock::Duration due = clock.now() + std::chrono::milliseconds(20);
  executor.post_at(due, [&] { fired.set_value(clock.now()); });
  EXPECT_GE(fired.get_future().get(), due);
}

TEST(ThreadExecutorTest, WaitIdleReturnsOnceEveryDueTaskHasRunButNotForLaterTimers) {
  ThreadExecutor executor(SystemClock::instance());
  std::latch release(1);
  std::atomic<int> ran{0};
  executor.post([&] {
    release.wait();
    ++ran;
    // Posted for now by a running task: the wait covers it too.
    executor.post([&] { ++ran; });
  });
  bool timer_ran = false;
  executor.post_at(SystemClock::instance().now() + std::chrono::hours(1),
                   [&] { timer_ran = true; });
  EXPECT_FALSE(executor.wait_idle(std::chrono::milliseconds(1))) << "a task is still held";
  release.count_down();
  ASSERT_TRUE(executor.wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(timer_ran);
}

TEST(ThreadExecutorTest, WaitIdleRunsATimerThatAManualClockMovedPast) {
  ManualClock clock;
  ThreadExecutor executor(clock);
  std::atomic<bool> ran{false};
  executor.post_at(clock.now() + std::chrono::seconds(60), [&] { ran = true; });
  EXPECT_TRUE(executor.wait_idle(std::chrono::seconds(30))) << "nothing is due yet";
  EXPECT_FALSE(ran.load());
  clock.advance(std::chrono::seconds(60));
  ASSERT_TRUE(executor.wait_idle(std::chrono::seconds(30)));
  EXPECT_TRUE(ran.load());
}

TEST(ThreadExecutorTest, DestructionDropsTimersNotYetDue) {
  bool ran = false;
  {
    ThreadExecutor executor(SystemClock::instance());
    executor.post_at(SystemClock::instance().now() + std::chrono::hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace siesta
