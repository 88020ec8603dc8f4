// Opens the MemoryBackend that --backend asks for.
#pragma once

#include <memory>
#include <string>

#include "core/memory_backend.h"
#include "core/status.h"
#include "server/backend_kind.h"

namespace siesta::server {

// Opens the backend of `kind`.
//   kSim   the host simulator with its default options.
//   kCuda  CudaVmmBackend::create(). Failure: Unsupported with the reason in the message
//          when unavailable_reason() gives one ("built without CUDA" in a build without it),
//          else create()'s own status.
//   kAuto  CUDA when CudaVmmBackend::unavailable_reason() is empty, else the simulator.
//          A present but failing device is an error, not a silent fallback: a GPU server
//          that quietly runs on the simulator would look healthy and be useless.
// `note`, when not null, receives one line for the log when the choice needs explaining
// ("no CUDA driver: libcuda.so.1 not found; using the simulator"), else is cleared.
// Thread rule: any thread.
Result<std::unique_ptr<MemoryBackend>> open_backend(BackendKind kind, std::string* note);

}  // namespace siesta::server
