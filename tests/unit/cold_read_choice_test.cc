#include "core/snapshot/cold_read_choice.h"

#include <gtest/gtest.h>

#include <vector>

namespace siesta {
namespace {

using Way = ColdReadChoice::Way;
constexpr uint64_t kBig = ColdReadChoice::kLeastBytes;

// Records a read of kBig bytes at `gbps`.
void record(ColdReadChoice& choice, Way way, double gbps) {
  choice.record(way, kBig, static_cast<double>(kBig) / (gbps * 1e9));
}

TEST(ColdReadChoiceTest, TheWaysTakeTurnsUntilEachHasItsSamples) {
  ColdReadChoice choice;
  std::vector<Way> taken;
  for (size_t i = 0; i < 2 * ColdReadChoice::kSamples; ++i) {
    const Way way = choice.next(kBig);
    taken.push_back(way);
    record(choice, way, way == Way::kAroundCache ? 1.0 : 3.0);
  }
  EXPECT_EQ(taken, (std::vector<Way>{Way::kAroundCache, Way::kThroughCache, Way::kAroundCache,
                                     Way::kThroughCache, Way::kAroundCache, Way::kThroughCache}));
  EXPECT_NEAR(choice.rate(Way::kAroundCache), 1e9, 1e3);
  EXPECT_NEAR(choice.rate(Way::kThroughCache), 3e9, 1e3);
}

TEST(ColdReadChoiceTest, TheFasterWayIsKeptAndTheOtherTriedEveryRetryPeriod) {
  for (const Way faster : {Way::kAroundCache, Way::kThroughCache}) {
    ColdReadChoice choice;
    for (size_t i = 0; i < ColdReadChoice::kSamples; ++i) {
      record(choice, Way::kAroundCache, faster == Way::kAroundCache ? 2.5 : 1.5);
      record(choice, Way::kThroughCache, faster == Way::kThroughCache ? 2.5 : 1.5);
    }
    size_t other = 0;
    for (uint64_t i = 1; i <= 3 * ColdReadChoice::kRetryEvery; ++i) {
      const Way way = choice.next(kBig);
      if (way != faster) {
        ++other;
        EXPECT_EQ(i % ColdReadChoice::kRetryEvery, 0u) << "read " << i;
      }
    }
    EXPECT_EQ(other, 3u);
  }
}

TEST(ColdReadChoiceTest, ADiskThatChangesChangesTheChoiceWithinItsSamples) {
  ColdReadChoice choice;
  for (size_t i = 0; i < ColdReadChoice::kSamples; ++i) {
    record(choice, Way::kAroundCache, 2.7);
    record(choice, Way::kThroughCache, 2.0);
  }
  ASSERT_EQ(choice.next(kBig), Way::kAroundCache);
  // Reads around the cache slow down (another reader on the disk): two of the last three are
  // slow, so the median is, and the other way is taken.
  record(choice, Way::kAroundCache, 1.0);
  EXPECT_EQ(choice.next(kBig), Way::kAroundCache) << "one slow read is not the median";
  record(choice, Way::kAroundCache, 1.0);
  EXPECT_EQ(choice.next(kBig), Way::kThroughCache);
  EXPECT_NEAR(choice.rate(Way::kAroundCache), 1e9, 1e3);
}

TEST(ColdReadChoiceTest, ItsStatsSayWhatItLearnedAndWhichWayItTakes) {
  ColdReadChoice choice;
  ColdReadChoice::Stats stats = choice.stats();
  EXPECT_TRUE(stats.learning);
  EXPECT_EQ(stats.of(Way::kAroundCache).reads + stats.of(Way::kThroughCache).reads, 0u);
  EXPECT_EQ(stats.of(Way::kAroundCache).bytes_per_second, 0);
  for (size_t i = 0; i < ColdReadChoice::kSamples; ++i) {
    record(choice, Way::kAroundCache, 1.5);
    stats = choice.stats();
    EXPECT_TRUE(stats.learning) << "through the cache has no reads yet";
    record(choice, Way::kThroughCache, 2.5);
  }
  stats = choice.stats();
  EXPECT_FALSE(stats.learning);
  EXPECT_EQ(stats.preferred, Way::kThroughCache);
  EXPECT_EQ(stats.preferred, choice.next(kBig)) << "the stats name the way next() takes";
  EXPECT_NEAR(stats.of(Way::kAroundCache).bytes_per_second, 1.5e9, 1e3);
  EXPECT_NEAR(stats.of(Way::kThroughCache).bytes_per_second, 2.5e9, 1e3);
  EXPECT_EQ(stats.of(Way::kAroundCache).reads, ColdReadChoice::kSamples);
  EXPECT_EQ(stats.of(Way::kThroughCache).reads, ColdReadChoice::kSamples);
  // Around the cache turns faster: its median is of its last kSamples reads.
  for (size_t i = 0; i < ColdReadChoice::kSamples; ++i) record(choice, Way::kAroundCache, 4.0);
  stats = choice.stats();
  EXPECT_EQ(stats.preferred, Way::kAroundCache);
  EXPECT_NEAR(stats.of(Way::kAroundCache).bytes_per_second, 4e9, 1e3);
  EXPECT_EQ(stats.of(Way::kAroundCache).reads, 2 * ColdReadChoice::kSamples);
}

TEST(ColdReadChoiceTest, SmallReadsGoAroundTheCacheAndAreNotCounted) {
  ColdReadChoice choice;
  for (size_t i = 0; i < 2 * ColdReadChoice::kSamples; ++i) {
    record(choice, Way::kThroughCache, 9.0);
    record(choice, Way::kAroundCache, 1.0);
  }
  EXPECT_EQ(choice.next(kBig - 1), Way::kAroundCache);
  choice.record(Way::kThroughCache, kBig - 1, 1e-9);  // 16 PB/s, were it counted
  EXPECT_NEAR(choice.rate(Way::kThroughCache), 9e9, 1e3);
  choice.record(Way::kThroughCache, kBig, 0);  // no time taken: not a figure
  EXPECT_NEAR(choice.rate(Way::kThroughCache), 9e9, 1e3);
}

}  // namespace
}  // namespace siesta
