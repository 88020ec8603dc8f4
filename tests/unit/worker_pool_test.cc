// WorkerPool (worker_pool.h): jobs run at once on a thread of their own up to the limit, then
// wait for a free one; shutdown runs what was submitted and joins.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

namespace siesta::server {
namespace {

// A latch the jobs wait on until the test opens it, counting who is waiting.
class Gate {
 public:
  void pass() {
    std::unique_lock lock(mutex_);
    ++waiting_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    --waiting_;
    ++passed_;
    changed_.notify_all();
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void wait_waiting(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ >= n; });
  }
  int waiting() {
    std::lock_guard lock(mutex_);
    return waiting_;
  }
  void wait_passed(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return passed_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
  int waiting_ = 0;
  int passed_ = 0;
};

TEST(WorkerPoolTest, EveryJobGetsAThreadUpToTheLimit) {
  WorkerPool pool(4);
  Gate gate;
  // Four blocked jobs run at once: none waits for another.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.submit([&gate] { gate.pass(); }).ok());
  gate.wait_waiting(4);
  EXPECT_EQ(pool.threads(), 4u);
  // A fifth waits for a free worker: no fifth thread.
  ASSERT_TRUE(pool.submit([&gate] { gate.pass(); }).ok());
  EXPECT_EQ(pool.threads(), 4u);
  gate.open();
  gate.wait_passed(5);
  EXPECT_EQ(pool.threads(), 4u);
}

TEST(WorkerPoolTest, IdleWorkersAreReused) {
  WorkerPool pool(8);
  for (int round = 0; round < 20; ++round) {
    Gate gate;
    ASSERT_TRUE(pool.submit([&gate] { gate.pass(); }).ok());
    gate.open();
    gate.wait_passed(1);
    pool.wait_until_idle();  // the worker is back waiting before the next job comes
  }
  // One job at a time, each submitted once the last worker was idle again: one thread.
  EXPECT_EQ(pool.threads(), 1u);
}

TEST(WorkerPoolTest, ShutdownRunsWhatWasSubmittedThenRefuses) {
  std::mutex mutex;
  int ran = 0;
  WorkerPool pool(2);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.submit([&] {
                      std::lock_guard lock(mutex);
                      ++ran;
                    })
                    .ok());
  }
  pool.shutdown();
  EXPECT_EQ(ran, 50);
  EXPECT_EQ(pool.threads(), 0u);
  EXPECT_FALSE(pool.submit([] {}).ok());
  pool.shutdown();  // again: nothing
}

}  // namespace
}  // namespace siesta::server
