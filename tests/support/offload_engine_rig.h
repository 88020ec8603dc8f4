// OffloadEngineRig: the reference engine on its own simulated device, with idle offload on (or
// off, as the twin to compare against), driven by a ManualClock and a ManualExecutor so that a
// test says when time passes and when the save runs. Shared by the engine's offload unit tests
// and its property test.
//
// Construction aborts the test binary (Result::value()) if the device, the store or the engine
// cannot start: every test using it needs all three.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {

struct OffloadEngineRigOptions {
  engine::ModelConfig model = engine::model_config_from_spec("synthetic:tiny").value();
  bool offload = true;
  uint64_t capacity_bytes = 256ull << 20;
  // Small buffers, so that even the tiny model's snapshot takes several chunks.
  size_t staging_buffer_bytes = 96u << 10;
};

struct OffloadEngineRig {
  static constexpr int64_t kIdleSeconds = 60;
  static constexpr int64_t kExpireSeconds = 600;

  explicit OffloadEngineRig(OffloadEngineRigOptions options = {}) {
    SimBackendOptions sim;
    sim.capacity_bytes = options.capacity_bytes;
    sim.granularity = 64u << 10;
    sim.staging_buffer_bytes = options.staging_buffer_bytes;
    sim.staging_buffer_count = 2;
    backend = SimBackend::create(sim).value();
    kernels = HostKernels::create(*backend).value();
    engine::EngineOptions engine_options;
    engine_options.model = std::move(options.model);
    engine_options.export_dir = dir.path() + "/exports";
    if (options.offload) {
      key = std::make_unique<ProcessKey>(ProcessKey::generate().value());
      SnapshotStore::Options store_options;
      store_options.nonce = SnapshotStore::nonce_hex(key->nonce());
      store = SnapshotStore::open(fs, clock, dir.path(), store_options).value();
      engine::EngineOffload offload;
      offload.options.idle_seconds = kIdleSeconds;
      offload.options.expire_seconds = kExpireSeconds;
      offload.options.log = [](const std::string&) {};
      offload.store = store.get();
      offload.key = key.get();
      offload.executor = &executor;
      engine_options.offload = offload;
    }
    engine = engine::Engine::start(engine_options, *backend, *kernels, host, fs, clock).value();
    resident_committed = backend->stats().committed_bytes;
  }

  Result<engine::GenerateResult> generate(const std::string& prompt, uint32_t max_tokens = 12) {
    engine::GenerateRequest request;
    request.prompt = prompt;
    request.max_tokens = max_tokens;
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
  PosixFileSystem fs;
  HostVmm host;
  std::unique_ptr<SimBackend> backend;
  std::unique_ptr<HostKernels> kernels;
  std::unique_ptr<ProcessKey> key;         // with offload only
  std::unique_ptr<SnapshotStore> store;    // with offload only
  std::unique_ptr<engine::Engine> engine;  // last: destroyed first
  uint64_t resident_committed = 0;         // weights + session, as the backend reports once started
};

}  // namespace siesta::testing
