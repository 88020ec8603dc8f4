// Whole-buffer copies between host memory and a device, streamed through the backend's
// staging ring with every staging buffer in flight at once.
#pragma once

#include <cstddef>
#include <span>

#include "core/memory/memory_backend.h"

namespace siesta {

// Copies device bytes [source, source + destination.size()) into `destination`.
// Success: all bytes copied. Failure: the first error of any copy; `destination` then
// holds an unspecified mix of old and new bytes.
Status copy_device_to_host(MemoryBackend& backend, DeviceAddress source,
                           std::span<std::byte> destination);

// Copies `source` to device bytes [destination, destination + source.size()).
// Success: all bytes copied and the copies complete. Failure: the first error.
Status copy_host_to_device(MemoryBackend& backend, std::span<const std::byte> source,
                           DeviceAddress destination);

}  // namespace siesta
