// The MemoryBackend conformance suites (tests/support/backend_conformance.h and
// backend_copy_conformance.h) on the real CUDA VMM backend, with the driver's own view of
// memory (cuMemGetInfo, cuPointerGetAttribute) and device work on a stream of the test's own.
// Skips, printing why, where CUDA is unavailable.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "tests/gpu/device_probe.h"
#include "tests/support/backend_conformance.h"
#include "tests/support/backend_copy_conformance.h"
#include "tests/support/backend_host_copy_conformance.h"
#include "tests/support/commit_fault_switch.h"

namespace siesta::conformance {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Small chunks (two 2 MiB granules) so multi-chunk commits stay cheap, and staging buffers of
// 1.5 MiB, which divide neither, so copies cross chunk and granule boundaries.
struct CudaTraits {
  static BackendUnderTest make() {
    BackendUnderTest out;
    out.skip_reason = CudaVmmBackend::unavailable_reason();
    if (!out.skip_reason.empty()) return out;

    auto faults = std::make_shared<test_util::CommitFaultSwitch>();
    CudaVmmOptions options;
    options.max_chunk_bytes = 4 * kMiB;
    options.staging_buffer_bytes = 3 * kMiB / 2;
    options.staging_buffer_count = 3;
    options.commit_fault_hook = test_util::CommitFaultSwitch::hook(faults);
    Result<std::unique_ptr<CudaVmmBackend>> backend = CudaVmmBackend::create(options);
    if (!backend.ok()) {
      out.skip_reason = "CudaVmmBackend::create failed: " + backend.status().to_string();
      ADD_FAILURE() << out.skip_reason;  // the driver said it would work
      return out;
    }
    const size_t granularity = (*backend)->granularity();
    out.owner = std::move(backend).value();
    out.backend = out.owner.get();
    auto probe = std::make_shared<test_util::DeviceProbe>();
    out.measured_used_bytes = [probe] { return probe->used_bytes(); };
    out.fail_next_commit_at = [faults](CommitStep step, size_t chunk) { faults->arm(step, chunk); };
    out.commit_hook_calls = [faults] { return faults->calls(); };
    out.backed_by_memory = [probe](DeviceAddress address) { return probe->mapped(address); };
    out.reservation_start = [probe](DeviceAddress address) { return probe->range_start(address); };
    out.fill_on_another_stream = [probe](DeviceRange range, std::byte value) {
      return probe->fill_async(range, value);
    };
    // A GPU may run unordered work at any time, and fresh memory holds whatever was there.
    out.unordered_work_runs_late = false;
    out.stray_access_faults_in_process = false;  // device memory is not host-addressable
    out.max_chunk_bytes =
        std::max(granularity, options.max_chunk_bytes / granularity * granularity);
    return out;
  }
};

using CudaTypes = ::testing::Types<CudaTraits>;
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, BackendConformance, CudaTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(CudaCopies, BackendCopyConformance, CudaTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(CudaHostCopies, BackendHostCopyConformance, CudaTypes);

}  // namespace
}  // namespace siesta::conformance
