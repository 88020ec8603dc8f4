#include "core/base/clock.h"

#include <gtest/gtest.h>

namespace siesta {
namespace {

using std::chrono::seconds;

TEST(ManualClockTest, MovesOnlyWhenAdvanced) {
  ManualClock clock(1000);
  Clock::Duration start = clock.now();
  EXPECT_EQ(clock.now(), start);
  EXPECT_EQ(clock.unix_seconds(), 1000);
  clock.advance(seconds(90));
  EXPECT_EQ(clock.now() - start, seconds(90));
  EXPECT_EQ(clock.unix_seconds(), 1090);
}

TEST(ManualClockTest, AtUnixReadsNowLessTheSecondsSinceAndNeverBelowZero) {
  ManualClock clock(1000);
  clock.advance(seconds(100));  // now() is 100 s, unix 1100
  EXPECT_EQ(clock.at_unix(1070), seconds(70)) << "30 s ago";
  EXPECT_EQ(clock.at_unix(1100), seconds(100)) << "now";
  EXPECT_EQ(clock.at_unix(1200), seconds(100)) << "a time in the future reads as now";
  EXPECT_EQ(clock.at_unix(500), seconds(0)) << "before the clock's origin: zero";
}

TEST(SystemClockTest, MonotonicAndNearWallTime) {
  SystemClock& clock = SystemClock::instance();
  Clock::Duration a = clock.now();
  Clock::Duration b = clock.now();
  EXPECT_LE(a, b);
  int64_t wall =
      std::chrono::duration_cast<seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_LE(std::abs(clock.unix_seconds() - wall), 1);
}

}  // namespace
}  // namespace siesta
