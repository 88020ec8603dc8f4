// Engine under a kernels failure: a device error in the middle of a command discards the
// history (the session's state is unspecified after it) and is returned; the engine stays
// usable and the next request gives the bytes of a fresh engine.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

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
class StepFailingKernels final : public Kernels {
 public:
  explicit StepFailingKernels(Kernels& inner) : inner_(inner) {}
  void fail_step(uint64_t nth) {
    steps_.store(0);
    fail_at_.store(nth);
  }

  std::string name() const override { return inner_.name(); }
  uint32_t preferred_prefill_block() const override { return inner_.preferred_prefill_block(); }
  Status embed(DeviceAddress t, uint32_t d, DeviceAddress p, DeviceAddress o) override {
    return inner_.embed(t, d, p, o);
  }
  Status rms_norm(DeviceAddress x, DeviceAddress w, uint32_t d, float e, DeviceAddress o) override {
    return inner_.rms_norm(x, w, d, e, o);
  }
  Status matmul(DeviceAddress w, DeviceAddress x, uint32_t r, uint32_t c,
                DeviceAddress o) override {
    return inner_.matmul(w, x, r, c, o);
  }
  Status add(DeviceAddress x, uint32_t n, DeviceAddress io) override {
    return inner_.add(x, n, io);
  }
  Status swiglu(DeviceAddress g, DeviceAddress u, uint32_t n, DeviceAddress o) override {
    return inner_.swiglu(g, u, n, o);
  }
  Status rope_table(DeviceAddress t, uint32_t c, uint32_t h, float th) override {
    return inner_.rope_table(t, c, h, th);
  }
  Status rope(DeviceAddress v, uint32_t h, uint32_t hd, DeviceAddress t, DeviceAddress p) override {
    return inner_.rope(v, h, hd, t, p);
  }
  Status kv_store(DeviceAddress k, DeviceAddress v, KvType t, uint32_t d, DeviceAddress kc,
                  DeviceAddress vc, DeviceAddress p) override {
    return inner_.kv_store(k, v, t, d, kc, vc, p);
  }
  Status attention(DeviceAddress q, DeviceAddress kc, DeviceAddress vc, KvType t, uint32_t h,
                   uint32_t hd, uint32_t c, DeviceAddress p, DeviceAddress o) override {
    return inner_.attention(q, kc, vc, t, h, hd, c, p, o);
  }
  Status recurrent_update(DeviceAddress i, DeviceAddress g, uint32_t n, DeviceAddress s) override {
    return inner_.recurrent_update(i, g, n, s);
  }
  Status argmax(DeviceAddress l, uint32_t f, uint32_t la, DeviceAddress o) override {
    return inner_.argmax(l, f, la, o);
  }
  Status embed_block(DeviceAddress t, uint32_t d, DeviceAddress tk, uint32_t n,
                     DeviceAddress o) override {
    if (step_fails()) return DeviceError("injected prefill block failure");
    return inner_.embed_block(t, d, tk, n, o);
  }
  Status rms_norm_block(DeviceAddress x, DeviceAddress w, uint32_t d, float e, uint32_t n,
                        DeviceAddress o) override {
    return inner_.rms_norm_block(x, w, d, e, n, o);
  }
  Status matmul_block(DeviceAddress w, DeviceAddress x, uint32_t r, uint32_t c, uint32_t n,
                      DeviceAddress o) override {
    return inner_.matmul_block(w, x, r, c, n, o);
  }
  Status rope_block(DeviceAddress v, uint32_t h, uint32_t hd, DeviceAddress t, uint32_t p,
                    uint32_t n) override {
    return inner_.rope_block(v, h, hd, t, p, n);
  }
  Status kv_store_block(DeviceAddress k, DeviceAddress v, KvType t, uint32_t d, DeviceAddress kc,
                        DeviceAddress vc, uint32_t p, uint32_t n) override {
    return inner_.kv_store_block(k, v, t, d, kc, vc, p, n);
  }
  Status attention_block(DeviceAddress q, DeviceAddress kc, DeviceAddress vc, KvType t, uint32_t h,
                         uint32_t hd, uint32_t c, uint32_t p, uint32_t n, DeviceAddress s,
                         DeviceAddress o) override {
    return inner_.attention_block(q, kc, vc, t, h, hd, c, p, n, s, o);
  }
  Status recurrent_scan(DeviceAddress i, DeviceAddress g, uint32_t n, uint32_t c, DeviceAddress s,
                        DeviceAddress ss) override {
    return inner_.recurrent_scan(i, g, n, c, s, ss);
  }
  Status upload(std::span<const std::byte> s, DeviceAddress d) override {
    return inner_.upload(s, d);
  }
  Status download(DeviceAddress s, std::span<std::byte> d) override {
    return inner_.download(s, d);
  }
  Status synchronize() override { return inner_.synchronize(); }
  Status begin_capture() override { return inner_.begin_capture(); }
  Result<std::unique_ptr<KernelGraph>> end_capture() override { return inner_.end_capture(); }
  Status replay(const KernelGraph& graph) override {
    if (step_fails()) return DeviceError("injected replay failure");
    return inner_.replay(graph);
  }

 private:
  bool step_fails() { return steps_.fetch_add(1) + 1 == fail_at_.load(); }

  Kernels& inner_;
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> fail_at_{0};  // 0: never
};

constexpr char kPrompt[] = "The rain in Spain stays mainly";  // 30 tokens

class EngineFaultTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(EngineFaultTest, DeviceErrorDiscardsTheHistoryAndTheEngineRecovers) {
  StepFailingKernels* faulty = nullptr;
  // Prefill blocks of 8: the 30-token prompt is four blocks (8, 8, 8, 6), steps 1 to 4; the
  // reference reads prompts in the default blocks, which must not change the bytes.
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
