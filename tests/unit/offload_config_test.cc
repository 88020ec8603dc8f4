// The offload settings' rules (core/offload/offload_config.h): integers 0..604800, expiry must
// exceed idle, a directory is required when enabled. Each problem is typed (the server words
// it with its flag names: server_flags_test) and, from core, worded without any flag name.
#include "core/offload/offload_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace siesta {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

OffloadConfig enabled(int64_t idle, int64_t expire) {
  OffloadConfig config;
  config.idle_seconds = idle;
  config.expire_seconds = expire;
  config.disk_dir = "/tmp/siesta";
  return config;
}

std::optional<OffloadConfigRule> rule_of(const OffloadConfig& config) {
  std::optional<OffloadConfigProblem> problem = find_offload_config_problem(config);
  if (!problem) return std::nullopt;
  return problem->rule;
}

TEST(OffloadConfigTest, DefaultsAreOffAndValid) {
  OffloadConfig config;
  EXPECT_EQ(config.idle_seconds, 0);
  EXPECT_EQ(config.expire_seconds, 3600);
  EXPECT_TRUE(config.disk_dir.empty());
  EXPECT_FALSE(config.enabled());
  EXPECT_TRUE(validate_offload_config(config).ok());
  EXPECT_EQ(rule_of(config), std::nullopt);
}

TEST(OffloadConfigTest, EnabledIsIdleNotZero) {
  EXPECT_TRUE(enabled(1, 2).enabled());
  EXPECT_FALSE(enabled(0, 2).enabled());
  EXPECT_TRUE(offload_enabled(1));
  EXPECT_FALSE(offload_enabled(0));
}

TEST(OffloadConfigTest, BoundariesOfIdle) {
  EXPECT_TRUE(validate_offload_config(enabled(1, 2)).ok());
  EXPECT_TRUE(validate_offload_config(enabled(kMaxOffloadSeconds - 1, kMaxOffloadSeconds)).ok());

  Status over = validate_offload_config(enabled(604801, 604801));
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "the idle time must be 0..604800 seconds, got 604801");
  EXPECT_EQ(rule_of(enabled(604801, 604801)), OffloadConfigRule::kIdleOutOfRange);

  Status negative = validate_offload_config(enabled(-1, 10));
  EXPECT_EQ(negative.message(), "the idle time must be 0..604800 seconds, got -1");
}

TEST(OffloadConfigTest, BoundariesOfExpiry) {
  EXPECT_TRUE(validate_offload_config(enabled(60, kMaxOffloadSeconds)).ok());
  EXPECT_EQ(validate_offload_config(enabled(60, 604801)).message(),
            "the expiry must be 0..604800 seconds, got 604801");
  EXPECT_EQ(validate_offload_config(enabled(60, -1)).message(),
            "the expiry must be 0..604800 seconds, got -1");
  EXPECT_EQ(rule_of(enabled(60, -1)), OffloadConfigRule::kExpireOutOfRange);
}

TEST(OffloadConfigTest, RangesAreCheckedEvenWhenOff) {
  OffloadConfig config;
  config.expire_seconds = 604801;
  EXPECT_THAT(validate_offload_config(config).message(), HasSubstr("the expiry"));
  config.expire_seconds = -5;
  EXPECT_FALSE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, ExpiryMustExceedIdle) {
  Status equal = validate_offload_config(enabled(60, 60));
  EXPECT_EQ(equal.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(equal.message(), "the expiry (60 s) must be greater than the idle time (60 s)");
  EXPECT_EQ(validate_offload_config(enabled(60, 30)).message(),
            "the expiry (30 s) must be greater than the idle time (60 s)");
  EXPECT_EQ(rule_of(enabled(60, 30)), OffloadConfigRule::kExpireNotAfterIdle);
  EXPECT_FALSE(validate_offload_config(enabled(1, 0)).ok());
  EXPECT_TRUE(validate_offload_config(enabled(60, 61)).ok());
  // The highest idle time leaves no room for a longer expiry.
  EXPECT_FALSE(validate_offload_config(enabled(kMaxOffloadSeconds, kMaxOffloadSeconds)).ok());
}

TEST(OffloadConfigTest, ExpiryRuleDoesNotApplyWhenOff) {
  OffloadConfig config;
  config.expire_seconds = 0;
  EXPECT_TRUE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, DirectoryRequiredWhenEnabled) {
  OffloadConfig config = enabled(60, 120);
  config.disk_dir.clear();
  Status missing = validate_offload_config(config);
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message(), "a snapshot directory is required when the idle time is not 0");
  EXPECT_EQ(rule_of(config), OffloadConfigRule::kDirectoryMissing);
}

TEST(OffloadConfigTest, DirectoryIgnoredWhenOff) {
  OffloadConfig config;
  config.disk_dir = "/somewhere";
  EXPECT_TRUE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, RangeIsCheckedBeforeTheOtherRules) {
  // A person fixing one setting at a time sees the most basic problem first.
  OffloadConfig config = enabled(604801, 5);
  config.disk_dir.clear();
  EXPECT_EQ(rule_of(config), OffloadConfigRule::kIdleOutOfRange);
  EXPECT_THAT(validate_offload_config(config).message(), HasSubstr("the idle time must be"));
}

// The problem carries the values, so a front end can word it with its own names.
TEST(OffloadConfigTest, AProblemCarriesTheValuesItIsAbout) {
  std::optional<OffloadConfigProblem> problem = find_offload_config_problem(enabled(60, 30));
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->idle_seconds, 60);
  EXPECT_EQ(problem->expire_seconds, 30);
}

// Core's words never name a command-line flag: that is the server's business.
TEST(OffloadConfigTest, MessagesNameNoFlag) {
  const OffloadConfig broken[] = {enabled(-1, 5), enabled(60, 604801), enabled(60, 30), [] {
                                    OffloadConfig c = enabled(60, 120);
                                    c.disk_dir.clear();
                                    return c;
                                  }()};
  for (const OffloadConfig& config : broken) {
    const Status status = validate_offload_config(config);
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), Not(HasSubstr("--"))) << status.message();
  }
}

// The Offloader checks its durations with the same rule and words.
TEST(OffloadConfigTest, TheTimesAloneFollowTheSameRules) {
  EXPECT_TRUE(validate_offload_times(0, 0).ok()) << "no expiry rule while off";
  EXPECT_TRUE(validate_offload_times(60, 61).ok());
  EXPECT_EQ(validate_offload_times(60, 60).message(),
            validate_offload_config(enabled(60, 60)).message());
  EXPECT_EQ(validate_offload_times(-1, 60).message(),
            validate_offload_config(enabled(-1, 60)).message());
}

}  // namespace
}  // namespace siesta
