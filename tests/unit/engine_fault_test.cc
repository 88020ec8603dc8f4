// Engine under a kernels failure: a device error in the middle of a command discards the
// history (the session's state is unspecified after it) and is returned; the engine stays
// usable and the next request gives the bytes of a fresh engine. At every kernels call of a
// sampled turn with log probabilities (tests/support/call_failing_kernels.h), and with a
// device that stays broken through the discard. A streaming callback that throws fails only
// its own request.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "compute/kernels_wrapper.h"
#include "engine/engine.h"
#include "tests/support/call_failing_kernels.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::CallFailingKernels;
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

constexpr char kRainPrompt[] = "The rain in Spain stays mainly";  // 30 tokens

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
  request.prompt = kRainPrompt;
  request.max_tokens = 20;
  request.on_text = [&streamed](std::string_view piece) { streamed += piece; };
  auto failed = rig.generate(std::move(request));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(rig.history(), 0u);  // discarded, not left half-written

  auto again = rig.generate(kRainPrompt, 20);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->cached_tokens, 0u);
  const std::string want = text_of(reference.generate(kRainPrompt, 20));
  EXPECT_EQ(again->text, want);
  EXPECT_EQ(want.compare(0, streamed.size(), streamed), 0);  // what streamed was right
}

// Step 1: the first prefill block; 4: the last; 5: the first generated token's replay; 12:
// mid-generation.
INSTANTIATE_TEST_SUITE_P(AtStep, EngineFaultTest, ::testing::Values(1, 4, 5, 12));

// An engine computing through a CallFailingKernels, prefill blocks of at most 8 tokens.
struct FailingEngine {
  FailingEngine() {
    ModelConfig config = tiny_config();
    config.prefill_block = 8;
    rig = std::make_unique<EngineRig>(config, "", [this](Kernels& inner) {
      auto wrapped = std::make_unique<CallFailingKernels>(inner);
      kernels = wrapped.get();
      return wrapped;
    });
  }
  bool ok() const { return rig->ok() && kernels != nullptr; }

  std::unique_ptr<EngineRig> rig;
  CallFailingKernels* kernels = nullptr;
};

// A sampled turn with log probabilities: the logits come to the host at every step.
GenerateRequest sampled_turn() {
  GenerateRequest request;
  request.prompt = kRainPrompt;
  request.max_tokens = 6;
  request.temperature = 0.9f;
  request.seed = 11;
  request.logprobs = 2;
  return request;
}

// Each kernels call of the turn, failed in turn, from its first (the state zeroed to read a
// prompt that shares nothing with the history) to its last (a prefill block, the pacer's
// wait, the prompt-end checkpoint, the logits, a decode step): the turn returns the device
// error, the history is discarded, and the same turn then answers as on a fresh engine.
// The calls are counted from the turn's start until a turn runs out of calls to fail (the
// pacer's waits follow the measured speed, so the count is not fixed).
TEST(EngineKernelFaultsTest, EachKernelCallOfASampledTurnFailsItAndDiscardsTheHistory) {
  FailingEngine failing;
  EngineRig reference;
  ASSERT_TRUE(failing.ok() && reference.ok());
  EngineRig& rig = *failing.rig;
  CallFailingKernels& kernels = *failing.kernels;
  const Result<GenerateResult> want = reference.generate(sampled_turn());
  ASSERT_TRUE(want.ok()) << want.status().to_string();

  uint64_t n = 1;
  for (;; ++n) {
    SCOPED_TRACE("kernels call " + std::to_string(n) + " of the turn");
    kernels.disarm();
    ASSERT_TRUE(rig.engine().reset(0).get().ok());
    ASSERT_TRUE(rig.generate("An earlier conversation", 4).ok());
    ASSERT_GT(rig.history(), 0u);

    kernels.arm(n);
    const Result<GenerateResult> failed = rig.generate(sampled_turn());
    if (kernels.fired() == nullptr) {  // past the turn's last call
      ASSERT_TRUE(failed.ok()) << failed.status().to_string();
      EXPECT_EQ(failed->text, want->text);
      break;
    }
    SCOPED_TRACE(kernels.fired());
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), StatusCode::kDeviceError);
    EXPECT_NE(failed.status().message().find("injected failure of kernels"), std::string::npos);
    EXPECT_EQ(rig.history(), 0u) << "discarded, not left half-written";

    kernels.disarm();
    const Result<GenerateResult> again = rig.generate(sampled_turn());
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(again->cached_tokens, 0u);
    EXPECT_EQ(again->text, want->text);
    EXPECT_EQ(again->logprobs.size(), want->logprobs.size());
  }
  // The zeroing, five prefill blocks of about 20 operations each, the prompt-end checkpoint
  // and six decode steps at the least.
  EXPECT_GT(n, 100u);
}

// A device that stays broken: the discard after the failure fails too, and the error says
// both. Once the device works again the next request answers as a fresh engine.
TEST(EngineKernelFaultsTest, ADiscardThatFailsTooIsReportedAndTheNextRequestStartsOver) {
  FailingEngine failing;
  EngineRig reference;
  ASSERT_TRUE(failing.ok() && reference.ok());
  EngineRig& rig = *failing.rig;
  CallFailingKernels& kernels = *failing.kernels;
  ASSERT_TRUE(rig.generate("An earlier conversation", 4).ok());

  kernels.arm(10, /*sticky=*/true);  // inside the first prefill block, and every call after
  const Result<GenerateResult> failed = rig.generate(kRainPrompt, 8);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(failed.status().message().find("discarding the history then failed too"),
            std::string::npos)
      << failed.status().to_string();
  EXPECT_GT(kernels.failures(), 1u);
  EXPECT_EQ(rig.history(), 0u);

  kernels.disarm();
  const Result<GenerateResult> again = rig.generate(kRainPrompt, 8);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->cached_tokens, 0u);
  EXPECT_EQ(again->text, text_of(reference.generate(kRainPrompt, 8)));
}

// Exceptions do not cross the engine's thread: a streaming callback that throws fails its own
// request (Internal, naming the command), and the engine goes on to answer the next one as a
// fresh engine does.
TEST(EngineCallbackFaultTest, AThrowingCallbackFailsItsRequestAndTheEngineGoesOn) {
  EngineRig rig, reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  GenerateRequest request;
  request.prompt = kRainPrompt;
  request.max_tokens = 8;
  request.on_text = [](std::string_view) { throw std::runtime_error("the client's callback"); };
  const Result<GenerateResult> failed = rig.generate(std::move(request));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_NE(failed.status().message().find("generate threw an exception"), std::string::npos)
      << failed.status().to_string();

  const Result<GenerateResult> next = rig.generate(kRainPrompt, 8);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(next->text, text_of(reference.generate(kRainPrompt, 8)));
  EXPECT_EQ(rig.engine().status().commands_run, 2u);
}

}  // namespace
}  // namespace siesta::engine
