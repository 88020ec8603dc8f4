// OffloadEngineRig: the reference engine on its own simulated device (an EngineStack), with idle
// offload on (or off, as the twin to compare against), driven by a ManualClock and a
// ManualExecutor lent to the stack, so that a test says when time passes and when the save
// runs. Shared by the engine's offload unit tests and its property test.
//
// Construction aborts the test binary (Result::value()) if the stack cannot open: every test
// using it needs all of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/memory/host_vmm.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "runtime/engine_stack.h"
#include "tests/support/engine_test_device.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {

struct OffloadEngineRigOptions {
  engine::ModelConfig model = engine::model_config_from_spec("synthetic:tiny").value();
  bool offload = true;
  uint64_t capacity_bytes = 256ull << 20;
  // Small buffers, so that even the tiny model's snapshot takes several chunks.
  size_t staging_buffer_bytes = 96u << 10;
  // Conversations kept and sessions committed at once (one of each: a single-session engine).
  engine::EngineSessions sessions;
  // Lent to the stack for the snapshot store and the exports (a FaultyFileSystem, say); must
  // outlive the rig. Null: the stack's own POSIX file system.
  FileSystem* fs = nullptr;
  // The RAM tier's budget (OffloadConfig::ram_bytes); 0: no tier, every snapshot on disk.
  uint64_t ram_tier_bytes = 0;
  // The snapshot directory's budget (OffloadConfig::disk_max_bytes); 0: none.
  uint64_t disk_budget_bytes = 0;
};

// Options for `parallel` sessions over `max_sessions` conversations, offload on or off.
inline OffloadEngineRigOptions rig_with_sessions(uint32_t parallel, uint32_t max_sessions,
                                                 bool offload = true) {
  OffloadEngineRigOptions options;
  options.offload = offload;
  options.sessions.parallel = parallel;
  options.sessions.max_sessions = max_sessions;
  return options;
}

struct OffloadEngineRig {
  static constexpr int64_t kIdleSeconds = 60;
  static constexpr int64_t kExpireSeconds = 600;

  explicit OffloadEngineRig(OffloadEngineRigOptions options = {})
      : stack(open_stack(std::move(options), dir, clock, executor)),
        engine(&stack->engine()),
        backend(stack->simulator()),
        host(stack->host()),
        store(stack->store()),
        resident_committed(backend->stats().committed_bytes) {}

  Result<engine::GenerateResult> generate(const std::string& prompt, uint32_t max_tokens = 12,
                                          engine::SessionRoute route = {}) {
    engine::GenerateRequest request;
    request.prompt = prompt;
    request.max_tokens = max_tokens;
    request.route = route;
    return engine->generate(std::move(request)).get();
  }
  // Idle long enough for a save, and run it (on this thread, while the engine is idle).
  void sleep_session() {
    clock.advance(std::chrono::seconds(kIdleSeconds));
    executor.run_due();
  }
  OffloadState state() const { return engine->cache_status().state; }
  std::string snapshot_path() const { return store->snapshot_path("0").value(); }

  TempDir dir;
  ManualClock clock;
  ManualExecutor executor{clock};
  std::unique_ptr<runtime::EngineStack> stack;
  engine::Engine* engine;       // the stack's
  SimBackend* backend;          // the stack's device
  HostVmm& host;                // the stack's
  SnapshotStore* store;         // with offload only
  uint64_t resident_committed;  // weights + session, as the backend reports once started

 private:
  static std::unique_ptr<runtime::EngineStack> open_stack(OffloadEngineRigOptions options,
                                                          const TempDir& dir,
                                                          const ManualClock& clock,
                                                          ManualExecutor& executor) {
    runtime::EngineStackOptions stack_options;
    stack_options.device = engine_test_device(options.capacity_bytes, options.staging_buffer_bytes);
    stack_options.model = std::move(options.model);
    stack_options.export_dir = dir.path() + "/exports";
    if (options.offload) {
      stack_options.offload.config.idle_seconds = kIdleSeconds;
      stack_options.offload.config.expire_seconds = kExpireSeconds;
      stack_options.offload.config.disk_dir = dir.path();
      stack_options.offload.config.ram_bytes = options.ram_tier_bytes;
      stack_options.offload.config.disk_max_bytes = options.disk_budget_bytes;
    }
    stack_options.sessions = options.sessions;
    stack_options.fs = options.fs;
    stack_options.log = [](const std::string&) {};
    stack_options.executor = &executor;
    return runtime::EngineStack::open(std::move(stack_options), clock).value();
  }
};

}  // namespace siesta::testing
