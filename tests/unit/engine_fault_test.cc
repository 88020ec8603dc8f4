// Engine under a kernels failure: a device error in the middle of a command discards the
// history (the session's state is unspecified after it) and is returned; the engine stays
// usable and the next request gives the bytes of a fresh engine.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "compute/kernels_wrapper.h"
#include "engine/engine.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::EngineRig;
using testing::text_of;
using testing::tiny_config;

// Forwards everything to `inner`; the step numbered fail_at (1-based, counted from arming)
// returns an injected DeviceError instead of running. A step is a replay of the decode graph
// (a generated token) or a prefill block, counted at its first operation (embed_block).
class StepFailingKernels final : public KernelsWrapper {
 public:
  using KernelsWrapper::KernelsWrapper;
  void fail_step(uint64_t nth) {
    steps_.store(0);
    fail_at_.store(nth);
  }

  Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens, uint32_t count,
                     DeviceAddress out) override {
    if (step_fails()) return DeviceError("injected prefill block failure");
    return KernelsWrapper::embed_block(table, dim, tokens, count, out);
  }
  Status replay(const KernelGraph& graph) override {
    if (step_fails()) return DeviceError("injected replay failure");
    return KernelsWrapper::replay(graph);
  }

 private:
  bool step_fails() { return steps_.fetch_add(1) + 1 == fail_at_.load(); }

  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> fail_at_{0};  // 0: never
};

constexpr char kPrompt[] = "The rain in Spain stays mainly";  // 30 tokens

class EngineFaultTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(EngineFaultTest, DeviceErrorDiscardsTheHistoryAndTheEngineRecovers) {
  StepFailingKernels* faulty = nullptr;
  // Prefill blocks of at most 8: the pacer's blocks grow from one token, so the 30-token
  // prompt is six blocks (1, 2, 4, 8, 8, 7), steps 1 to 6, and step 12 a generated token's
  // replay; the reference reads prompts in the default blocks, which must not change the bytes.
  ModelConfig config = tiny_config();
  config.prefill_block = 8;
  EngineRig rig(config, "", [&faulty](Kernels& inner) {
    auto k = std::make_unique<StepFailingKernels>(inner);
    faulty = k.get();
    return k;
  });
  EngineRig reference;
  ASSERT_TRUE(rig.ok() && reference.ok() && faulty != nullptr);
  ASSERT_TRUE(rig.generate("An earlier conversation", 8).ok());
  ASSERT_GT(rig.history(), 0u);

  faulty->fail_step(GetParam());  // a prefill block, or a generated token's replay
  std::string streamed;
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 20;
  request.on_text = [&streamed](std::string_view piece) { streamed += piece; };
  auto failed = rig.generate(std::move(request));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(rig.history(), 0u);  // discarded, not left half-written

  auto again = rig.generate(kPrompt, 20);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->cached_tokens, 0u);
  const std::string want = text_of(reference.generate(kPrompt, 20));
  EXPECT_EQ(again->text, want);
  EXPECT_EQ(want.compare(0, streamed.size(), streamed), 0);  // what streamed was right
}

// Step 1: the first prefill block; 4: the last; 5: the first generated token's replay; 12:
// mid-generation.
INSTANTIATE_TEST_SUITE_P(AtStep, EngineFaultTest, ::testing::Values(1, 4, 5, 12));

}  // namespace
}  // namespace siesta::engine
