#include "core/offload/pinned_ram_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <string>
#include <utility>

#include "core/base/os_error.h"
#include "core/base/round_up.h"
#include "core/memory/host_address_space.h"

namespace siesta {
Result<std::unique_ptr<PinnedRamPool>> PinnedRamPool::create(MemoryBackend& backend,
                                                             uint64_t budget_bytes,
                                                             uint64_t chunk_bytes) {
  if (budget_bytes == 0 || chunk_bytes == 0 || chunk_bytes % host_address_space::page_size() != 0) {
    return InvalidArgument("pinned RAM pool: a budget of " + std::to_string(budget_bytes) +
                           " bytes in chunks of " + std::to_string(chunk_bytes) +
                           " (both > 0, chunks whole pages)");
  }
  // A budget smaller than a chunk is one chunk of its own size: never more pinned than asked.
  chunk_bytes = std::min(chunk_bytes, round_up(budget_bytes, host_address_space::page_size()));
  // The last chunk may be shorter: never more than the budget is prepared.
  const uint64_t reserved = round_up(budget_bytes, host_address_space::page_size());
  // Address space only: no access, no memory, no swap charged, until a chunk is prepared.
  void* range =
      ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) {
    const Status failed = status_from_errno(
        errno, "pinned RAM pool: reserving " + std::to_string(reserved) + " bytes of addresses");
    return OutOfMemory(failed.message());
  }
  return std::unique_ptr<PinnedRamPool>(
      new PinnedRamPool(backend, static_cast<std::byte*>(range), reserved, chunk_bytes));
}

PinnedRamPool::PinnedRamPool(MemoryBackend& backend, std::byte* base, uint64_t reserved,
                             uint64_t chunk)
    : backend_(backend), base_(base), reserved_(reserved), chunk_(chunk) {
  counts_.reserved_bytes = reserved;
  {
    // The first chunk before anything can ask for it: a server's first offload finds room.
    MutexLock lock(mu_);
    grow_one();
  }
  preparer_ = std::thread([this] { prepare_loop(); });
}

PinnedRamPool::~PinnedRamPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  preparer_.join();
  MutexLock lock(mu_);
  for (uint64_t at = 0; at < ready_; at += chunk_) backend_.unregister_host(base_ + at);
  (void)::munmap(base_, reserved_);
}

uint64_t PinnedRamPool::used_top() const {
  return used_.empty() ? 0 : std::prev(used_.end())->first + std::prev(used_.end())->second;
}

uint64_t PinnedRamPool::wanted_bytes() const {
  const uint64_t ahead = std::max(chunk_, round_up(largest_asked_, chunk_));
  return std::min(reserved_, round_up(used_top(), chunk_) + ahead);
}

void PinnedRamPool::prepare_loop() {
  MutexLock lock(mu_);
  for (;;) {
    lock.wait(cv_,
              [&]() SIESTA_REQUIRES(mu_) { return stopping_ || should_grow() || should_shrink(); });
    if (stopping_) return;
    if (should_grow()) {
      grow_one();
    } else {
      shrink_one();
    }
  }
}

bool PinnedRamPool::should_grow() const { return !growth_stopped_ && ready_ < wanted_bytes(); }

// Given back only when two chunks or more beyond what is wanted are prepared (one spare stays),
// so that a block coming and going at the edge does not pin and unpin a chunk every time. The
// blocks all lie below what is wanted, so the top chunk is then wholly free.
bool PinnedRamPool::should_shrink() const { return ready_ >= wanted_bytes() + 2 * chunk_; }

void PinnedRamPool::grow_one() {
  std::byte* chunk = base_ + ready_;
  const uint64_t size = std::min(chunk_, reserved_ - ready_);
  mu_.unlock();
  // Accessible, then registered (on CUDA: pinned, its pages faulted in and locked).
  Status prepared = ::mprotect(chunk, size, PROT_READ | PROT_WRITE) == 0
                        ? Status::Ok()
                        : status_from_errno(errno, "pinned RAM pool: mprotect");
  if (prepared.ok()) prepared = backend_.register_host({chunk, size});
  if (!prepared.ok()) (void)::mprotect(chunk, size, PROT_NONE);
  mu_.lock();
  if (!prepared.ok()) {
    growth_stopped_ = true;  // the tier stays at what is prepared
    ++counts_.register_failures;
    return;
  }
  // The new chunk joins the free run that ends where it starts, if any.
  uint64_t start = ready_;
  uint64_t length = size;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == ready_) {
      start = last->first;
      length += last->second;
      free_.erase(last);
    }
  }
  free_[start] = length;
  ready_ += size;
  ++counts_.chunks_prepared;
}

void PinnedRamPool::shrink_one() {
  auto last = std::prev(free_.end());  // the free run at the top, covering the top chunk
  const uint64_t top = (ready_ - 1) / chunk_ * chunk_;  // the last chunk may be shorter
  const uint64_t size = ready_ - top;
  if (last->second == size) {
    free_.erase(last);
  } else {
    last->second -= size;
  }
  ready_ = top;
  ++counts_.chunks_given_back;
  std::byte* chunk = base_ + top;
  // Nothing hands out the chunk any more: its registration and pages go without the mutex.
  mu_.unlock();
  backend_.unregister_host(chunk);
  (void)::madvise(chunk, size, MADV_DONTNEED);  // the pages are the system's again
  (void)::mprotect(chunk, size, PROT_NONE);
  mu_.lock();
}

void PinnedRamPool::expect(uint64_t bytes) {
  const uint64_t length = std::min(reserved_, round_up(bytes, host_address_space::page_size()));
  MutexLock lock(mu_);
  if (length <= largest_asked_) return;
  largest_asked_ = length;
  cv_.notify_all();  // prepare room for it ahead
}

Result<std::byte*> PinnedRamPool::map(size_t bytes) {
  if (bytes == 0) return InvalidArgument("pinned RAM pool: a block of 0 bytes");
  const uint64_t length = round_up(bytes, host_address_space::page_size());
  MutexLock lock(mu_);
  largest_asked_ = std::max(largest_asked_, length);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const uint64_t at = it->first;
    const uint64_t left = it->second - length;
    free_.erase(it);
    if (left > 0) free_[at + length] = left;
    used_[at] = length;
    counts_.used_bytes += length;
    cv_.notify_all();  // the top moved: more may be wanted ahead
    return base_ + at;
  }
  ++counts_.refused_not_ready;
  cv_.notify_all();  // prepare room for this size
  return OutOfMemory("RAM tier: " + std::to_string(length) + " bytes of pinned memory not ready (" +
                     std::to_string(ready_) + " of " + std::to_string(reserved_) +
                     " prepared; more is being prepared)");
}

void PinnedRamPool::unmap(std::byte* pages, size_t bytes) {
  (void)bytes;  // the block's own length is known
  MutexLock lock(mu_);
  const uint64_t at = static_cast<uint64_t>(pages - base_);
  auto used = used_.find(at);
  if (used == used_.end()) return;  // not one of ours: a bug of the caller, nothing to free
  uint64_t start = at;
  uint64_t length = used->second;
  counts_.used_bytes -= length;
  used_.erase(used);
  // Merged with the free runs on either side.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      length += before->second;
      free_.erase(before);
    }
  }
  free_[start] = length;
  cv_.notify_all();  // the top may be free now
}

uint64_t PinnedRamPool::contiguous_bytes(const std::byte* at) const {
  const uint64_t offset = static_cast<uint64_t>(at - base_);
  return std::min(chunk_ - offset % chunk_, reserved_ - offset);
}

uint64_t PinnedRamPool::ready_bytes() const {
  MutexLock lock(mu_);
  return ready_;
}

PinnedRamPoolStats PinnedRamPool::stats() const {
  MutexLock lock(mu_);
  PinnedRamPoolStats out = counts_;
  out.ready_bytes = ready_;
  return out;
}

}  // namespace siesta
