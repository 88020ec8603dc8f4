// The small simulator most unit tests run on: 64 MiB of device memory in 64 KiB granules,
// commits in 256 KiB chunks (so a 4 MiB commit is 16 chunks) and three staging buffers of
// 48 KiB, a size that divides neither, so copies cross chunk and granule boundaries. The
// hazards stay the simulator's defaults (unordered work runs late, fresh memory is poisoned).
#pragma once

#include "backends/sim/sim_backend.h"

namespace siesta::test_util {

inline SimBackendOptions small_sim_options() {
  SimBackendOptions options;
  options.capacity_bytes = 64ull << 20;
  options.granularity = 64u << 10;
  options.max_chunk_bytes = 256u << 10;
  options.staging_buffer_bytes = 48u << 10;
  options.staging_buffer_count = 3;
  return options;
}

}  // namespace siesta::test_util
