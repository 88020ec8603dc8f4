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

// Forwards everything to `inner`; the replay numbered fail_at (1-based, counted from arming)
// returns an injected DeviceError instead of running.
class ReplayFailingKernels final : public Kernels {
 public:
  explicit ReplayFailingKernels(Kernels& inner) : inner_(inner) {}
  void fail_replay(uint64_t nth) {
    replays_.store(0);
    fail_at_.store(nth);
  }

  std::string name() const override { return inner_.name(); }
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
                   uint32_t hd, uint32_t c, DeviceAddress p, DeviceAddress s,
                   DeviceAddress o) override {
    return inner_.attention(q, kc, vc, t, h, hd, c, p, s, o);
  }
  Status recurrent_update(DeviceAddress i, DeviceAddress g, uint32_t n, DeviceAddress s) override {
    return inner_.recurrent_update(i, g, n, s);
  }
  Status argmax(DeviceAddress l, uint32_t f, uint32_t la, DeviceAddress o) override {
    return inner_.argmax(l, f, la, o);
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
    if (replays_.fetch_add(1) + 1 == fail_at_.load()) {
      return DeviceError("injected replay failure");
    }
    return inner_.replay(graph);
  }

 private:
  Kernels& inner_;
  std::atomic<uint64_t> replays_{0};
  std::atomic<uint64_t> fail_at_{0};  // 0: never
};

constexpr char kPrompt[] = "The rain in Spain stays mainly";  // 30 tokens

class EngineFaultTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(EngineFaultTest, DeviceErrorDiscardsTheHistoryAndTheEngineRecovers) {
  ReplayFailingKernels* faulty = nullptr;
  EngineRig rig(tiny_config(), "", [&faulty](Kernels& inner) {
    auto k = std::make_unique<ReplayFailingKernels>(inner);
    faulty = k.get();
    return k;
  });
  EngineRig reference;
  ASSERT_TRUE(rig.ok() && reference.ok() && faulty != nullptr);
  ASSERT_TRUE(rig.generate("An earlier conversation", 8).ok());
  ASSERT_GT(rig.history(), 0u);

  faulty->fail_replay(GetParam());  // a prompt token's replay, or a generated token's
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

// Replay 1: the first prompt token fed; 30: the last prompt token; 35: mid-generation.
INSTANTIATE_TEST_SUITE_P(AtReplay, EngineFaultTest, ::testing::Values(1, 30, 35));

}  // namespace
}  // namespace siesta::engine
