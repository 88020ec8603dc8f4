#include "core/memory/device_copy.h"

#include <algorithm>
#include <cstring>
#include <deque>

namespace siesta {
namespace {

// A staging buffer and the copy that is using it.
struct InFlight {
  StagingBuffer buffer;
  CopyTicket ticket;
  size_t offset = 0;  // into the host span
  size_t bytes = 0;
};

size_t pipeline_depth(const MemoryBackend& backend) {
  return std::max<size_t>(1, backend.staging_buffer_count());
}

// A staging buffer from a ring shared with other sessions' pipelines: our own copies in flight
// are finished first (drain_one gives one back), then, holding none, we wait for another's.
template <class Drain>
Result<StagingBuffer> acquire_shared(MemoryBackend& backend, const std::deque<InFlight>& in_flight,
                                     Drain& drain_one) {
  Result<StagingBuffer> buffer = backend.acquire_staging();
  while (!buffer.ok() && !in_flight.empty()) {
    SIESTA_RETURN_IF_ERROR(drain_one());
    buffer = backend.acquire_staging();
  }
  if (buffer.ok()) return buffer;
  return backend.acquire_staging_waiting(MemoryBackend::kStagingShareTimeout);
}

}  // namespace

Status copy_device_to_host(MemoryBackend& backend, DeviceAddress source,
                           std::span<std::byte> destination) {
  const size_t chunk = backend.staging_buffer_bytes();
  if (chunk == 0) return Internal(backend.name() + " has no staging buffers");
  std::deque<InFlight> in_flight;
  auto drain_one = [&]() -> Status {
    InFlight& oldest = in_flight.front();
    SIESTA_RETURN_IF_ERROR(backend.wait(oldest.ticket));
    std::memcpy(destination.data() + oldest.offset, oldest.buffer.bytes().data(), oldest.bytes);
    in_flight.pop_front();
    return Status::Ok();
  };
  for (size_t offset = 0; offset < destination.size(); offset += chunk) {
    if (in_flight.size() == pipeline_depth(backend)) SIESTA_RETURN_IF_ERROR(drain_one());
    InFlight next;
    SIESTA_ASSIGN_OR_RETURN(next.buffer, acquire_shared(backend, in_flight, drain_one));
    next.offset = offset;
    next.bytes = std::min(chunk, destination.size() - offset);
    SIESTA_ASSIGN_OR_RETURN(next.ticket,
                            backend.copy_to_staging(source + offset, next.bytes, next.buffer));
    in_flight.push_back(std::move(next));
  }
  while (!in_flight.empty()) SIESTA_RETURN_IF_ERROR(drain_one());
  return Status::Ok();
}

Status copy_host_to_device(MemoryBackend& backend, std::span<const std::byte> source,
                           DeviceAddress destination) {
  const size_t chunk = backend.staging_buffer_bytes();
  if (chunk == 0) return Internal(backend.name() + " has no staging buffers");
  std::deque<InFlight> in_flight;
  auto drain_one = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(backend.wait(in_flight.front().ticket));
    in_flight.pop_front();
    return Status::Ok();
  };
  for (size_t offset = 0; offset < source.size(); offset += chunk) {
    if (in_flight.size() == pipeline_depth(backend)) SIESTA_RETURN_IF_ERROR(drain_one());
    InFlight next;
    SIESTA_ASSIGN_OR_RETURN(next.buffer, acquire_shared(backend, in_flight, drain_one));
    next.bytes = std::min(chunk, source.size() - offset);
    std::memcpy(next.buffer.bytes().data(), source.data() + offset, next.bytes);
    SIESTA_ASSIGN_OR_RETURN(
        next.ticket, backend.copy_from_staging(next.buffer, next.bytes, destination + offset));
    in_flight.push_back(std::move(next));
  }
  while (!in_flight.empty()) SIESTA_RETURN_IF_ERROR(drain_one());
  return Status::Ok();
}

}  // namespace siesta
