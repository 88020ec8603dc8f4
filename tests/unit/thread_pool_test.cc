// ThreadPool (core/base/thread_pool.h): tasks posted from several threads all run, one thread
// runs them in the order they were posted, a task may post another, and the destructor runs
// what was posted before it joins.
#include "core/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace siesta {
namespace {

TEST(ThreadPoolTest, OneThreadRunsTasksInTheOrderTheyWerePosted) {
  std::vector<int> order;
  std::promise<void> last;
  {
    ThreadPool pool(1);
    EXPECT_EQ(pool.threads(), 1u);
    for (int i = 0; i < 100; ++i) pool.post([&order, i] { order.push_back(i); });
    pool.post([&last] { last.set_value(); });
    last.get_future().wait();
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPoolTest, TasksPostedFromManyThreadsAllRunAndMayPostMore) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(4);
    std::vector<std::thread> posters;
    posters.reserve(4);
    for (int t = 0; t < 4; ++t) {
      posters.emplace_back([&] {
        for (int i = 0; i < 250; ++i) {
          pool.post([&] {
            // Every 50th task posts one more (a million apart: the count of 1s stays apart).
            if ((ran.fetch_add(1) + 1) % 50 == 0) pool.post([&] { ran.fetch_add(1000000); });
          });
        }
      });
    }
    for (std::thread& poster : posters) poster.join();
  }  // the destructor runs everything posted, the tasks' own posts included
  EXPECT_EQ(ran.load() % 1000000, 1000);
  EXPECT_EQ(ran.load() / 1000000, 20);
}

TEST(ThreadPoolTest, TheDestructorRunsTasksStillQueued) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    ThreadPool pool(1);
    pool.post([released] { released.wait(); });  // holds the one thread
    for (int i = 0; i < 10; ++i) pool.post([&ran] { ran.fetch_add(1); });
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace siesta
