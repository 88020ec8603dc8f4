// RamSnapshot: one session's snapshot in the RAM tier (core/offload/ram_tier.h): for each
// region, the span from its first saved byte to its last (its saved extents at their
// distances, so a session's one extent per region takes exactly its bytes), the spans one
// after another in one RamBlock in region order, with where each span starts (so at() says
// where each extent lies). Unlike a file it has no header, seal or digest: it never leaves the
// process, and only the Offloader that wrote it reads it back. Because each region keeps its shape,
// ram_regions() can hand the block to the snapshot writer as host regions (a spill to disk
// writes the same file a save from the device would).
//
// Device regions' bytes move straight between the device and a block registered with the
// backend (RamBlock::device_copies(), pieces of up to 64 MiB), else through the backend's
// staging ring, a few buffers in flight at once; host regions' by memcpy.
//
// Thread rule: the functions run on the caller's thread; the regions' memory must stay
// committed and unchanged (to_ram) or unused by anything else (from_ram) while they run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/offload/ram_tier.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

struct RamSnapshot {
  RamBlock block;
  // The regions' layouts when it was written (names, kinds, sizes; extents as saved): a
  // restore into regions of another layout is refused.
  std::vector<snapshot::RegionLayout> layout;
  uint64_t payload_bytes = 0;  // the sum of the saved extents' lengths
  // Per region: where its span starts in `block`, and the region offset the span starts at
  // (its first extent's); both 0 for a region with nothing saved.
  std::vector<uint64_t> span_at;
  std::vector<uint64_t> span_offset;

  // Where the bytes of `extent`, one of region `region`'s saved extents, lie in `block`.
  uint64_t at(size_t region, const snapshot::Extent& extent) const {
    return span_at[region] + (extent.offset - span_offset[region]);
  }
};

// A session's copy in the tier: a whole snapshot, then the deltas saved over it since (each
// holding only what changed: the rows appended, the state rewritten), restored in order, each
// over the one before. Immutable once made: a delta save makes a new copy holding the same
// segments and one more, so a restore or a spill reads it without a lock while the old one is
// still whole. Why not in place: the history grows past the end of each region's span, so an
// update in place would need every span to keep room to grow (RAM no session uses), and a copy
// half overwritten would no longer restore anything.
struct RamCopy {
  struct Segment {
    std::shared_ptr<const RamSnapshot> snapshot;
    uint64_t tokens = 0;  // history tokens when it was saved
  };
  std::vector<Segment> segments;  // never empty

  uint64_t tokens() const { return segments.back().tokens; }
  uint64_t payload_bytes() const;  // the segments' payloads, summed
  uint64_t charged_bytes() const;  // what the segments' blocks count against the budget
};

// `ram` as host regions of the layout it was written from, each region's host pointer placed
// so that host + extent.offset is where that extent's bytes lie in the block: what the
// snapshot writer reads to put the snapshot on disk. Valid while `ram.block` is.
std::vector<SnapshotRegion> ram_regions(const RamSnapshot& ram);

// The bytes the saved extents of `regions` hold.
uint64_t saved_payload_bytes(std::span<const SnapshotRegion> regions);

// The size of the block copy_to_ram() asks the tier for: the regions' spans (at least 1).
uint64_t ram_block_bytes(std::span<const SnapshotRegion> regions);

// Copies every saved extent of `regions` into a fresh block of `tier`.
// `cancel` (may be null) is checked before each piece (a staging buffer's, or 64 MiB);
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

// Copies every segment of `copy` back into `regions`, the whole snapshot first, then each
// delta over it. Failure: as copy_from_ram() of the first segment that fails.
Status copy_from_ram(const RamCopy& copy, MemoryBackend& backend,
                     std::span<const SnapshotRegion> regions);

}  // namespace siesta
