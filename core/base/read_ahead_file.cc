#include "core/base/read_ahead_file.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "core/base/round_up.h"

namespace siesta {
namespace {

void free_ring(void* memory) { std::free(memory); }

// Rings kept for the next read-ahead. A fresh ring's pages are faulted in (zeroed) by its
// first reads: about 8 ms for 32 MiB on the CPU machine, a quarter of a 64 MiB file's cold
// read. At most kKeptRings are kept, the newest given back; a ring is taken only by a
// read-ahead of its exact size.
class RingShelf {
 public:
  // Never destroyed, as the snapshot thread pool is not: a restore may run while static
  // objects are torn down at exit.
  static RingShelf& instance() {
    static RingShelf* const shelf = new RingShelf;
    return *shelf;
  }
  ReadAheadFile::Ring take(size_t bytes) {
    {
      MutexLock lock(mutex_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->bytes != bytes) continue;
        ReadAheadFile::Ring ring = std::move(*it);
        kept_.erase(it);
        return ring;
      }
    }
    return ReadAheadFile::Ring{
        bytes,
        {static_cast<std::byte*>(std::aligned_alloc(kDirectReadAlignment, bytes)), free_ring}};
  }
  void put(ReadAheadFile::Ring ring) {
    if (ring.memory == nullptr) return;
    MutexLock lock(mutex_);
    if (kept_.size() == kKeptRings) kept_.erase(kept_.begin());  // the oldest goes
    kept_.push_back(std::move(ring));
  }

 private:
  static constexpr size_t kKeptRings = 2;
  Mutex mutex_;
  std::vector<ReadAheadFile::Ring> kept_ SIESTA_GUARDED_BY(mutex_);
};

}  // namespace

Result<std::unique_ptr<ReadAheadFile>> ReadAheadFile::start(ReadableFile& cached,
                                                            std::unique_ptr<ReadableFile> direct,
                                                            uint64_t begin, uint64_t end,
                                                            const ReadAheadOptions& options) {
  if (direct == nullptr || begin >= end || options.blocks == 0 || options.reads_in_flight == 0) {
    return InvalidArgument(
        "read-ahead: no handle around the cache, an empty range, no blocks or no loaders");
  }
  const size_t block_bytes =
      round_up(std::max<size_t>(options.block_bytes, 1), kDirectReadAlignment);
  // Room for every loader's block beside two being read out.
  const size_t slots = std::max(options.blocks, options.reads_in_flight + 2);
  std::unique_ptr<ReadAheadFile> file(
      new ReadAheadFile(cached, std::move(direct), begin, end, block_bytes, slots));
  if (file->ring_.memory == nullptr) {
    return OutOfMemory("read-ahead: no memory for a ring of " + std::to_string(slots) + " x " +
                       std::to_string(block_bytes >> 10) + " KiB");
  }
  try {
    file->loaders_.reserve(options.reads_in_flight);
    for (size_t i = 0; i < options.reads_in_flight; ++i) {
      file->loaders_.emplace_back([raw = file.get()] { raw->load_blocks(); });
    }
  } catch (const std::exception& error) {
    return Unavailable(std::string("read-ahead: a loader thread could not start: ") + error.what());
  }  // the destructor stops and joins those that did
  return file;
}

ReadAheadFile::ReadAheadFile(ReadableFile& cached, std::unique_ptr<ReadableFile> direct,
                             uint64_t begin, uint64_t end, size_t block_bytes, size_t slots)
    : cached_(cached),
      direct_(std::move(direct)),
      begin_(begin),
      end_(end),
      first_(begin / kDirectReadAlignment * kDirectReadAlignment),
      block_bytes_(block_bytes),
      block_count_((end - first_ + block_bytes - 1) / block_bytes),
      slot_count_(slots),
      ring_(RingShelf::instance().take(slots * block_bytes)),
      slots_(slots) {}

ReadAheadFile::~ReadAheadFile() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  freed_.notify_all();
  for (std::thread& loader : loaders_) loader.join();
  RingShelf::instance().put(std::move(ring_));
}

uint64_t ReadAheadFile::range_bytes_in(uint64_t block) const {
  const uint64_t lo = std::max(begin_, block_start(block));
  const uint64_t hi = std::min(end_, block_start(block) + block_bytes_);
  return hi - lo;
}

void ReadAheadFile::load_blocks() {
  MutexLock lock(mutex_);
  while (true) {
    lock.wait(freed_, [this]() SIESTA_REQUIRES(mutex_) {
      return stopping_ || abandoned_ || next_to_load_ == block_count_ ||
             next_to_load_ < released_ + slot_count_;
    });
    if (stopping_ || abandoned_ || next_to_load_ == block_count_) return;
    const uint64_t block = next_to_load_++;
    Slot& slot = slot_of(block);
    slot = Slot{block, SlotState::kLoading, 0, 0};
    std::byte* const into = memory_of(block);
    lock.unlock();
    // The last block is read whole: the file ends in it, and the read returns fewer bytes.
    const uint64_t wanted = std::min<uint64_t>(end_ - block_start(block), block_bytes_);
    Result<size_t> got = direct_->read_at(block_start(block), std::span(into, block_bytes_));
    lock.lock();
    const bool whole = got.ok() && *got >= wanted;
    slot.state = whole ? SlotState::kLoaded : SlotState::kFailed;
    ++(whole ? counts_.loaded : counts_.failed);
    loaded_.notify_all();
  }
}

Result<size_t> ReadAheadFile::read_at(uint64_t offset, std::span<std::byte> data) {
  if (data.empty() || offset < begin_ || offset >= end_ || data.size() > end_ - offset) {
    return cached_.read_at(offset, data);
  }
  size_t done = 0;
  while (done < data.size()) {
    const uint64_t at = offset + done;
    const uint64_t block = (at - first_) / block_bytes_;
    const size_t length = static_cast<size_t>(
        std::min<uint64_t>(data.size() - done, block_start(block) + block_bytes_ - at));
    SIESTA_ASSIGN_OR_RETURN(const size_t got,
                            read_from_block(block, at, data.subspan(done, length)));
    done += got;
    if (got < length) break;  // the file ended (it shrank under its reader)
  }
  return done;
}

Result<size_t> ReadAheadFile::read_from_block(uint64_t block, uint64_t offset,
                                              std::span<std::byte> out) {
  MutexLock lock(mutex_);
  const auto in_ring = [&]() SIESTA_REQUIRES(mutex_) {
    const Slot& slot = slot_of(block);
    return block >= released_ && slot.block == block &&
           (slot.state == SlotState::kLoaded || slot.state == SlotState::kFailed);
  };
  lock.wait(loaded_,
            [&]() SIESTA_REQUIRES(mutex_) { return block < released_ || in_ring() || abandoned_; });
  if (!in_ring()) {
    // Given back already (this byte was read before), or abandoned before it was loaded: the
    // page cache's way.
    lock.unlock();
    return cached_.read_at(offset, out);
  }
  Slot& slot = slot_of(block);
  const bool loaded = slot.state == SlotState::kLoaded;
  ++slot.readers;
  lock.unlock();
  Result<size_t> got = out.size();
  if (loaded) {
    const std::byte* from = memory_of(block) + (offset - block_start(block));
    std::memcpy(out.data(), from, out.size());
  } else {
    got = cached_.read_at(offset, out);
  }
  lock.lock();
  --slot.readers;
  slot.read += out.size();  // read or not: this part of the block is done with
  release_read_blocks();
  return got;
}

void ReadAheadFile::release_read_blocks() {
  bool any = false;
  while (released_ < next_to_load_) {
    Slot& slot = slot_of(released_);
    if (slot.state == SlotState::kLoading || slot.readers > 0 ||
        slot.read < range_bytes_in(released_)) {
      break;
    }
    slot.state = SlotState::kFree;
    ++released_;
    any = true;
  }
  if (any) {
    freed_.notify_all();
    loaded_.notify_all();  // readers of a block given back meanwhile go the cache's way
  }
}

void ReadAheadFile::abandon() {
  {
    MutexLock lock(mutex_);
    abandoned_ = true;
  }
  freed_.notify_all();
  loaded_.notify_all();
}

ReadAheadFile::Counts ReadAheadFile::counts() const {
  MutexLock lock(mutex_);
  return counts_;
}

}  // namespace siesta
