// RAII owners of the CUDA runtime handles CudaKernels holds (stream, event, pinned host
// buffer, graph, executable graph), and the one place runtime errors become Status.
// Internal to backends/cuda_vmm: includes the CUDA runtime header.
//
// Every owner is move-only and frees its handle exactly once; destructors ignore errors
// (there is no one to tell, and a poisoned context fails every call the same way).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>
#include <utility>

#include "core/base/status.h"

namespace siesta::cuda_rt {

// OK for cudaSuccess; otherwise "<call> failed: <error name>: <error string>" with
// OutOfMemory for cudaErrorMemoryAllocation, Unsupported for "no usable driver or device"
// codes, DeviceError for the rest.
inline Status status_from_cuda(cudaError_t error, std::string_view call) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message(call);
  message += " failed: ";
  message += cudaGetErrorName(error);
  message += ": ";
  message += cudaGetErrorString(error);
  switch (error) {
    case cudaErrorMemoryAllocation: return OutOfMemory(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorCallRequiresNewerDriver: return Unsupported(std::move(message));
    default: return DeviceError(std::move(message));
  }
}

// A move-only owner of one handle `T` freed by `Free`.
template <class T, cudaError_t (*Free)(T)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T handle) : handle_(handle) {}
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, T{})) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, T{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void reset() {
    if (handle_ != T{}) (void)Free(handle_);
    handle_ = T{};
  }

 private:
  T handle_{};
};

using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
using Event = Owned<cudaEvent_t, cudaEventDestroy>;
using PinnedHost = Owned<void*, cudaFreeHost>;
using Graph = Owned<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = Owned<cudaGraphExec_t, cudaGraphExecDestroy>;

}  // namespace siesta::cuda_rt
