// EngineRig: one Engine with offload off on its own EngineStack (a small simulator with
// HostKernels, host memory, the real file system) and a ManualClock, for the engine's tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "runtime/engine_stack.h"
#include "tests/support/engine_test_device.h"

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
  // which wraps the stack's HostKernels.
  using WrapKernels = std::function<std::unique_ptr<Kernels>(Kernels&)>;
  explicit EngineRig(ModelConfig config = tiny_config(), std::string export_dir = "",
                     WrapKernels wrap = nullptr) {
    runtime::EngineStackOptions options;
    options.device = siesta::testing::engine_test_device();
    options.device.sim.max_chunk_bytes = 1u << 20;
    options.model = std::move(config);
    options.export_dir = std::move(export_dir);
    options.wrap_kernels = std::move(wrap);
    auto stack = runtime::EngineStack::open(std::move(options), clock_);
    EXPECT_TRUE(stack.ok()) << stack.status().to_string();
    if (stack.ok()) stack_ = std::move(stack).value();
  }

  bool ok() const { return stack_ != nullptr; }
  Engine& engine() { return stack_->engine(); }
  // Destroys the engine now, and the stack under it (the destructor tests).
  void stop() { stack_.reset(); }

  // Runs one greedy request and waits for it.
  Result<GenerateResult> generate(std::string prompt, uint32_t max_tokens = 16,
                                  std::vector<std::string> stop = {}) {
    GenerateRequest request;
    request.prompt = std::move(prompt);
    request.max_tokens = max_tokens;
    request.stop = std::move(stop);
    return engine().generate(std::move(request)).get();
  }
  Result<GenerateResult> generate(GenerateRequest request) {
    return engine().generate(std::move(request)).get();
  }
  uint64_t history() const { return stack_->engine().status().history_tokens; }

 private:
  ManualClock clock_;
  std::unique_ptr<runtime::EngineStack> stack_;
};

// The text of a successful result; fails the test (and returns "") otherwise.
inline std::string text_of(const Result<GenerateResult>& r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->text : std::string();
}

}  // namespace siesta::engine::testing
