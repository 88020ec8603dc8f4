// The device the engine's tests run on: a small simulator whose staging buffers are small
// enough that even the tiny model's snapshots and exports take several chunks per region, so
// copies cross chunk boundaries at odd places.
#pragma once

#include <cstdint>

#include "runtime/device.h"

namespace siesta::testing {

inline runtime::DeviceOptions engine_test_device(uint64_t capacity_bytes = 256ull << 20,
                                                 size_t staging_buffer_bytes = 96u << 10) {
  runtime::DeviceOptions device;
  device.kind = runtime::BackendKind::kSim;
  device.sim.capacity_bytes = capacity_bytes;
  device.sim.granularity = 64u << 10;
  device.sim.staging_buffer_bytes = staging_buffer_bytes;
  device.sim.staging_buffer_count = 2;
  return device;
}

}  // namespace siesta::testing
