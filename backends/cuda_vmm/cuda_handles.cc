#include "backends/cuda_vmm/cuda_handles.h"

#include <string>

namespace siesta::cuda {

ScopedContext::ScopedContext(const DriverApi& api, CUcontext context) : api_(api) {
  status_ = status_from_cu(api_, api_.cuCtxPushCurrent(context), "cuCtxPushCurrent(primary)");
}

ScopedContext::~ScopedContext() {
  if (!status_.ok()) return;  // nothing was pushed
  CUcontext popped = nullptr;
  api_.cuCtxPopCurrent(&popped);
}

Result<PrimaryContext> PrimaryContext::retain(const DriverApi& api, CUdevice device) {
  PrimaryContext out;
  CUcontext context = nullptr;
  SIESTA_RETURN_IF_ERROR(
      status_from_cu(api, api.cuDevicePrimaryCtxRetain(&context, device),
                     "cuDevicePrimaryCtxRetain(device " + std::to_string(device) + ")"));
  out.api_ = &api;
  out.device_ = device;
  out.context_ = context;
  return out;
}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = std::exchange(other.api_, nullptr);
    device_ = other.device_;
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void PrimaryContext::reset() {
  if (api_ == nullptr) return;
  // Release only drops our reference; the runtime or another backend may still hold it.
  std::exchange(api_, nullptr)->cuDevicePrimaryCtxRelease(device_);
  context_ = nullptr;
}

Result<PinnedHostBuffer> PinnedHostBuffer::allocate(const DriverApi& api, size_t bytes) {
  void* memory = nullptr;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuMemHostAlloc(&memory, bytes, 0),
                                        "cuMemHostAlloc(" + std::to_string(bytes) + " bytes)"));
  return PinnedHostBuffer(DriverHandle<HostAllocTraits>(api, memory), bytes);
}

Result<Stream> create_stream(const DriverApi& api) {
  CUstream stream = nullptr;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                                        "cuStreamCreate(CU_STREAM_NON_BLOCKING)"));
  return Stream(api, stream);
}

Result<Event> create_event(const DriverApi& api) {
  CUevent event = nullptr;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
                                        "cuEventCreate(CU_EVENT_DISABLE_TIMING)"));
  return Event(api, event);
}

Result<AddressReservation> reserve_address_range(const DriverApi& api, size_t bytes,
                                                 size_t alignment) {
  CUdeviceptr base = 0;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuMemAddressReserve(&base, bytes, alignment, 0, 0),
                                        "cuMemAddressReserve(" + std::to_string(bytes) +
                                            " bytes, alignment " + std::to_string(alignment) +
                                            ")"));
  return AddressReservation(api, DeviceRange{base, bytes});
}

}  // namespace siesta::cuda
