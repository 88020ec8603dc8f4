// ReadAheadFile: one range of a file read once, in order, around the page cache, ahead of the
// threads that read it.
//
// Why: a snapshot whose file is out of the page cache is read by the restore's chunk threads
// in 4 MiB pieces, several at once, and the kernel's readahead serves them. On the GPU
// machines' disks O_DIRECT reads in order, one or two at a time, are faster than that (2026-12-06,
// the H100 machine with the 105 MiB L3: 2.27 and 2.76 GB/s against 1.89 and 2.10 at 64 and 512
// MiB). Here loader threads read the range that way into a ring of aligned blocks, and read_at
// copies out of the ring; the chunk threads go on reading, opening and placing chunks as before, at
// the disk's pace.
//
// The range's bytes are meant to be read once each (a snapshot's chunk records are): a block
// goes back to the ring once every byte of the range in it has been read and no read is
// copying out of it, and a later read of it is served by `cached`. So a read in the range is
// answered with the file's bytes however the readers go; reading a byte twice only costs a
// read through `cached`. A block whose read around the cache failed is read through `cached`
// too, so a failing O_DIRECT read costs speed, not the restore. Reads that are not wholly in
// the range go to `cached`.
//
// Progress: the loaders read blocks in order and never more than the ring holds beyond the
// first block not yet read out, so a read of a block further on waits until the bytes before
// it are read. A read works through its blocks one by one, each read out before the next is
// waited for, so any ring of two blocks or more makes progress as long as every byte of the
// range is read by someone: the chunk threads take chunks in file order and read each record
// whole. A reader that stops short (a chunk that fails its check and is not read further) must
// call abandon(): from then on no read waits, and what is not in the ring comes from `cached`.
//
// Thread rule: read_at may be called from several threads at once, as ReadableFile's; the
// destructor stops the loaders and waits for them, and must not run while a read_at does.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "core/base/file_system.h"
#include "core/base/mutex.h"

namespace siesta {

struct ReadAheadOptions {
  size_t block_bytes = size_t{4} << 20;  // one read around the cache; rounded up to alignment
  size_t blocks = 4;                     // the ring (at least reads_in_flight + 2)
  // Loader threads, each with one read at a time. Two: with one, a cold restore ran at a median
  // 0.85 x the best raw cold read on the H100 machine (12 cases, 2026-12-06), its reads slower
  // beside the chunk threads' work than the same reads on an idle machine; with two, 0.94,
  // ahead of one in 10 of the 12. Three and four were no better than two.
  size_t reads_in_flight = 2;
};

class ReadAheadFile final : public ReadableFile {
 public:
  // Starts reading [begin, end) of `direct` (a handle from cached.open_direct()) ahead.
  // Failure: InvalidArgument for a null `direct`, an empty range, or no blocks or loaders;
  // OutOfMemory when the
  // ring cannot be allocated; Unavailable when a loader thread cannot be started. Nothing is
  // left running on failure.
  // REQUIRES: `cached` outlives the result.
  static Result<std::unique_ptr<ReadAheadFile>> start(ReadableFile& cached,
                                                      std::unique_ptr<ReadableFile> direct,
                                                      uint64_t begin, uint64_t end,
                                                      const ReadAheadOptions& options);
  ~ReadAheadFile() override;
  ReadAheadFile(const ReadAheadFile&) = delete;
  ReadAheadFile& operator=(const ReadAheadFile&) = delete;

  // The file's bytes at `offset`, as ReadableFile::read_at promises; waits for the blocks the
  // read covers to be loaded.
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override;
  Result<uint64_t> size() override { return cached_.size(); }

  // Some bytes of the range will not be read (their reader failed): the loaders stop, no read
  // waits any more, and what is not loaded already is read through `cached`. Any thread, any
  // number of times.
  void abandon();

  // Blocks read around the cache so far, and blocks whose read failed (read through `cached`).
  struct Counts {
    uint64_t loaded = 0;
    uint64_t failed = 0;
  };
  Counts counts() const;

  // A ring's memory, aligned for reads around the cache (kept for the next read-ahead).
  struct Ring {
    size_t bytes = 0;
    std::unique_ptr<std::byte, void (*)(void*)> memory{nullptr, nullptr};
  };

 private:
  enum class SlotState { kFree, kLoading, kLoaded, kFailed };
  struct Slot {
    uint64_t block = 0;  // which block it holds (when not kFree)
    SlotState state = SlotState::kFree;
    size_t readers = 0;  // reads copying out of it now
    uint64_t read = 0;   // bytes of the range in it read out so far
  };

  ReadAheadFile(ReadableFile& cached, std::unique_ptr<ReadableFile> direct, uint64_t begin,
                uint64_t end, size_t block_bytes, size_t slots);
  void load_blocks();
  // Serves [offset, offset + out.size()) of block `block` (wholly within it and the range);
  // returns the bytes read, fewer only where the file ends.
  Result<size_t> read_from_block(uint64_t block, uint64_t offset, std::span<std::byte> out);
  // Gives back, in order, the first blocks that were read out and that no read holds.
  void release_read_blocks() SIESTA_REQUIRES(mutex_);
  uint64_t block_start(uint64_t block) const { return first_ + block * block_bytes_; }
  // The bytes of the range in `block`.
  uint64_t range_bytes_in(uint64_t block) const;
  Slot& slot_of(uint64_t block) SIESTA_REQUIRES(mutex_) { return slots_[block % slot_count_]; }
  // Where `block`'s bytes are in the ring.
  std::byte* memory_of(uint64_t block) const {
    return ring_.memory.get() + (block % slot_count_) * block_bytes_;
  }

  ReadableFile& cached_;
  const std::unique_ptr<ReadableFile> direct_;
  const uint64_t begin_;
  const uint64_t end_;
  const uint64_t first_;  // begin_ rounded down to the alignment: block 0's start
  const size_t block_bytes_;
  const uint64_t block_count_;
  const size_t slot_count_;  // blocks the ring holds
  Ring ring_;

  mutable Mutex mutex_;
  std::condition_variable loaded_;  // a slot's block was loaded (or failed)
  std::condition_variable freed_;   // a slot was given back, or stopping
  std::vector<Slot> slots_ SIESTA_GUARDED_BY(mutex_);
  uint64_t next_to_load_ SIESTA_GUARDED_BY(mutex_) = 0;
  uint64_t released_ SIESTA_GUARDED_BY(mutex_) = 0;   // blocks before it are given back
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;   // the destructor runs
  bool abandoned_ SIESTA_GUARDED_BY(mutex_) = false;  // abandon() was called
  Counts counts_ SIESTA_GUARDED_BY(mutex_);
  std::vector<std::thread> loaders_;  // joined by the destructor
};

}  // namespace siesta
