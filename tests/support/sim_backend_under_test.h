// The simulator as the conformance suite (tests/support/backend_conformance.h) sees it: a
// small SimBackend whose sizes make multi-chunk commits and odd staging boundaries cheap,
// with its commit fault hook armable from the test, optionally behind a FaultyBackend.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_address_space.h"
#include "testing/faulty_backend.h"
#include "tests/support/backend_conformance.h"

namespace siesta::conformance {

// Sizes: 64 KiB granules, 256 KiB chunks (so a 4 MiB commit is 16 chunks), and a staging
// buffer of 48 KiB, which divides neither, so copies cross chunk and granule boundaries.
inline SimBackendOptions small_sim_options() {
  SimBackendOptions options;
  options.capacity_bytes = 64ull << 20;
  options.granularity = 64u << 10;
  options.max_chunk_bytes = 256u << 10;
  options.staging_buffer_bytes = 48u << 10;
  options.staging_buffer_count = 3;
  return options;
}

// `plan`: when set, the sim is wrapped (and owned) by a FaultyBackend with that plan.
inline BackendUnderTest make_sim_under_test(const FaultPlan* plan = nullptr) {
  BackendUnderTest out;
  // -1: disarmed; otherwise the chunk whose set-access step fails next.
  auto armed_chunk = std::make_shared<std::atomic<long long>>(-1);
  SimBackendOptions options = small_sim_options();
  options.commit_fault_hook = [armed_chunk](CommitStep step, size_t chunk) -> Status {
    long long expected = static_cast<long long>(chunk);
    if (step == CommitStep::kSetAccess && armed_chunk->compare_exchange_strong(expected, -1)) {
      return DeviceError("injected set-access failure at chunk " + std::to_string(chunk));
    }
    return Status::Ok();
  };
  Result<std::unique_ptr<SimBackend>> sim = SimBackend::create(std::move(options));
  if (!sim.ok()) {
    out.skip_reason = "SimBackend::create failed: " + sim.status().to_string();
    return out;  // null backend: the suite skips and prints why
  }
  if (plan != nullptr) {
    out.owner = std::make_unique<FaultyBackend>(std::move(sim).value(), *plan);
  } else {
    out.owner = std::move(sim).value();
  }
  out.backend = out.owner.get();
  out.measured_used_bytes = [] { return uint64_t{host_address_space::resident_bytes().value()}; };
  // CI saw RSS fall 68 KiB short of a 4 MiB release under ASan: other threads' pages.
  out.measurement_slack_bytes = 512u << 10;
  out.fail_next_commit_at_set_access = [armed_chunk](size_t chunk) {
    armed_chunk->store(static_cast<long long>(chunk));
  };
  out.stray_access_faults_in_process = true;
  out.max_chunk_bytes = small_sim_options().max_chunk_bytes;
  return out;
}

}  // namespace siesta::conformance
