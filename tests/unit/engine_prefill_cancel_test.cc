// A cancelled prefill stops soon, whatever the device still has queued: Session::feed_block()
// only enqueues a block's operations, so the engine must wait for the device as it feeds a
// prompt, or a cancel flag raised meanwhile is read only after every block of the prompt has
// run. The device is held back here (a job that waits for the test, queued behind the prompt's
// first block) so that "queued but not run" is certain instead of a matter of speed.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "compute/kernels_wrapper.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::engine {
namespace {

// Forwards everything to `inner`. Once armed: the first step (a prefill block or a replay) is
// followed on the device stream by a job that waits until open() (the device stalls there),
// every step is counted, and the engine thread is marked while it is blocked on the device
// (download or synchronize).
class StallingKernels final : public KernelsWrapper {
 public:
  StallingKernels(Kernels& inner, SimBackend& backend) : KernelsWrapper(inner), backend_(backend) {}

  void arm() {
    std::lock_guard lock(mutex_);
    armed_ = true;
    steps_ = 0;
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }
  // Waits until the engine is blocked on the device or has queued `replays` steps.
  uint64_t wait_blocked_or(uint64_t steps) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ || steps_ >= steps; });
    return steps_;
  }
  uint64_t steps() {
    std::lock_guard lock(mutex_);
    return steps_;
  }

  // A step is a prefill block (counted at its first operation) or a generated token's replay.
  Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens, uint32_t count,
                     DeviceAddress out) override {
    SIESTA_RETURN_IF_ERROR(KernelsWrapper::embed_block(table, dim, tokens, count, out));
    return after_step();
  }
  Status download(DeviceAddress s, std::span<std::byte> d) override {
    Waiting waiting(*this);
    return KernelsWrapper::download(s, d);
  }
  Status synchronize() override {
    Waiting waiting(*this);
    return KernelsWrapper::synchronize();
  }
  Status replay(const KernelGraph& graph) override {
    SIESTA_RETURN_IF_ERROR(KernelsWrapper::replay(graph));
    return after_step();
  }

 private:
  // Once armed, counts the step just enqueued; after the first, queues a job that holds the
  // device until open().
  Status after_step() {
    bool stall = false;
    {
      std::lock_guard lock(mutex_);
      if (!armed_) return Status::Ok();
      stall = ++steps_ == 1;
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

  SimBackend& backend_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;
  bool open_ = false;
  bool waiting_ = false;
  uint64_t steps_ = 0;
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
  config->prefill_block = 4;  // a 200-token prompt is 50 steps
  EngineOptions engine_options;
  engine_options.model = *config;
  Result<std::unique_ptr<Engine>> engine =
      Engine::start(engine_options, **backend, kernels, host, fs, clock);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  constexpr uint64_t kPromptTokens = 200;
  constexpr uint64_t kPromptSteps = kPromptTokens / 4;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  GenerateRequest request;
  request.prompt = std::string(kPromptTokens, 'p');
  request.max_tokens = 8;
  request.cancel = cancel;
  kernels.arm();
  auto generated = (*engine)->generate(std::move(request));
  // The device is stalled behind the first prompt block. Either the engine waits for it (and
  // so will read the flag after one step), or it queues the whole prompt first.
  const uint64_t queued = kernels.wait_blocked_or(kPromptSteps);
  cancel->store(true);
  kernels.open();
  Result<GenerateResult> result = generated.get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->finish, FinishReason::kCancelled);
  EXPECT_EQ(result->completion_tokens, 0u);
  EXPECT_LE(queued, 2u) << "the prefill queued " << queued << " steps without waiting for any";
  EXPECT_LE(kernels.steps(), 2u) << "steps queued after the cancel had been raised";
  engine->reset();  // before the backend and the kernels it uses
}

}  // namespace
}  // namespace siesta::engine
