// Host-side argument checks of CudaKernels: everything that can be known before a launch is
// checked here, because a kernel that reads a null or misaligned pointer poisons the device's
// whole primary context (the VMM backend's copies included) instead of failing one call.
// Each check returns OK or InvalidArgument naming the operation and the operand.
// Plain C++ (no CUDA headers).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"

namespace siesta::cuda_checks {

// The first failed check, or OK.
inline Status all(std::initializer_list<Status> checks) {
  for (const Status& check : checks) {
    if (!check.ok()) return check;
  }
  return Status::Ok();
}

inline Status positive(uint64_t value, std::string_view what) {
  if (value != 0) return Status::Ok();
  return InvalidArgument(std::string(what) + " is 0");
}

// A non-null address aligned to `alignment` bytes.
inline Status aligned(DeviceAddress address, uint64_t alignment, std::string_view what) {
  if (address == 0) return InvalidArgument(std::string(what) + " is a null device address");
  if (address % alignment == 0) return Status::Ok();
  return InvalidArgument(std::string(what) + " address " + std::to_string(address) + " is not " +
                         std::to_string(alignment) + "-byte aligned");
}

inline Status f32(DeviceAddress address, std::string_view what) {
  return aligned(address, 4, what);
}

inline Status step_params(DeviceAddress address, std::string_view op) {
  return aligned(address, alignof(StepParams), std::string(op) + " params");
}

// Row starts are aligned as the row's widest element (the int8 scales are floats at
// offset dim, a multiple of 32, so a 4-byte aligned cache keeps them aligned).
inline Status kv_cache(KvType type, DeviceAddress address, std::string_view what) {
  return aligned(address, type == KvType::kF16 ? 2 : 4, what);
}

inline Status kv_dim(KvType type, uint32_t dim, std::string_view op) {
  if (type != KvType::kF32 && type != KvType::kF16 && type != KvType::kInt8) {
    return InvalidArgument(std::string(op) + ": unknown KV type " +
                           std::to_string(static_cast<int>(type)));
  }
  if (dim == 0) return InvalidArgument(std::string(op) + " dim is 0");
  if (type == KvType::kInt8 && dim % kKvInt8Block != 0) {
    return InvalidArgument(std::string(op) + ": int8 KV dim " + std::to_string(dim) +
                           " is not a multiple of " + std::to_string(kKvInt8Block));
  }
  return Status::Ok();
}

inline Status even_head_dim(uint32_t head_dim) {
  if (head_dim != 0 && head_dim % 2 == 0) return Status::Ok();
  return InvalidArgument("rope head_dim " + std::to_string(head_dim) + " is not even and positive");
}

inline Status eps_ok(float eps) {
  if (std::isfinite(eps) && eps >= 0.0f) return Status::Ok();
  return InvalidArgument("rms_norm eps " + std::to_string(eps) + " is negative or not finite");
}

inline Status theta_ok(float theta) {
  if (std::isfinite(theta) && theta > 0.0f) return Status::Ok();
  return InvalidArgument("rope_table theta " + std::to_string(theta) +
                         " is not a positive finite number");
}

// [a, a + a_bytes) and [b, b + b_bytes) do not overlap.
inline Status disjoint(DeviceAddress a, uint64_t a_bytes, DeviceAddress b, uint64_t b_bytes,
                       std::string_view what) {
  if (a + a_bytes <= b || b + b_bytes <= a) return Status::Ok();
  return InvalidArgument(std::string(what) + " overlap");
}

}  // namespace siesta::cuda_checks
