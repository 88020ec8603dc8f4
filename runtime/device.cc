#include "runtime/device.h"

#include <utility>

#include "backends/sim/host_kernels.h"
#if defined(SIESTA_WITH_CUDA)
#include "backends/cuda_vmm/cuda_kernels.h"
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#endif

namespace siesta::runtime {
namespace {

Result<OpenedDevice> open_sim(const SimBackendOptions& options) {
  Result<std::unique_ptr<SimBackend>> sim = SimBackend::create(options);
  if (!sim.ok()) return sim.status().with_context("opening the simulator backend");
  Result<std::unique_ptr<HostKernels>> kernels = HostKernels::create(**sim);
  if (!kernels.ok()) return kernels.status().with_context("opening the host kernels");
  OpenedDevice device;
  device.simulator = sim->get();
  device.backend = std::move(sim).value();
  device.kernels = std::move(kernels).value();
  return device;
}

Result<OpenedDevice> open_cuda() {
#if defined(SIESTA_WITH_CUDA)
  Result<std::unique_ptr<CudaVmmBackend>> cuda = CudaVmmBackend::create();
  if (!cuda.ok()) return cuda.status().with_context("opening the CUDA backend");
  // After the backend: it retains the primary context the kernels' stream is made on.
  Result<std::unique_ptr<Kernels>> kernels = CudaKernels::create(0);
  if (!kernels.ok()) return kernels.status().with_context("opening the CUDA kernels");
  OpenedDevice device;
  device.backend = std::move(cuda).value();
  device.kernels = std::move(kernels).value();
  return device;
#else
  return Unsupported("opening the CUDA backend: built without CUDA");
#endif
}

}  // namespace

std::string cuda_unavailable_reason() {
#if defined(SIESTA_WITH_CUDA)
  return CudaVmmBackend::unavailable_reason();
#else
  return "built without CUDA";
#endif
}

Result<OpenedDevice> open_device(const DeviceOptions& options, std::string* note) {
  std::string ignored;
  std::string& out = note != nullptr ? *note : ignored;
  out.clear();
  switch (options.kind) {
    case BackendKind::kSim: return open_sim(options.sim);
    case BackendKind::kCuda: {
      // Ask first so that the error names the cause in one line (no driver, no device, no
      // VMM support), instead of whichever driver call happened to fail first in create().
      const std::string reason = cuda_unavailable_reason();
      if (!reason.empty()) return Unsupported("CUDA is unavailable: " + reason);
      return open_cuda();
    }
    case BackendKind::kAuto: {
      const std::string reason = cuda_unavailable_reason();
      if (!reason.empty()) {
        out = reason + "; using the simulator";
        return open_sim(options.sim);
      }
      return open_cuda();
    }
  }
  return InvalidArgument("unknown backend kind");
}

}  // namespace siesta::runtime
