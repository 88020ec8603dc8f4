// PinnedRamPool: the RAM tier's pages where the backend copies to host memory directly (CUDA:
// pinned, at the link's full rate). Pinning is slow (registering memory costs about 0.04 s per
// GiB on the H200 machine, a fresh cudaHostAlloc 0.6 s per GiB), so it never happens on a
// save's or a request's time: one address range as large as the budget is reserved up front
// (no memory behind it), and a background thread prepares it from its start in chunks
// (`chunk_bytes`, 256 MiB by default; the last one shorter, so that never more than the budget
// is prepared), each one made accessible and registered with the backend once. Blocks are carved
// from the prepared part only (first fit, page granularity), so a block is contiguous and every
// byte of it is registered; a block that does not fit in what is prepared yet is refused
// (OutOfMemory: the snapshot goes to disk) and the thread is asked to prepare more.
//
// What the pool keeps (the rule, docs/IDLE_SESSION.md "The RAM tier"): the chunks that hold
// blocks, plus room for the largest block asked for or expected so far (at least one chunk),
// ready ahead (expect(): a session announces its next save's size when its command ends, so
// that the room is prepared while it is idle and its first save is not refused);
// prepared chunks at the top of the range that nothing uses beyond that are unregistered and
// given back to the system (MADV_DONTNEED) by the same thread. So a fresh server holds one
// chunk of pinned memory; one that has served conversations, room for its largest ahead; a
// busy one what its copies need plus that room.
//
// A chunk the backend refuses to register (the system would not pin more) ends the growth:
// the tier stays at what was prepared, and serves from it; the refusal is counted.
//
// Copies must not cross a chunk boundary (each chunk is its own registration; CUDA refuses a
// copy spanning host allocations registered apart): contiguous_bytes() says how far one may
// go, and the RAM snapshot's copies split there.
//
// Thread rule: every member is thread-safe; the preparing thread is the pool's own and is
// joined by the destructor. REQUIRES: the backend outlives the pool, and no block of the pool
// is alive at its destruction.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <thread>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "core/memory/memory_backend.h"
#include "core/offload/ram_tier.h"

namespace siesta {

struct PinnedRamPoolStats {
  uint64_t reserved_bytes = 0;   // the address range: the budget in whole pages
  uint64_t ready_bytes = 0;      // prepared and registered, from the range's start
  uint64_t used_bytes = 0;       // held by blocks
  uint64_t chunks_prepared = 0;  // registrations made (over the pool's life)
  uint64_t chunks_given_back = 0;
  uint64_t refused_not_ready = 0;  // blocks refused because not enough was prepared yet
  uint64_t register_failures = 0;  // chunks the backend would not register (growth stopped)
};

class PinnedRamPool final : public RamPages {
 public:
  static constexpr uint64_t kDefaultChunkBytes = uint64_t{256} << 20;

  // Reserves the range for `budget_bytes` (in chunks of min(chunk_bytes, the budget)),
  // prepares its first chunk (a refusal is counted, and the tier then has nothing ready), and
  // starts the thread that prepares the rest as it is wanted.
  // Failure: InvalidArgument for a budget or chunk of 0 or a chunk that is not a multiple of
  // the page size; OutOfMemory when the address range cannot be reserved.
  static Result<std::unique_ptr<PinnedRamPool>> create(MemoryBackend& backend,
                                                       uint64_t budget_bytes,
                                                       uint64_t chunk_bytes = kDefaultChunkBytes);
  ~PinnedRamPool() override;
  PinnedRamPool(const PinnedRamPool&) = delete;
  PinnedRamPool& operator=(const PinnedRamPool&) = delete;

  // RamPages: `bytes` of registered memory from the prepared part. OutOfMemory when no free
  // run of the prepared part is that large (the thread is asked to prepare more).
  Result<std::byte*> map(size_t bytes) override;
  void unmap(std::byte* pages, size_t bytes) override;
  bool device_copies() const override { return true; }
  uint64_t contiguous_bytes(const std::byte* at) const override;
  uint64_t ready_bytes() const override;
  // Raises the room kept ready ahead to `bytes` (at most the budget) and wakes the thread
  // that prepares it; returns at once.
  void expect(uint64_t bytes) override;

  PinnedRamPoolStats stats() const;
  uint64_t chunk_bytes() const { return chunk_; }

 private:
  PinnedRamPool(MemoryBackend& backend, std::byte* base, uint64_t reserved, uint64_t chunk);
  void prepare_loop();
  bool should_grow() const SIESTA_REQUIRES(mu_);
  bool should_shrink() const SIESTA_REQUIRES(mu_);
  // Prepares the chunk above the prepared part, releasing mu_ around the system calls (the
  // caller's MutexLock holds it again on return); on a refusal, stops the growth for good.
  void grow_one() SIESTA_REQUIRES(mu_);
  // Gives the top chunk back, releasing mu_ around the system calls. REQUIRES:
  // should_shrink().
  void shrink_one() SIESTA_REQUIRES(mu_);
  // How much the pool should have prepared now (the rule above). REQUIRES: mu_.
  uint64_t wanted_bytes() const SIESTA_REQUIRES(mu_);
  // The end of the highest block, 0 when none. REQUIRES: mu_.
  uint64_t used_top() const SIESTA_REQUIRES(mu_);

  MemoryBackend& backend_;
  std::byte* const base_;
  const uint64_t reserved_;
  const uint64_t chunk_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ SIESTA_GUARDED_BY(mu_) = false;
  bool growth_stopped_ SIESTA_GUARDED_BY(mu_) = false;  // a registration was refused
  uint64_t ready_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t largest_asked_ SIESTA_GUARDED_BY(mu_) = 0;  // by map() or expect()
  // Free runs of the prepared part, offset -> length, never adjacent (merged on free).
  std::map<uint64_t, uint64_t> free_ SIESTA_GUARDED_BY(mu_);
  // Blocks handed out, offset -> length.
  std::map<uint64_t, uint64_t> used_ SIESTA_GUARDED_BY(mu_);
  PinnedRamPoolStats counts_ SIESTA_GUARDED_BY(mu_);
  std::thread preparer_;  // last: started once everything above exists
};

}  // namespace siesta
