// DeviceProbe: asks the CUDA driver directly, not through the backend, what it sees (free
// memory, what is mapped where), so GPU tests check the device's view rather than the
// backend's own bookkeeping.
//
// REQUIRES: CudaVmmBackend::unavailable_reason() is empty (a driver and device 0 exist).
// Thread rule: one thread at a time. Members are destroyed in reverse order: the probe's
// stream goes before its hold on the primary context.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "backends/cuda_vmm/cuda_driver_api.h"
#include "backends/cuda_vmm/cuda_handles.h"
#include "core/memory/memory_backend.h"

namespace siesta::test_util {

class DeviceProbe {
 public:
  DeviceProbe() : api_(**cuda::driver()) {
    CUdevice device = 0;
    EXPECT_EQ(api_.cuDeviceGet(&device, 0), CUDA_SUCCESS);
    auto context = cuda::PrimaryContext::retain(api_, device);
    EXPECT_TRUE(context.ok()) << context.status().to_string();
    if (context.ok()) context_ = std::move(*context);
  }

  // Free device memory, and all of it used by anyone (total - free), per cuMemGetInfo.
  uint64_t free_bytes() const { return memory_info().first; }
  uint64_t used_bytes() const {
    auto [free_bytes, total_bytes] = memory_info();
    return total_bytes - free_bytes;
  }

  // The start of the reservation that `address` lies in, as the driver reports it.
  // REQUIRES: `address` is mapped (on driver 580 the query fails with
  // CUDA_ERROR_INVALID_VALUE for a reserved address with nothing mapped under it).
  DeviceAddress range_start(DeviceAddress address) const {
    cuda::ScopedContext scope(api_, context_.get());
    CUdeviceptr start = 0;
    EXPECT_EQ(api_.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address),
              CUDA_SUCCESS);
    return start;
  }

  // Whether physical memory is mapped at `address` (an error also counts as "no").
  bool mapped(DeviceAddress address) const {
    cuda::ScopedContext scope(api_, context_.get());
    int mapped = 0;
    CUresult r = api_.cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, address);
    return r == CUDA_SUCCESS && mapped != 0;
  }

  // Work on a stream of the probe's own, not the backend's (as a kernel would run): fills
  // `range` with `value` (cuMemsetD8Async), without waiting. The stream is made on first use.
  Status fill_async(DeviceRange range, std::byte value) {
    cuda::ScopedContext scope(api_, context_.get());
    if (!stream_.get()) {
      Result<cuda::Stream> stream = cuda::create_stream(api_);
      if (!stream.ok()) return stream.status();
      stream_ = std::move(stream).value();
    }
    const CUresult r = api_.cuMemsetD8Async(range.base, static_cast<unsigned char>(value),
                                            range.size, stream_.get());
    if (r != CUDA_SUCCESS) return DeviceError("cuMemsetD8Async failed: " + std::to_string(r));
    return Status::Ok();
  }

  // The mapped region (one physical chunk) that `address` lies in.
  DeviceRange mapped_range(DeviceAddress address) const {
    cuda::ScopedContext scope(api_, context_.get());
    CUdeviceptr base = 0;
    size_t size = 0;
    EXPECT_EQ(api_.cuMemGetAddressRange(&base, &size, address), CUDA_SUCCESS);
    return {base, size};
  }

 private:
  std::pair<uint64_t, uint64_t> memory_info() const {
    cuda::ScopedContext scope(api_, context_.get());
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    EXPECT_EQ(api_.cuMemGetInfo(&free_bytes, &total_bytes), CUDA_SUCCESS);
    return {free_bytes, total_bytes};
  }

  const cuda::DriverApi& api_;
  cuda::PrimaryContext context_;
  cuda::Stream stream_;  // fill_async()'s; destroyed before the context is released
};

}  // namespace siesta::test_util
