// EngineRig: one Engine on its own simulated device (SimBackend + HostKernels), host memory
// (HostVmm) and the real file system, for the engine's tests. Members are declared so that the
// engine is destroyed first and the backend last, as the engine's contract requires.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::engine::testing {

inline ModelConfig tiny_config(std::optional<KvType> kv = std::nullopt,
                               std::string_view spec = "synthetic:tiny") {
  Result<ModelConfig> config = model_config_from_spec(spec, std::nullopt, kv);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  return config.value_or(ModelConfig{});
}

class EngineRig {
 public:
  // `export_dir` empty: the engine refuses export and import.
  // `wrap`: when set, the engine computes through the Kernels it returns (fault injection),
  // which wraps the rig's HostKernels.
  using KernelsWrapper = std::function<std::unique_ptr<Kernels>(Kernels&)>;
  explicit EngineRig(ModelConfig config = tiny_config(), std::string export_dir = "",
                     KernelsWrapper wrap = nullptr) {
    SimBackendOptions options;
    options.capacity_bytes = 256ull << 20;
    options.granularity = 64u << 10;
    options.max_chunk_bytes = 1u << 20;
    options.staging_buffer_bytes = 96u << 10;  // several chunks per region: odd boundaries
    options.staging_buffer_count = 2;
    auto backend = SimBackend::create(options);
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    if (!backend.ok()) return;
    backend_ = std::move(backend).value();
    auto kernels = HostKernels::create(*backend_);
    EXPECT_TRUE(kernels.ok()) << kernels.status().to_string();
    if (!kernels.ok()) return;
    kernels_ = std::move(kernels).value();
    Kernels* kernels_used = kernels_.get();
    if (wrap) {
      wrapper_ = wrap(*kernels_);
      kernels_used = wrapper_.get();
    }
    EngineOptions engine_options;
    engine_options.model = std::move(config);
    engine_options.export_dir = std::move(export_dir);
    auto engine = Engine::start(engine_options, *backend_, *kernels_used, host_, fs_, clock_);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    if (engine.ok()) engine_ = std::move(engine).value();
  }

  bool ok() const { return engine_ != nullptr; }
  Engine& engine() { return *engine_; }
  // Destroys the engine now (the destructor tests).
  void stop() { engine_.reset(); }

  // Runs one greedy request and waits for it.
  Result<GenerateResult> generate(std::string prompt, uint32_t max_tokens = 16,
                                  std::vector<std::string> stop = {}) {
    GenerateRequest request;
    request.prompt = std::move(prompt);
    request.max_tokens = max_tokens;
    request.stop = std::move(stop);
    return engine_->generate(std::move(request)).get();
  }
  Result<GenerateResult> generate(GenerateRequest request) {
    return engine_->generate(std::move(request)).get();
  }
  uint64_t history() const { return engine_->status().history_tokens; }

 private:
  std::unique_ptr<SimBackend> backend_;
  std::unique_ptr<HostKernels> kernels_;
  std::unique_ptr<Kernels> wrapper_;
  HostVmm host_;
  PosixFileSystem fs_;
  ManualClock clock_;
  std::unique_ptr<Engine> engine_;
};

// The text of a successful result; fails the test (and returns "") otherwise.
inline std::string text_of(const Result<GenerateResult>& r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->text : std::string();
}

}  // namespace siesta::engine::testing
