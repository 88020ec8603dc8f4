// The MemoryBackend conformance suite (tests/support/backend_conformance.h) on the real CUDA
// VMM backend. Skips, printing why, where CUDA is unavailable.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "tests/gpu/device_probe.h"
#include "tests/support/backend_conformance.h"

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

    // -1: disarmed; otherwise the chunk whose set-access step fails next.
    auto armed_chunk = std::make_shared<std::atomic<long long>>(-1);
    CudaVmmOptions options;
    options.max_chunk_bytes = 4 * kMiB;
    options.staging_buffer_bytes = 3 * kMiB / 2;
    options.staging_buffer_count = 3;
    options.commit_fault_hook = [armed_chunk](CommitStep step, size_t chunk) -> Status {
      long long expected = static_cast<long long>(chunk);
      if (step == CommitStep::kSetAccess && armed_chunk->compare_exchange_strong(expected, -1)) {
        return DeviceError("injected set-access failure at chunk " + std::to_string(chunk));
      }
      return Status::Ok();
    };
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
    out.fail_next_commit_at_set_access = [armed_chunk](size_t chunk) {
      armed_chunk->store(static_cast<long long>(chunk));
    };
    out.stray_access_faults_in_process = false;  // device memory is not host-addressable
    out.max_chunk_bytes =
        std::max(granularity, options.max_chunk_bytes / granularity * granularity);
    return out;
  }
};

using CudaTypes = ::testing::Types<CudaTraits>;
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, BackendConformance, CudaTypes);

}  // namespace
}  // namespace siesta::conformance
