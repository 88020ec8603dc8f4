#include "core/snapshot/record_buffer_pool.h"

#include <algorithm>
#include <utility>

namespace siesta {

std::vector<uint8_t> RecordBufferPool::take() {
  MutexLock lock(mutex_);
  if (kept_.empty()) return {};
  // kept_ is sorted by capacity, smallest first: the largest buffer is the likeliest to hold
  // a record without growing.
  std::vector<uint8_t> buffer = std::move(kept_.back());
  kept_.pop_back();
  return buffer;
}

void RecordBufferPool::give_back(std::vector<uint8_t> buffer) {
  if (buffer.capacity() == 0) return;
  MutexLock lock(mutex_);
  const auto at = std::upper_bound(
      kept_.begin(), kept_.end(), buffer.capacity(),
      [](size_t capacity, const std::vector<uint8_t>& kept) { return capacity < kept.capacity(); });
  kept_.insert(at, std::move(buffer));
}

uint64_t RecordBufferPool::kept_bytes() const {
  MutexLock lock(mutex_);
  uint64_t bytes = 0;
  for (const std::vector<uint8_t>& buffer : kept_) bytes += buffer.capacity();
  return bytes;
}

}  // namespace siesta
