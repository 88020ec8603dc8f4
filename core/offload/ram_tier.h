// RamTier: host memory for offloaded sessions' snapshots, bounded by one budget that every
// session of the process shares (--cache-ram-mib). A session whose memory is released keeps
// its snapshot here when it fits, else on disk (docs/IDLE_SESSION.md, "The RAM tier").
//
// The tier hands out blocks: each one is the memory of one session's snapshot, mapped when
// allocated and given back to the system (munmap) when the block is destroyed, so the
// process's resident memory never holds more than the budget on the tier's account, and
// memory the tier no longer needs is the system's again at once. The pages come from a
// RamPages source: anonymous mappings by default; a test passes one that fails on demand.
//
// Trust: a block is the process's own memory, as the device memory its bytes came from; it
// carries no digest (docs/IDLE_SESSION.md's security section says why).
//
// When a block does not fit, make_room() frees room in RoomHolders' order
// (core/offload/room_holders.h): first the copies resident sessions keep as the base of their
// next delta (their memory holds every byte: giving such a copy up costs no write), then the
// least recently used idle sessions' copies, written to disk. Each holder of a copy (the
// Offloader) enlists itself; its spill writes its copy to disk as a save would and gives the
// block back.
//
// Thread rule: every member is thread-safe (one mutex, held only for the accounting and the
// tenants' list, never across a mapping or a spill); a RamBlock may be used and destroyed on
// any thread, one at a time.
// REQUIRES: the tier outlives every block it handed out.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/memory_backend.h"
#include "core/offload/room_holders.h"

namespace siesta {

// Where a block's pages come from.
class RamPages {
 public:
  virtual ~RamPages() = default;
  // `bytes` (a multiple of the page size, > 0) of zero-filled read-write memory.
  // Failure: OutOfMemory when the system refuses them.
  virtual Result<std::byte*> map(size_t bytes) = 0;
  // Gives back exactly what one map() returned.
  virtual void unmap(std::byte* pages, size_t bytes) = 0;
  // Whether the device copies to and from these pages directly (they are registered with
  // the backend: MemoryBackend::copy_to_host); else copies go through the staging ring.
  virtual bool device_copies() const { return false; }
  // How many bytes from `at` (inside a mapping of these pages) one device copy may cover:
  // a copy must not cross from one registration into another.
  virtual uint64_t contiguous_bytes(const std::byte* at) const {
    (void)at;
    return UINT64_MAX;
  }
  // How many bytes are prepared to be handed out now (the rest is still being prepared):
  // UINT64_MAX where pages are made on demand.
  virtual uint64_t ready_bytes() const { return UINT64_MAX; }
  // A block of `bytes` will be asked for: a source that prepares its pages ahead prepares
  // room for it before then; one that makes pages on demand has nothing to do.
  virtual void expect(uint64_t bytes) { (void)bytes; }
};

// Anonymous private mappings (mmap / munmap).
class AnonymousRamPages final : public RamPages {
 public:
  Result<std::byte*> map(size_t bytes) override;
  void unmap(std::byte* pages, size_t bytes) override;
};

// Pages of another source, each mapping registered with `backend` for direct copies
// (pinned on CUDA: the link's full speed, no staging). A mapping the backend refuses to
// register is given back and map() fails with the backend's error (OutOfMemory when the
// system would not pin it), so the snapshot goes to disk instead.
// REQUIRES: `backend` outlives these pages and every block made of them.
class RegisteredRamPages final : public RamPages {
 public:
  RegisteredRamPages(MemoryBackend& backend, std::unique_ptr<RamPages> inner);
  Result<std::byte*> map(size_t bytes) override;
  void unmap(std::byte* pages, size_t bytes) override;
  bool device_copies() const override { return true; }

 private:
  MemoryBackend& backend_;
  const std::unique_ptr<RamPages> inner_;
};

// The machine's physical memory (sysconf), the most a tier's budget may be; 0 when the
// system does not say.
uint64_t physical_memory_bytes();

// The server's default budget: the smaller of 8 GiB and a quarter of `machine_bytes`, in
// whole MiB (0 when the machine's memory is unknown: no tier).
inline constexpr uint64_t kDefaultRamTierCapBytes = uint64_t{8} << 30;
uint64_t default_ram_tier_bytes(uint64_t machine_bytes = physical_memory_bytes());

struct RamTierStats {
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;           // held by live blocks (page-rounded)
  uint64_t blocks = 0;               // live blocks
  uint64_t refused_full = 0;         // allocations that did not fit in what was left
  uint64_t allocation_failures = 0;  // allocations the system refused (RamPages::map)
  bool direct_copies = false;        // blocks pinned for direct device copies (device_copies())
  uint64_t ready_bytes = 0;          // of the budget, what can be handed out now (pinned ahead)
  uint64_t spills = 0;               // copies make_room() moved to disk
  uint64_t spill_failures = 0;       // spills that failed (the copy stayed in RAM)
  uint64_t bases_dropped = 0;        // resident sessions' kept copies make_room() gave up
};

class RamTier;

// One allocation: `size()` usable bytes at `data()`. Move-only; destruction unmaps the pages
// and gives their bytes back to the budget. An empty block (default) holds nothing.
class RamBlock {
 public:
  RamBlock() = default;
  RamBlock(RamBlock&& other) noexcept { *this = std::move(other); }
  RamBlock& operator=(RamBlock&& other) noexcept;
  RamBlock(const RamBlock&) = delete;
  RamBlock& operator=(const RamBlock&) = delete;
  ~RamBlock() { reset(); }

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  // What the block counts against the budget: size() rounded up to whole pages.
  uint64_t charged_bytes() const { return mapped_; }
  bool empty() const { return tier_ == nullptr; }
  // Whether the device copies to and from this block directly (RamPages::device_copies).
  bool device_copies() const;
  // How many bytes from `offset` one device copy may cover (RamPages::contiguous_bytes).
  uint64_t contiguous_bytes(uint64_t offset) const;
  // Gives the block back now; nothing when empty.
  void reset();

 private:
  friend class RamTier;
  RamBlock(RamTier* tier, std::byte* data, uint64_t size, uint64_t mapped)
      : tier_(tier), data_(data), size_(size), mapped_(mapped) {}

  RamTier* tier_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t mapped_ = 0;
};

class RamTier {
 public:
  // `pages`: where blocks come from; null: AnonymousRamPages. A budget of 0 makes a tier
  // that refuses every allocation (the server makes none then: --cache-ram-mib 0).
  explicit RamTier(uint64_t budget_bytes, std::unique_ptr<RamPages> pages = nullptr);
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;
  // REQUIRES: no block of this tier is alive.
  ~RamTier() = default;

  // A block of `bytes` (> 0), its pages charged to the budget.
  // Failure (nothing charged): InvalidArgument for 0 bytes; OutOfMemory when the pages do not
  // fit in what is left of the budget (counted in refused_full) or the system refuses them
  // (counted in allocation_failures).
  Result<RamBlock> allocate(uint64_t bytes);

  // Whether `bytes` would fit in what is left of the budget now (another thread may take it
  // before an allocate()).
  bool fits(uint64_t bytes) const;

  // Lists `holder` as holding a copy last used at `last_used` (RoomHolders::enlist).
  void enlist(const std::shared_ptr<RoomHolder>& holder, int64_t last_used,
              RoomHolder::Holding holding = RoomHolder::Holding::kOnlyCopy) {
    holders_.enlist(holder, last_used, holding);
  }
  // Takes `holder` off the list (it holds no copy any more); nothing when it is not listed.
  void delist(const RoomHolder* holder) { holders_.delist(holder); }
  // Asks listed holders for their room until `bytes` fit: resident sessions' bases first, then
  // copies to spill, least recently used first. Stops at the
  // first spill that fails (a broken disk is not tried once per holder), when
  // `cancel` (may be null) is raised, or when nobody is left; never when `bytes` exceed the
  // whole budget. Returns whether `bytes` fit now (another thread may take the room before an
  // allocate()). Runs the spills on the caller's thread.
  bool make_room(uint64_t bytes, const std::atomic<bool>* cancel);

  // A session's next save may ask for a block of `bytes` (RamPages::expect): the pages are
  // prepared ahead while the session is idle, so that the save does not find them unready
  // and go to disk. Nothing for a size the budget cannot hold. Never waits.
  void expect(uint64_t bytes);

  RamTierStats stats() const;
  uint64_t budget_bytes() const { return budget_; }
  bool device_copies() const { return pages_->device_copies(); }

 private:
  friend class RamBlock;
  void give_back(std::byte* data, uint64_t mapped);

  const uint64_t budget_;
  const std::unique_ptr<RamPages> pages_;
  mutable Mutex mu_;
  uint64_t used_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t blocks_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t refused_full_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t allocation_failures_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t spills_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t spill_failures_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t bases_dropped_ SIESTA_GUARDED_BY(mu_) = 0;
  RoomHolders holders_;
};

}  // namespace siesta
