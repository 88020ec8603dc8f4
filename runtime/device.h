// Opening a device: the MemoryBackend of the kind asked for and the Kernels that compute on it,
// for the server, the test rigs and the benchmarks alike.
//
// Thread rule: open_device() and cuda_unavailable_reason() from any thread; what they open is
// the caller's to share by the backends' and kernels' own rules.
#pragma once

#include <memory>
#include <string>

#include "backends/sim/sim_backend.h"
#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "runtime/backend_kind.h"

namespace siesta::runtime {

struct DeviceOptions {
  BackendKind kind = BackendKind::kSim;
  // The simulator's options, used whenever the simulator is opened (kSim, or kAuto without a
  // usable GPU): capacity, granularity, staging ring, hazards. The defaults are the server's.
  SimBackendOptions sim;
};

// A backend and the kernels bound to it. Member order is the destruction contract: the
// kernels (which queue work on the backend's stream or context) go first.
struct OpenedDevice {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<Kernels> kernels;
  // The backend as the simulator, when that is what was opened (tests reach its extras, such
  // as set_external_usage, through it); null on CUDA.
  SimBackend* simulator = nullptr;
};

// Why CUDA cannot be used by this binary on this machine ("built without CUDA" in a build
// without it; no driver, no device, no virtual memory management), or "" when it can.
std::string cuda_unavailable_reason();

// Opens the device `options.kind` names.
//   kSim   SimBackend::create(options.sim) and HostKernels over it.
//   kCuda  CudaVmmBackend::create() and CudaKernels::create(0) (device 0). Failure:
//          Unsupported "CUDA is unavailable: <cuda_unavailable_reason()>" when it is;
//          otherwise create()'s own status, with context.
//   kAuto  CUDA when cuda_unavailable_reason() is empty, else the simulator. A present but
//          failing device is an error, not a silent fallback: a GPU server that quietly runs
//          on the simulator would look healthy and be useless.
// `note`, when not null, receives one line for the log when the choice needs explaining
// ("no CUDA driver: libcuda.so.1 not found; using the simulator"), else is cleared; it is set
// also when opening then fails.
// Failure: the simulator's or the kernels' error, with context; nothing stays open.
Result<OpenedDevice> open_device(const DeviceOptions& options, std::string* note);

}  // namespace siesta::runtime
