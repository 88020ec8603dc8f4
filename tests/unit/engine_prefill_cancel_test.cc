// A cancelled prefill stops soon, whatever the device still has queued: Session::feed() only
// enqueues a token's step, so the engine must wait for the device as it feeds a prompt, or a
// cancel flag raised meanwhile is read only after every step of the prompt has run. The
// device is held back here (a job that waits for the test, queued behind the prompt's first
// step) so that "queued but not run" is certain instead of a matter of speed.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::engine {
namespace {

// Forwards everything to `inner`. Once armed: the first replay is followed on the device
// stream by a job that waits until open() (the device stalls there), every replay is counted,
// and waiting() says whether the engine thread is blocked on the device (download or
// synchronize).
class StallingKernels final : public Kernels {
 public:
  StallingKernels(Kernels& inner, SimBackend& backend) : inner_(inner), backend_(backend) {}

  void arm() {
    std::lock_guard lock(mutex_);
    armed_ = true;
    replays_ = 0;
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }
  // Waits until the engine is blocked on the device or has queued `replays` steps.
  uint64_t wait_blocked_or(uint64_t replays) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ || replays_ >= replays; });
    return replays_;
  }
  uint64_t replays() {
    std::lock_guard lock(mutex_);
    return replays_;
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
    Waiting waiting(*this);
    return inner_.download(s, d);
  }
  Status synchronize() override {
    Waiting waiting(*this);
    return inner_.synchronize();
  }
  Status begin_capture() override { return inner_.begin_capture(); }
  Result<std::unique_ptr<KernelGraph>> end_capture() override { return inner_.end_capture(); }
  Status replay(const KernelGraph& graph) override {
    SIESTA_RETURN_IF_ERROR(inner_.replay(graph));
    bool stall = false;
    {
      std::lock_guard lock(mutex_);
      if (!armed_) return Status::Ok();
      stall = ++replays_ == 1;
    }
    changed_.notify_all();
    if (!stall) return Status::Ok();
    return backend_
        .enqueue_work([this] {
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [this] { return open_; });
          return Status::Ok();
        })
        .status();
  }

 private:
  // Marks the engine thread as blocked on the device for the scope's length (once armed).
  struct Waiting {
    explicit Waiting(StallingKernels& k) : k_(k) {
      {
        std::lock_guard lock(k_.mutex_);
        if (k_.armed_) k_.waiting_ = true;
      }
      k_.changed_.notify_all();
    }
    ~Waiting() {
      std::lock_guard lock(k_.mutex_);
      k_.waiting_ = false;
    }
    StallingKernels& k_;
  };

  Kernels& inner_;
  SimBackend& backend_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;
  bool open_ = false;
  bool waiting_ = false;
  uint64_t replays_ = 0;
};

TEST(EnginePrefillCancelTest, ACancelDuringAPrefillEndsItWithinAStep) {
  SimBackendOptions options;
  options.capacity_bytes = 256ull << 20;
  options.granularity = 64u << 10;
  Result<std::unique_ptr<SimBackend>> backend = SimBackend::create(options);
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  Result<std::unique_ptr<HostKernels>> host_kernels = HostKernels::create(**backend);
  ASSERT_TRUE(host_kernels.ok()) << host_kernels.status().to_string();
  StallingKernels kernels(**host_kernels, **backend);
  HostVmm host;
  PosixFileSystem fs;
  ManualClock clock;
  // No checkpoint within the prompt: its downloads would make the engine wait for the device
  // on their own (synthetic:large's interval is 1024 tokens, longer than most prompts).
  Result<ModelConfig> config = model_config_from_spec("synthetic:tiny", std::nullopt, std::nullopt);
  ASSERT_TRUE(config.ok());
  config->checkpoint_interval = config->context;
  EngineOptions engine_options;
  engine_options.model = *config;
  Result<std::unique_ptr<Engine>> engine =
      Engine::start(engine_options, **backend, kernels, host, fs, clock);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  constexpr uint64_t kPromptTokens = 200;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  GenerateRequest request;
  request.prompt = std::string(kPromptTokens, 'p');
  request.max_tokens = 8;
  request.cancel = cancel;
  kernels.arm();
  auto generated = (*engine)->generate(std::move(request));
  // The device is stalled behind the first prompt token. Either the engine waits for it (and
  // so will read the flag after one step), or it queues the whole prompt first.
  const uint64_t queued = kernels.wait_blocked_or(kPromptTokens);
  cancel->store(true);
  kernels.open();
  Result<GenerateResult> result = generated.get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->finish, FinishReason::kCancelled);
  EXPECT_EQ(result->completion_tokens, 0u);
  EXPECT_LE(queued, 2u) << "the prefill queued " << queued << " steps without waiting for any";
  EXPECT_LE(kernels.replays(), 2u) << "steps queued after the cancel had been raised";
  engine->reset();  // before the backend and the kernels it uses
}

}  // namespace
}  // namespace siesta::engine
