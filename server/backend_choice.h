// Opens the device --backend asks for: its MemoryBackend and the Kernels that compute on it.
#pragma once

#include <memory>
#include <string>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "server/backend_kind.h"

namespace siesta::server {

// A backend and the kernels bound to it. Member order is the destruction contract: the
// kernels (which queue work on the backend's stream or context) go first.
struct OpenedDevice {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<Kernels> kernels;
};

// Opens the device of `kind`.
//   kSim   the host simulator with its default options, and HostKernels over it.
//   kCuda  CudaVmmBackend::create() and CudaKernels::create(0). Failure: Unsupported with the
//          reason in the message when unavailable_reason() gives one ("built without CUDA" in
//          a build without it; a device without virtual memory management), else create()'s
//          own status, with context.
//   kAuto  CUDA when CudaVmmBackend::unavailable_reason() is empty, else the simulator.
//          A present but failing device is an error, not a silent fallback: a GPU server
//          that quietly runs on the simulator would look healthy and be useless.
// `note`, when not null, receives one line for the log when the choice needs explaining
// ("no CUDA driver: libcuda.so.1 not found; using the simulator"), else is cleared.
// On failure nothing stays open. Thread rule: any thread.
Result<OpenedDevice> open_device(BackendKind kind, std::string* note);

}  // namespace siesta::server
