#include "core/offload/ram_snapshot.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace siesta {
namespace {

// Staging buffers one copy keeps in flight: enough to overlap the device's copy of one piece
// with the memcpy of another, few enough to leave the ring to other sessions' pipelines.
constexpr size_t kPiecesInFlight = 4;

// A device piece in flight: its staging buffer, its copy and what to do when it is done.
struct InFlight {
  StagingBuffer staging;
  CopyTicket ticket;
  std::byte* to_host = nullptr;  // to_ram: where its bytes go once copied; null for from_ram
  uint64_t length = 0;
};

// Device copies through the staging ring, oldest retired first.
class StagingCopies {
 public:
  explicit StagingCopies(MemoryBackend& backend)
      : backend_(backend),
        limit_(std::max<size_t>(1, std::min(kPiecesInFlight, backend.staging_buffer_count()))) {}
  ~StagingCopies() { (void)drain(); }

  size_t piece_bytes() const { return backend_.staging_buffer_bytes(); }

  // Device bytes [source, source + length) into `destination`, once retired.
  Status to_host(DeviceAddress source, uint64_t length, std::byte* destination) {
    SIESTA_ASSIGN_OR_RETURN(StagingBuffer staging, take_buffer());
    InFlight piece{std::move(staging), {}, destination, length};
    SIESTA_ASSIGN_OR_RETURN(piece.ticket, backend_.copy_to_staging(source, length, piece.staging));
    in_flight_.push_back(std::move(piece));
    return Status::Ok();
  }

  // `length` bytes at `source` to device address `destination`.
  Status to_device(const std::byte* source, uint64_t length, DeviceAddress destination) {
    SIESTA_ASSIGN_OR_RETURN(StagingBuffer staging, take_buffer());
    std::memcpy(staging.bytes().data(), source, length);
    InFlight piece{std::move(staging), {}, nullptr, length};
    SIESTA_ASSIGN_OR_RETURN(piece.ticket,
                            backend_.copy_from_staging(piece.staging, length, destination));
    in_flight_.push_back(std::move(piece));
    return Status::Ok();
  }

  // Retires every piece in flight; the first failure.
  Status drain() {
    Status first;
    while (!in_flight_.empty()) {
      Status retired = retire_oldest();
      if (first.ok()) first = retired;
    }
    return first;
  }

 private:
  Result<StagingBuffer> take_buffer() {
    if (in_flight_.size() >= limit_) SIESTA_RETURN_IF_ERROR(retire_oldest());
    Result<StagingBuffer> buffer = backend_.acquire_staging();
    while (!buffer.ok() && !in_flight_.empty()) {
      SIESTA_RETURN_IF_ERROR(retire_oldest());
      buffer = backend_.acquire_staging();
    }
    // Nothing of ours in flight: another pipeline holds the ring; holding none, wait for it.
    if (!buffer.ok()) {
      buffer = backend_.acquire_staging_waiting(MemoryBackend::kStagingShareTimeout);
    }
    return buffer;
  }

  Status retire_oldest() {
    InFlight piece = std::move(in_flight_.front());
    in_flight_.pop_front();
    SIESTA_RETURN_IF_ERROR(backend_.wait(piece.ticket));
    if (piece.to_host != nullptr) {
      std::memcpy(piece.to_host, piece.staging.bytes().data(), piece.length);
    }
    return Status::Ok();
  }

  MemoryBackend& backend_;
  const size_t limit_;
  std::deque<InFlight> in_flight_;
};

// Direct copies (a block registered with the backend): pieces this large keep the link at
// its full rate (a 64 KiB copy runs at about a third of it) and a cancel is read between them.
constexpr uint64_t kDirectPieceBytes = uint64_t{64} << 20;

// Direct device copies enqueued back to back on the backend's copy stream, then waited for in
// order: each ticket reports its own copy's error (MemoryBackend::wait), and the waits after
// the first return at once.
class DirectCopies {
 public:
  explicit DirectCopies(MemoryBackend& backend) : backend_(backend) {}
  // Waits for what was enqueued, so that no copy outlives the memory it uses.
  ~DirectCopies() { (void)drain(); }

  Status to_host(DeviceAddress source, uint64_t length, std::byte* destination) {
    SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket, backend_.copy_to_host(source, length, destination));
    tickets_.push_back(ticket);
    return Status::Ok();
  }
  Status to_device(const std::byte* source, uint64_t length, DeviceAddress destination) {
    SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                            backend_.copy_from_host(source, length, destination));
    tickets_.push_back(ticket);
    return Status::Ok();
  }
  // Waits for every copy enqueued; the first failure.
  Status drain() {
    Status first;
    for (CopyTicket ticket : tickets_) {
      Status waited = backend_.wait(ticket);
      if (first.ok()) first = waited;
    }
    tickets_.clear();
    return first;
  }

 private:
  MemoryBackend& backend_;
  std::vector<CopyTicket> tickets_;
};

bool same_layout(const snapshot::RegionLayout& saved, const snapshot::RegionLayout& live) {
  return saved.name == live.name && saved.persist == live.persist && saved.size == live.size;
}

// The bytes of a region from its first saved byte to its last (extents are in offset order).
struct RegionSpan {
  uint64_t offset = 0;
  uint64_t length = 0;
};
RegionSpan span_of(const snapshot::RegionLayout& layout) {
  if (layout.extents.empty()) return {};
  const snapshot::Extent& first = layout.extents.front();
  const snapshot::Extent& last = layout.extents.back();
  return {first.offset, last.offset + last.length - first.offset};
}

// Copies what `regions` save into `ram`'s block, one piece of at most `piece_bytes` at a time,
// noting each extent's place; Cancelled as soon as `cancel` is seen.
template <class Copies>
Status gather(RamSnapshot& ram, std::span<const SnapshotRegion> regions,
              const std::atomic<bool>* cancel, Copies& copies, uint64_t piece_bytes) {
  uint64_t span_at = 0;
  for (uint32_t r = 0; r < regions.size(); ++r) {
    const SnapshotRegion& region = regions[r];
    const RegionSpan span = span_of(region.layout);
    ram.layout.push_back(region.layout);
    ram.span_at.push_back(span.length == 0 ? 0 : span_at);
    ram.span_offset.push_back(span.offset);
    for (const snapshot::Extent& extent : region.layout.extents) {
      const uint64_t at = ram.at(r, extent);
      for (uint64_t done = 0; done < extent.length;) {
        if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
          (void)copies.drain();
          return Cancelled("the save to RAM was cancelled");
        }
        std::byte* destination = ram.block.data() + at + done;
        if (region.place == SnapshotRegion::Place::kHost) {
          std::memcpy(destination, region.host + extent.offset, extent.length);
          done = extent.length;
          continue;
        }
        const uint64_t length =
            std::min({piece_bytes, extent.length - done, ram.block.contiguous_bytes(at + done)});
        SIESTA_RETURN_IF_ERROR(
            copies.to_host(region.device + extent.offset + done, length, destination));
        done += length;
      }
    }
    span_at += span.length;
  }
  return copies.drain();
}

// Copies every extent `ram` saved back to where `regions` keep it.
// REQUIRES: `regions` have the layout `ram` was written from (copy_from_ram checks).
template <class Copies>
Status scatter(const RamSnapshot& ram, std::span<const SnapshotRegion> regions, Copies& copies,
               uint64_t piece_bytes) {
  for (size_t r = 0; r < ram.layout.size(); ++r) {
    const SnapshotRegion& region = regions[r];
    for (const snapshot::Extent& extent : ram.layout[r].extents) {
      const uint64_t at = ram.at(r, extent);
      const std::byte* source = ram.block.data() + at;
      if (region.place == SnapshotRegion::Place::kHost) {
        std::memcpy(region.host + extent.offset, source, extent.length);
        continue;
      }
      for (uint64_t done = 0; done < extent.length;) {
        const uint64_t length =
            std::min({piece_bytes, extent.length - done, ram.block.contiguous_bytes(at + done)});
        SIESTA_RETURN_IF_ERROR(
            copies.to_device(source + done, length, region.device + extent.offset + done));
        done += length;
      }
    }
  }
  return copies.drain();
}

}  // namespace

uint64_t saved_payload_bytes(std::span<const SnapshotRegion> regions) {
  uint64_t total = 0;
  for (const SnapshotRegion& region : regions) {
    for (const snapshot::Extent& extent : region.layout.extents) total += extent.length;
  }
  return total;
}

Result<RamSnapshot> copy_to_ram(RamTier& tier, MemoryBackend& backend,
                                std::span<const SnapshotRegion> regions,
                                const std::atomic<bool>* cancel,
                                const std::function<void()>& on_memory_read) {
  RamSnapshot ram;
  ram.payload_bytes = saved_payload_bytes(regions);
  // A session with nothing saved still gets a block (of one page): a snapshot exists.
  SIESTA_ASSIGN_OR_RETURN(ram.block, tier.allocate(ram_block_bytes(regions)));
  if (ram.block.device_copies()) {
    DirectCopies copies(backend);
    SIESTA_RETURN_IF_ERROR(gather(ram, regions, cancel, copies, kDirectPieceBytes));
  } else {
    StagingCopies copies(backend);
    SIESTA_RETURN_IF_ERROR(gather(ram, regions, cancel, copies, copies.piece_bytes()));
  }
  if (on_memory_read) on_memory_read();
  return ram;
}

Status copy_from_ram(const RamSnapshot& ram, MemoryBackend& backend,
                     std::span<const SnapshotRegion> regions) {
  if (regions.size() != ram.layout.size()) {
    return Foreign("RAM snapshot of " + std::to_string(ram.layout.size()) +
                   " regions, the session has " + std::to_string(regions.size()));
  }
  for (size_t r = 0; r < regions.size(); ++r) {
    if (!same_layout(ram.layout[r], regions[r].layout)) {
      return Foreign("RAM snapshot region " + std::to_string(r) + " (" + ram.layout[r].name +
                     ") differs from the session's (" + regions[r].layout.name + ")");
    }
  }
  if (ram.block.device_copies()) {
    DirectCopies copies(backend);
    return scatter(ram, regions, copies, kDirectPieceBytes);
  }
  StagingCopies copies(backend);
  return scatter(ram, regions, copies, copies.piece_bytes());
}

uint64_t ram_block_bytes(std::span<const SnapshotRegion> regions) {
  uint64_t total = 0;
  for (const SnapshotRegion& region : regions) total += span_of(region.layout).length;
  return std::max<uint64_t>(total, 1);
}

uint64_t RamCopy::payload_bytes() const {
  uint64_t total = 0;
  for (const Segment& segment : segments) total += segment.snapshot->payload_bytes;
  return total;
}

uint64_t RamCopy::charged_bytes() const {
  uint64_t total = 0;
  for (const Segment& segment : segments) total += segment.snapshot->block.charged_bytes();
  return total;
}

Status copy_from_ram(const RamCopy& copy, MemoryBackend& backend,
                     std::span<const SnapshotRegion> regions) {
  for (const RamCopy::Segment& segment : copy.segments) {
    SIESTA_RETURN_IF_ERROR(copy_from_ram(*segment.snapshot, backend, regions));
  }
  return Status::Ok();
}

std::vector<SnapshotRegion> ram_regions(const RamSnapshot& ram) {
  std::vector<SnapshotRegion> out;
  out.reserve(ram.layout.size());
  for (size_t r = 0; r < ram.layout.size(); ++r) {
    SnapshotRegion region;
    region.layout = ram.layout[r];
    region.place = SnapshotRegion::Place::kHost;
    // host + extent.offset == block + span_at + (extent.offset - span_offset). The pointer
    // itself may lie before the block (never dereferenced there): integer arithmetic keeps
    // that well-defined.
    region.host = reinterpret_cast<std::byte*>(  // NOLINT(performance-no-int-to-ptr)
        reinterpret_cast<uintptr_t>(ram.block.data()) + ram.span_at[r] - ram.span_offset[r]);
    out.push_back(std::move(region));
  }
  return out;
}

}  // namespace siesta
