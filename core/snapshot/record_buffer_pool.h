// RecordBufferPool: the chunk record buffers of snapshot writes, kept from one to the next.
//
// Why: a write holds one record buffer per chunk in flight (threads + 1, or the staging ring's
// count: about 20 MiB with the defaults). Allocated afresh each time, their pages are faulted
// in again by every save, and on a VM a fresh page costs about 1 ms per MiB: on the H200 a
// restore of 18 MB, when reads still used such buffers, spent 12.8 ms, 1.4 GB/s against a
// 6 GB/s baseline (docs/PERFORMANCE.md). One pool serves every conversation of the engine
// (Offloader::Deps::record_buffers; an Offloader without one keeps its own), so the buffers
// stay mapped between saves, and what it keeps, kept_bytes(), is bounded by the saves that run
// at once rather than by the conversations kept. (Reads need none: each chunk's payload is read
// straight into its destination.)
//
// Thread rule: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"

namespace siesta {

class RecordBufferPool {
 public:
  // A buffer given back earlier, the largest first, or an empty one when none is kept. Its
  // size and contents are whatever they were; the caller resizes it.
  std::vector<uint8_t> take() SIESTA_EXCLUDES(mutex_);

  // Keeps `buffer` (its capacity) for a later take(); an empty one is dropped.
  void give_back(std::vector<uint8_t> buffer) SIESTA_EXCLUDES(mutex_);

  // Capacity of the buffers kept now, in bytes.
  uint64_t kept_bytes() const SIESTA_EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  std::vector<std::vector<uint8_t>> kept_ SIESTA_GUARDED_BY(mutex_);
};

}  // namespace siesta
