// The CUDA driver API as a table of function pointers, loaded from libcuda.so.1 at run time.
//
// siesta never links libcuda: binaries that contain the CUDA backend must start, run their
// non-GPU tests and say why CUDA is unavailable on machines without a driver (CI, the CPU
// machines). This file is also the one place where a CUresult becomes a siesta Status.
//
// Versioned names: <cuda.h> #defines many API names to versioned ABI symbols (cuMemGetInfo ->
// cuMemGetInfo_v2, cuMemcpyDtoHAsync -> cuMemcpyDtoHAsync_v2, cuStreamDestroy ->
// cuStreamDestroy_v2...). The table's members are declared and looked up *through* those
// macros: a member written `cuMemGetInfo` is really named `cuMemGetInfo_v2`, has the type of
// the declaration <cuda.h> pairs with that name, and is looked up with dlsym under the
// macro-expanded string "cuMemGetInfo_v2". Call sites write `api.cuMemGetInfo(...)`, which
// expands the same way, so name, type and ABI symbol always agree with the headers we compile
// against.
//
// Thread rule: the table is immutable once loaded; any thread may call through it.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace siesta::cuda {

// Every driver entry point siesta uses (the last two only in the GPU tests' probes).
#define SIESTA_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuGetErrorName)                     \
  X(cuGetErrorString)                   \
  X(cuInit)                             \
  X(cuDeviceGetCount)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetAttribute)               \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease)          \
  X(cuCtxPushCurrent)                   \
  X(cuCtxPopCurrent)                    \
  X(cuCtxSynchronize)                   \
  X(cuMemGetInfo)                       \
  X(cuMemGetAllocationGranularity)      \
  X(cuMemAddressReserve)                \
  X(cuMemAddressFree)                   \
  X(cuMemCreate)                        \
  X(cuMemRelease)                       \
  X(cuMemMap)                           \
  X(cuMemUnmap)                         \
  X(cuMemSetAccess)                     \
  X(cuStreamCreate)                     \
  X(cuStreamDestroy)                    \
  X(cuEventCreate)                      \
  X(cuEventDestroy)                     \
  X(cuEventRecord)                      \
  X(cuEventSynchronize)                 \
  X(cuMemHostAlloc)                     \
  X(cuMemFreeHost)                      \
  X(cuMemHostRegister)                  \
  X(cuMemHostUnregister)                \
  X(cuMemcpyDtoHAsync)                  \
  X(cuMemcpyHtoDAsync)                  \
  X(cuMemsetD8Async)                    \
  X(cuPointerGetAttribute)              \
  X(cuMemGetAddressRange)

// Stringizes after macro expansion: SIESTA_CUDA_SYMBOL(cuMemGetInfo) is "cuMemGetInfo_v2".
#define SIESTA_CUDA_SYMBOL_STR_(name) #name
#define SIESTA_CUDA_SYMBOL(name) SIESTA_CUDA_SYMBOL_STR_(name)

struct DriverApi {
// `name` cannot be parenthesised here: it is a declarator.
#define SIESTA_CUDA_DECLARE_MEMBER_(name) decltype(&::name) name = nullptr;  // NOLINT
  SIESTA_CUDA_DRIVER_FUNCTIONS(SIESTA_CUDA_DECLARE_MEMBER_)
#undef SIESTA_CUDA_DECLARE_MEMBER_
};

// An opened driver library and its resolved table; dlclose()s the library when destroyed.
class DriverLibrary {
 public:
  // dlopen()s `path` (a soname such as "libcuda.so.1" or a file path) and resolves every
  // entry point of SIESTA_CUDA_DRIVER_FUNCTIONS by its ABI (versioned) name. Does not call
  // cuInit. Failure: NotFound when the library cannot be opened or lacks an entry point
  // (the message names the library, or the first missing symbol).
  static Result<std::unique_ptr<DriverLibrary>> open(const std::string& path);

  DriverLibrary(const DriverLibrary&) = delete;
  DriverLibrary& operator=(const DriverLibrary&) = delete;
  ~DriverLibrary();

  const DriverApi& api() const { return api_; }
  const std::string& path() const { return path_; }

 private:
  DriverLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
  DriverApi api_;
};

// The process-wide driver: libcuda.so.1, loaded and cuInit(0)-ed on first use, then kept for
// the life of the process (never unloaded: once cuInit has run, the driver's threads and
// exit handlers live in the library, and a backend destroyed during static destruction
// would otherwise call into unmapped code).
// Failure (the same answer on every call): NotFound when libcuda.so.1 is missing or cuInit
// reports no usable driver or device; the status of cuInit otherwise.
Result<const DriverApi*> driver();

// Maps a CUresult into a Status: CUDA_SUCCESS -> OK; out of memory -> OutOfMemory; no
// device, no or mismatched driver, stub library -> NotFound; not supported -> Unsupported;
// anything else -> DeviceError. The message is
// "<call> failed: <cuGetErrorName>: <cuGetErrorString>", where `call` names the call and
// its arguments, e.g. "cuMemCreate(1073741824 bytes, device 0)".
Status status_from_cu(const DriverApi& api, CUresult result, std::string_view call);

// The code alone, for callers that branch before building a message.
StatusCode status_code_from_cu(CUresult result);

}  // namespace siesta::cuda
