// A session that starts over after a fallback or an expiry re-initialises its constants (the
// RoPE table, a kReinit region that no snapshot holds). Its memory was committed fresh by the
// restore, and fresh simulator memory is poison (0xff: NaN in every lane), so a discard that
// skipped the table would rotate every query and key by NaN. The prompts repeat their tokens
// at many positions: only the rotation tells those positions apart, so the answer a fresh
// engine gives depends on the table being right, not merely present.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;
using testing::EngineRig;
using testing::text_of;

constexpr int64_t kIdle = OffloadEngineRig::kIdleSeconds;
constexpr int64_t kExpire = OffloadEngineRig::kExpireSeconds;

const std::string kFirstPrompt = "abcabcabcabcabcabcabc";
const std::string kSecond = "xyxyxyxyxyxyxyxyxyxyxyxyxyxy";

std::string reference_answer(const std::string& prompt) {
  EngineRig fresh;
  EXPECT_TRUE(fresh.ok());
  return fresh.ok() ? text_of(fresh.generate(prompt, 12)) : "";
}

// Guards: the RoPE table not recomputed by Session::discard_history() after a fallback.
TEST(EngineReinitTest, AFallbackRecomputesTheRopeTable) {
  OffloadEngineRig rig;
  ASSERT_TRUE(rig.generate(kFirstPrompt).ok());
  rig.sleep_session();
  ASSERT_EQ(rig.state(), OffloadState::kDisk);
  std::filesystem::remove(rig.snapshot_path());  // gone while it slept
  Result<GenerateResult> after = rig.generate(kSecond);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  ASSERT_TRUE(after->admission.fallback.has_value());
  EXPECT_EQ(*after->admission.fallback, FallbackReason::kNotFound);
  EXPECT_EQ(after->text, reference_answer(kSecond));
}

// Guards: the same after an expiry (the fresh session's discard).
TEST(EngineReinitTest, AnExpiryRecomputesTheRopeTable) {
  OffloadEngineRig rig;
  ASSERT_TRUE(rig.generate(kFirstPrompt).ok());
  rig.sleep_session();
  rig.clock.advance(std::chrono::seconds(kExpire - kIdle));
  rig.executor.run_due();
  ASSERT_EQ(rig.state(), OffloadState::kExpired);
  Result<GenerateResult> after = rig.generate(kSecond);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->admission.fresh_after_expiry);
  EXPECT_EQ(after->text, reference_answer(kSecond));
}

// Guards: the RoPE table not recomputed after a restore (Session::adopt_restored_state): the
// restored history must continue as the engine that never slept does.
TEST(EngineReinitTest, ARestoreRecomputesTheRopeTable) {
  OffloadEngineRig rig;
  EngineRig awake;
  ASSERT_TRUE(awake.ok());
  Result<GenerateResult> first = rig.generate(kFirstPrompt);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(text_of(awake.generate(kFirstPrompt, 12)), first->text);
  rig.sleep_session();
  const std::string next = kFirstPrompt + first->text + kSecond;
  Result<GenerateResult> after = rig.generate(next);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->admission.restored);
  EXPECT_EQ(after->text, text_of(awake.generate(next, 12)));
}

}  // namespace
}  // namespace siesta::engine
