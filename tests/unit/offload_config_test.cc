// The offload flag rules of ANCHORS.md ("The seed"): integers 0..604800, expiry must exceed
// idle, a directory is required when enabled; each message names the flag and the rule.
#include "core/offload/offload_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace siesta {
namespace {

using ::testing::HasSubstr;

OffloadConfig enabled(int64_t idle, int64_t expire) {
  OffloadConfig config;
  config.idle_seconds = idle;
  config.expire_seconds = expire;
  config.disk_dir = "/tmp/siesta";
  return config;
}

TEST(OffloadConfigTest, DefaultsAreOffAndValid) {
  OffloadConfig config;
  EXPECT_EQ(config.idle_seconds, 0);
  EXPECT_EQ(config.expire_seconds, 3600);
  EXPECT_TRUE(config.disk_dir.empty());
  EXPECT_FALSE(config.enabled());
  EXPECT_TRUE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, EnabledIsIdleNotZero) {
  EXPECT_TRUE(enabled(1, 2).enabled());
  EXPECT_FALSE(enabled(0, 2).enabled());
}

TEST(OffloadConfigTest, BoundariesOfIdle) {
  EXPECT_TRUE(validate_offload_config(enabled(1, 2)).ok());
  EXPECT_TRUE(validate_offload_config(enabled(kMaxOffloadSeconds - 1, kMaxOffloadSeconds)).ok());

  Status over = validate_offload_config(enabled(604801, 604801));
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "--cache-idle-seconds (604801) must be between 0 and 604800");

  Status negative = validate_offload_config(enabled(-1, 10));
  EXPECT_EQ(negative.message(), "--cache-idle-seconds (-1) must be between 0 and 604800");
}

TEST(OffloadConfigTest, BoundariesOfExpiry) {
  EXPECT_TRUE(validate_offload_config(enabled(60, kMaxOffloadSeconds)).ok());
  EXPECT_EQ(validate_offload_config(enabled(60, 604801)).message(),
            "--cache-expire-seconds (604801) must be between 0 and 604800");
  EXPECT_EQ(validate_offload_config(enabled(60, -1)).message(),
            "--cache-expire-seconds (-1) must be between 0 and 604800");
}

TEST(OffloadConfigTest, RangesAreCheckedEvenWhenOff) {
  OffloadConfig config;
  config.expire_seconds = 604801;
  EXPECT_THAT(validate_offload_config(config).message(), HasSubstr("--cache-expire-seconds"));
  config.expire_seconds = -5;
  EXPECT_FALSE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, ExpiryMustExceedIdle) {
  Status equal = validate_offload_config(enabled(60, 60));
  EXPECT_EQ(equal.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(equal.message(),
            "--cache-expire-seconds (60) must be greater than --cache-idle-seconds (60)");
  EXPECT_EQ(validate_offload_config(enabled(60, 30)).message(),
            "--cache-expire-seconds (30) must be greater than --cache-idle-seconds (60)");
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
  EXPECT_EQ(missing.message(), "--cache-disk-dir is required when --cache-idle-seconds is not 0");
}

TEST(OffloadConfigTest, DirectoryIgnoredWhenOff) {
  OffloadConfig config;
  config.disk_dir = "/somewhere";
  EXPECT_TRUE(validate_offload_config(config).ok());
}

TEST(OffloadConfigTest, RangeIsCheckedBeforeTheOtherRules) {
  // A person fixing one flag at a time sees the most basic problem first.
  OffloadConfig config = enabled(604801, 5);
  config.disk_dir.clear();
  EXPECT_THAT(validate_offload_config(config).message(),
              HasSubstr("--cache-idle-seconds (604801) must be between"));
}

}  // namespace
}  // namespace siesta
