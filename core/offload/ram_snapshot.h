// RamSnapshot: one session's snapshot in the RAM tier (core/offload/ram_tier.h): the bytes of
// every saved extent of its regions, packed one after another into one RamBlock in region
// order, with the table that says where each lies. Unlike a file it has no header, seal or
// digest: it never leaves the process, and only the Offloader that wrote it reads it back.
//
// The copies go through the backend's staging ring (device regions) or memcpy (host
// regions), a few staging buffers in flight at once.
//
// Thread rule: the functions run on the caller's thread; the regions' memory must stay
// committed and unchanged (to_ram) or unused by anything else (from_ram) while they run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/offload/ram_tier.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

struct RamSnapshot {
  struct Piece {
    uint32_t region = 0;      // index into the regions it was copied from
    snapshot::Extent extent;  // the region's bytes it holds
    uint64_t at = 0;          // where they start in `block`
  };
  RamBlock block;
  std::vector<Piece> pieces;
  // The regions' layouts when it was written (names, kinds, sizes; extents as saved): a
  // restore into regions of another layout is refused.
  std::vector<snapshot::RegionLayout> layout;
  uint64_t payload_bytes = 0;  // the sum of the pieces' lengths
};

// The bytes the saved extents of `regions` hold.
uint64_t saved_payload_bytes(std::span<const SnapshotRegion> regions);

// Copies every saved extent of `regions` into a fresh block of `tier`.
// `cancel` (may be null) is checked before each piece of at most one staging buffer;
// `on_memory_read` (may be empty) is called once every byte has been read, before the return.
// Success: the snapshot. Failure (nothing kept, the block given back): the tier's OutOfMemory
// when the payload does not fit; Cancelled when `cancel` was raised; the backend's error of a
// copy; FailedPrecondition when the staging ring stays busy (kStagingShareTimeout).
Result<RamSnapshot> copy_to_ram(RamTier& tier, MemoryBackend& backend,
                                std::span<const SnapshotRegion> regions,
                                const std::atomic<bool>* cancel,
                                const std::function<void()>& on_memory_read);

// Copies `ram` back into `regions` (every saved byte at the offset it came from).
// Failure: Foreign when `regions` do not have the layout `ram` was written from (their count,
// names, kinds and sizes; nothing is copied); the backend's error of a copy (the regions'
// contents are then unspecified).
Status copy_from_ram(const RamSnapshot& ram, MemoryBackend& backend,
                     std::span<const SnapshotRegion> regions);

}  // namespace siesta
