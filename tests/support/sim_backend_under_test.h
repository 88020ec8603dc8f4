// The simulator as the conformance suite (tests/support/backend_conformance.h) sees it: a
// small SimBackend whose sizes make multi-chunk commits and odd staging boundaries cheap,
// with its commit fault hook armable from the test, optionally behind a FaultyBackend.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_address_space.h"
#include "testing/faulty_backend.h"
#include "tests/support/backend_conformance_fixture.h"
#include "tests/support/commit_fault_switch.h"
#include "tests/support/host_mappings.h"
#include "tests/support/small_sim_options.h"

namespace siesta::conformance {

using test_util::small_sim_options;

// `plan`: when set, the sim is wrapped (and owned) by a FaultyBackend with that plan.
inline BackendUnderTest make_sim_under_test(const FaultPlan* plan = nullptr) {
  BackendUnderTest out;
  auto faults = std::make_shared<test_util::CommitFaultSwitch>();
  SimBackendOptions options = small_sim_options();
  options.commit_fault_hook = test_util::CommitFaultSwitch::hook(faults);
  Result<std::unique_ptr<SimBackend>> sim = SimBackend::create(std::move(options));
  if (!sim.ok()) {
    out.skip_reason = "SimBackend::create failed: " + sim.status().to_string();
    return out;  // null backend: the suite skips and prints why
  }
  SimBackend* raw_sim = sim->get();
  if (plan != nullptr) {
    out.owner = std::make_unique<FaultyBackend>(std::move(sim).value(), *plan);
  } else {
    out.owner = std::move(sim).value();
  }
  out.backend = out.owner.get();
  out.measured_used_bytes = [] { return uint64_t{host_address_space::resident_bytes().value()}; };
  // CI saw RSS fall 68 KiB short of a 4 MiB release under ASan: other threads' pages.
  out.measurement_slack_bytes = 512u << 10;
  out.fail_next_commit_at = [faults](CommitStep step, size_t chunk) { faults->arm(step, chunk); };
  out.commit_hook_calls = [faults] { return faults->calls(); };
  out.stray_access_faults_in_process = true;
  out.max_chunk_bytes = small_sim_options().max_chunk_bytes;
  out.backed_by_memory = [](DeviceAddress address) {
    return test_util::host_address_backed(address);
  };
  out.resident_bytes_in = [](DeviceRange range) -> uint64_t {
    const size_t page = host_address_space::page_size();
    std::vector<unsigned char> pages((range.size + page - 1) / page);
    if (::mincore(reinterpret_cast<void*>(range.base), range.size, pages.data()) != 0) {
      return UINT64_MAX;  // not mapped at all: a failure the test reports
    }
    uint64_t resident = 0;
    for (unsigned char in_memory : pages) resident += (in_memory & 1) != 0 ? page : 0;
    return resident;
  };
  // A host kernel's stream: the sim's work stream, which its copies are not ordered with.
  out.fill_on_another_stream = [raw_sim](DeviceRange range, std::byte value) -> Status {
    return raw_sim
        ->enqueue_work([range, value] {
          std::memset(reinterpret_cast<void*>(range.base), static_cast<int>(value), range.size);
          return Status::Ok();
        })
        .status();
  };
  out.unordered_work_runs_late = small_sim_options().hazards.run_work_when_waited;
  if (small_sim_options().hazards.poison_fresh_memory) out.fresh_memory_byte = kSimPoisonByte;
  return out;
}

}  // namespace siesta::conformance
