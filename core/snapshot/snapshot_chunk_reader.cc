#include "core/snapshot/internal/snapshot_chunk_reader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "core/memory/device_copy.h"
#include "core/snapshot/internal/chunk_pipeline.h"

namespace siesta {
namespace {

using snapshot::ChunkSpan;

// Device chunks whose destinations follow one another share a staging buffer, each chunk's
// plaintext at its place in the run, and go to the device in one copy once every chunk placed
// in the run has retired (a chunk placed later starts a new run).
// One buffer and one copy per chunk made the calling thread's per-chunk work (lend a buffer,
// start a copy, wait for the oldest) the bound of a small restore: an 8 MiB one in 256 KiB
// chunks spent ~25 us a chunk there, serially, on the H100 machine.
// A run holds up to kRunBytes (or one chunk, when chunks are larger): big enough that copies
// are few, small enough that the first copies start while later chunks are still read.
constexpr size_t kRunBytes = size_t{2} << 20;

struct StagingRun {
  StagingBuffer staging;
  DeviceAddress device = 0;  // where its first byte goes
  size_t bytes = 0;          // placed so far
  size_t chunks = 0;         // placed so far
  size_t retired = 0;        // of those, retired
};

// One chunk in flight. The calling thread places it (offset, destination, its run) and
// submits it; from then until it retires it, only the worker reading and opening it touches
// the slot. The payload is read straight into its destination (host memory, or its place in
// its run's staging buffer) and opened there in place: no record buffer, one pass over the
// bytes fewer than reading the record whole and opening it into the destination.
struct ReadSlot {
  uint64_t index = 0;
  ChunkSpan span;
  uint64_t offset = 0;        // of its record in the file
  StagingRun* run = nullptr;  // device chunks: the run holding its plaintext
  std::array<uint8_t, snapshot::kChunkHeaderBytes> chunk_header{};
  snapshot::Tag tag{};
  uint8_t* destination = nullptr;
};

// A run on its way from its staging buffer to the device.
struct Copy {
  StagingBuffer staging;
  CopyTicket ticket;
};

std::string chunk_name(const std::string& name, uint64_t index) {
  return name + " chunk " + std::to_string(index);
}

class ChunkReader {
 public:
  ChunkReader(const ChunkReadJob& job, ReadableFile& file) : job_(job), file_(file) {}
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  ~ChunkReader() = default;

  Result<uint64_t> run(uint64_t offset) {
    std::vector<std::unique_ptr<ChunkSealer>> sealers;
    // One per worker, and one for this thread (oversized chunks; chunks it runs while waiting).
    for (size_t i = 0; i <= job_.threads; ++i) {
      SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkSealer> sealer,
                              make_sealer(job_.header.mode, job_.key, job_.header.file_id));
      sealers.push_back(std::move(sealer));
    }
    own_sealer_ = std::move(sealers.back());
    sealers.pop_back();
    const ChunkWindow window = chunk_window(job_.threads, job_.backend);
    staging_limit_ = window.staging_limit;
    slots_.resize(window.slots);
    // Declared after slots_ and copies_ (members): destroyed first, so no opening outlives the
    // memory it writes.
    ChunkPipeline pipeline(std::move(sealers));
    // Destroyed before the pipeline, whose destructor waits for the running chunks: a read
    // that ends in failure tells the job first, so that no chunk still running waits for bytes
    // that will not be read.
    struct TellFailure {
      const ChunkReadJob& job;
      bool failed = true;  // until the read succeeds
      ~TellFailure() {
        if (failed && job.on_failure) job.on_failure();
      }
    } tell_failure{job_};
    pipeline_ = &pipeline;
    // "While it runs": the pointer goes with the pipeline on every return.
    struct Forget {
      ChunkPipeline*& pipeline;
      ~Forget() { pipeline = nullptr; }
    } forget{pipeline_};

    snapshot::ChunkWalker walker(job_.header);
    ChunkSpan span;
    for (uint64_t index = 0; walker.next(span); ++index) {
      if (pipeline.pending() == slots_.size()) SIESTA_RETURN_IF_ERROR(retire_oldest());
      // Slots go round in submission order (an oversized chunk is not submitted).
      ReadSlot& slot = slots_[submitted_ % slots_.size()];
      slot.index = index;
      slot.span = span;
      slot.offset = offset;
      offset += snapshot::chunk_record_layout(span.length).size;
      const SnapshotRegion& region = job_.regions[span.region];
      slot.run = nullptr;
      if (region.place != SnapshotRegion::Place::kDevice) {
        slot.destination = reinterpret_cast<uint8_t*>(region.host) + span.offset;
      } else if (span.length > job_.backend->staging_buffer_bytes()) {
        SIESTA_RETURN_IF_ERROR(restore_oversized(slot, region.device + span.offset));
        continue;
      } else {
        SIESTA_RETURN_IF_ERROR(place_in_run(slot, region.device + span.offset));
      }
      pipeline.submit([this, &slot](ChunkSealer& sealer) { return fetch_and_open(slot, sealer); });
      ++submitted_;
    }
    SIESTA_RETURN_IF_ERROR(finish_all());
    tell_failure.failed = false;
    return offset;
  }

 private:
  // Reads exactly the record; a short read means the file shrank under us.
  Status read_exact(uint64_t offset, std::span<uint8_t> out, uint64_t index) const {
    Result<size_t> read = file_.read_at(offset, std::as_writable_bytes(out));
    if (!read.ok()) return read.status().with_context(chunk_name(job_.name, index));
    const size_t got = *read;
    if (got != out.size()) {
      return Truncated(chunk_name(job_.name, index) + " ends at byte " +
                       std::to_string(offset + got) + ", expected " +
                       std::to_string(offset + out.size()));
    }
    return Status::Ok();
  }

  // Runs on a worker (or inline; or here, for an oversized chunk). Touches only `slot`, its
  // destination, the file (read_at is safe from several threads) and what is immutable
  // during the read. Three reads of the record (its header, its payload into the destination,
  // its tag): the two small ones cost about a microsecond each from the page cache. A failure
  // is told to the job at once (ChunkReadJob::on_failure), here on the thread that sees it.
  Status fetch_and_open(ReadSlot& slot, ChunkSealer& sealer) const {
    Status opened = fetch_and_open_once(slot, sealer);
    if (!opened.ok() && job_.on_failure) job_.on_failure();
    return opened;
  }
  Status fetch_and_open_once(ReadSlot& slot, ChunkSealer& sealer) const {
    const uint32_t length = slot.span.length;
    const snapshot::ChunkRecordLayout layout = snapshot::chunk_record_layout(length);
    SIESTA_RETURN_IF_ERROR(read_exact(slot.offset, slot.chunk_header, slot.index));
    Status placed = snapshot::check_chunk_header(slot.chunk_header, slot.index, slot.span);
    if (!placed.ok()) {
      return Status(placed.code(), chunk_name(job_.name, slot.index) + " " + placed.message());
    }
    const std::span<uint8_t> payload(slot.destination, length);
    SIESTA_RETURN_IF_ERROR(read_exact(slot.offset + layout.payload_at, payload, slot.index));
    SIESTA_RETURN_IF_ERROR(read_exact(slot.offset + layout.tag_at, slot.tag, slot.index));
    const std::vector<uint8_t> aad =
        snapshot::record_aad(job_.header.file_id, job_.header_digest, slot.chunk_header);
    Status opened = sealer.open(SealDomain::kChunk, slot.index, aad, payload, slot.tag, payload);
    return opened.ok() ? opened : opened.with_context(chunk_name(job_.name, slot.index));
  }

  // Places a device chunk going to `device` in the newest run when it continues that run's
  // destination and fits, else in a new run with a staging buffer of its own. (A run still in
  // runs_ has a chunk in flight: one whose chunks have all retired was copied and removed.)
  Status place_in_run(ReadSlot& slot, DeviceAddress device) {
    const size_t length = slot.span.length;
    const size_t limit =
        std::min(job_.backend->staging_buffer_bytes(), std::max<size_t>(kRunBytes, length));
    if (runs_.empty() || runs_.back().device + runs_.back().bytes != device ||
        runs_.back().bytes + length > limit) {
      SIESTA_ASSIGN_OR_RETURN(StagingBuffer staging, lend_staging());
      runs_.push_back(StagingRun{std::move(staging), device, 0, 0, 0});
    }
    StagingRun& run = runs_.back();
    slot.run = &run;
    slot.destination = reinterpret_cast<uint8_t*>(run.staging.bytes().data()) + run.bytes;
    run.bytes += length;
    ++run.chunks;
    return Status::Ok();
  }

  // Lends a staging buffer for a run. When this read holds as many as the ring has, or the
  // ring is exhausted by another user, the oldest copies and chunks are finished first, which
  // gives buffers back; with none left to finish, it waits up to job_.staging_wait for another
  // user to give one back, then returns the ring's error.
  Result<StagingBuffer> lend_staging() {
    while (held_staging_ >= staging_limit_) {
      SIESTA_ASSIGN_OR_RETURN(const bool freed, free_one());
      if (!freed) break;
    }
    Result<StagingBuffer> buffer = job_.backend->acquire_staging();
    while (!buffer.ok()) {
      SIESTA_ASSIGN_OR_RETURN(const bool freed, free_one());
      if (!freed) {
        // Nothing of ours to finish: another session's pipeline holds the ring; wait for it.
        buffer = job_.backend->acquire_staging_waiting(job_.staging_wait);
        if (!buffer.ok()) return buffer.status();
        break;
      }
      buffer = job_.backend->acquire_staging();
    }
    ++held_staging_;
    return buffer;
  }

  // A device chunk larger than a staging buffer: after everything before it, opened here into
  // a bounce buffer and copied through the ring with copy_host_to_device.
  Status restore_oversized(ReadSlot& slot, DeviceAddress destination) {
    SIESTA_RETURN_IF_ERROR(finish_all());
    bounce_.resize(slot.span.length);
    slot.destination = bounce_.data();
    SIESTA_RETURN_IF_ERROR(fetch_and_open(slot, *own_sealer_));
    return copy_host_to_device(*job_.backend, std::as_bytes(std::span(bounce_)), destination);
  }

  // Waits for the oldest chunk's opening; when it is the last placed in its run, the run's
  // copy to the device starts now.
  Status retire_oldest() {
    ReadSlot& slot = slots_[retired_ % slots_.size()];
    ++retired_;
    // While it waits, this thread reads and opens chunks the pool has not come for yet.
    SIESTA_RETURN_IF_ERROR(pipeline_->retire(own_sealer_.get()));
    if (slot.run == nullptr || ++slot.run->retired < slot.run->chunks) return Status::Ok();
    StagingRun& run = runs_.front();  // runs retire in order: the slot's is the oldest
    if (slot.run != &run) return Internal(chunk_name(job_.name, slot.index) + " is out of its run");
    SIESTA_ASSIGN_OR_RETURN(const CopyTicket ticket,
                            job_.backend->copy_from_staging(run.staging, run.bytes, run.device));
    copies_.push_back(Copy{std::move(run.staging), ticket});
    runs_.pop_front();
    return Status::Ok();
  }

  // Waits for the oldest device copy and gives its staging buffer back.
  Status drain_one() {
    Status waited = job_.backend->wait(copies_.front().ticket);
    copies_.pop_front();
    --held_staging_;
    return waited;
  }

  // Frees one staging buffer's worth of work: the oldest copy, else the oldest chunk (whose
  // copy is then finished next time). Returns false when nothing is in flight.
  Result<bool> free_one() {
    if (!copies_.empty()) {
      SIESTA_RETURN_IF_ERROR(drain_one());
      return true;
    }
    if (pipeline_->pending() == 0) return false;
    SIESTA_RETURN_IF_ERROR(retire_oldest());
    return true;
  }

  Status finish_all() {
    while (pipeline_->pending() > 0) SIESTA_RETURN_IF_ERROR(retire_oldest());
    while (!copies_.empty()) SIESTA_RETURN_IF_ERROR(drain_one());
    return Status::Ok();
  }

  const ChunkReadJob& job_;
  ReadableFile& file_;
  std::unique_ptr<ChunkSealer> own_sealer_;
  size_t staging_limit_ = 0;
  size_t held_staging_ = 0;
  uint64_t submitted_ = 0;
  uint64_t retired_ = 0;
  std::vector<ReadSlot> slots_;
  std::deque<StagingRun> runs_;  // oldest first; slots point into it (a deque keeps them put)
  std::deque<Copy> copies_;
  std::vector<uint8_t> bounce_;
  ChunkPipeline* pipeline_ = nullptr;  // run()'s, while it runs
};

}  // namespace

Result<uint64_t> read_snapshot_chunks(const ChunkReadJob& job, ReadableFile& file,
                                      uint64_t first_offset) {
  if (job.threads == 0) return Internal("snapshot reader: no verifying thread");
  ChunkReader reader(job, file);
  return reader.run(first_offset);
}

}  // namespace siesta
