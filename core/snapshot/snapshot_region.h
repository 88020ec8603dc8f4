// SnapshotRegion: one region of a session as the snapshot writer reads it and the reader
// restores it: its layout (name, persist kind, size, saved extents) and where its bytes live,
// on the device (through a MemoryBackend's staging ring) or in host memory.
#pragma once

#include <cstddef>

#include "core/memory/memory_backend.h"
#include "core/snapshot/snapshot_format.h"

namespace siesta {

struct SnapshotRegion {
  enum class Place : uint8_t { kHost, kDevice };

  snapshot::RegionLayout layout;
  Place place = Place::kHost;
  // kHost: layout.size bytes at `host` (the writer only reads them, the reader writes them).
  std::byte* host = nullptr;
  // kDevice: layout.size committed bytes starting at `device`.
  DeviceAddress device = 0;
};

}  // namespace siesta
