#include "core/snapshot/internal/snapshot_chunk_writer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/snapshot/internal/chunk_pipeline.h"

namespace siesta {
namespace {

using snapshot::ChunkSpan;

std::span<const std::byte> as_bytes(std::span<const uint8_t> s) { return std::as_bytes(s); }

// One chunk in flight. The calling thread fills it and submits its seal; from then until it
// retires the seal, only the worker running the seal touches it.
struct WriteSlot {
  uint64_t index = 0;
  ChunkSpan span;
  uint64_t offset = 0;  // of its record in the file
  bool device = false;
  StagingBuffer staging;  // device chunks: the copy of its bytes
  CopyTicket ticket;
  const uint8_t* plaintext = nullptr;  // host chunks; device chunks once the copy is done
  std::array<uint8_t, snapshot::kChunkHeaderBytes> chunk_header{};
  std::vector<uint8_t> record;  // encrypted: chunk header || ciphertext || tag (reused)
  snapshot::Tag tag{};          // digest: the tag alone
};

class ChunkWriter {
 public:
  ChunkWriter(const ChunkWriteJob& job, WritableFile& file) : job_(job), file_(file) {}
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;
  ~ChunkWriter() {
    if (job_.record_buffers == nullptr) return;
    for (WriteSlot& slot : slots_) job_.record_buffers->give_back(std::move(slot.record));
  }

  Result<uint64_t> run(uint64_t offset, uint64_t chunk_count) {
    std::vector<std::unique_ptr<ChunkSealer>> sealers;
    for (size_t i = 0; i < job_.threads; ++i) {
      SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkSealer> sealer,
                              make_sealer(job_.header.mode, job_.key, job_.header.file_id));
      encrypts_ = sealer->encrypts();
      sealers.push_back(std::move(sealer));
    }
    const ChunkWindow window = chunk_window(job_.threads, job_.backend);
    staging_limit_ = window.staging_limit;
    slots_.resize(window.slots);
    if (job_.record_buffers != nullptr) {
      for (WriteSlot& slot : slots_) slot.record = job_.record_buffers->take();
    }
    // Declared after slots_ (a member): destroyed first, so no seal outlives its slot.
    ChunkPipeline pipeline(std::move(sealers));
    pipeline_ = &pipeline;
    // "While it runs": the pointer goes with the pipeline on every return.
    struct Forget {
      ChunkPipeline*& pipeline;
      ~Forget() { pipeline = nullptr; }
    } forget{pipeline_};

    snapshot::ChunkWalker walker(job_.header);
    ChunkSpan span;
    chunk_count_ = chunk_count;
    for (uint64_t index = 0; walker.next(span); ++index) {
      SIESTA_RETURN_IF_ERROR(check_cancel(index));
      if (pipeline.pending() == slots_.size()) SIESTA_RETURN_IF_ERROR(retire_oldest());
      WriteSlot& slot = slots_[index % slots_.size()];
      slot.index = index;
      slot.span = span;
      slot.offset = offset;
      slot.chunk_header = snapshot::encode_chunk_header(index, span);
      const SnapshotRegion& region = job_.regions[span.region];
      slot.device = region.place == SnapshotRegion::Place::kDevice;
      if (slot.device) {
        SIESTA_RETURN_IF_ERROR(start_copy(slot, region.device + span.offset));
        slot.plaintext = nullptr;
      } else {
        slot.plaintext = reinterpret_cast<const uint8_t*>(region.host) + span.offset;
      }
      pipeline.submit([this, &slot](ChunkSealer& sealer) { return seal(slot, sealer); });
      offset += snapshot::chunk_record_layout(span.length).size;
    }
    while (pipeline.pending() > 0) SIESTA_RETURN_IF_ERROR(retire_oldest());
    return offset;
  }

 private:
  // Copies the chunk's device bytes into a staging buffer. When the ring is exhausted -- by
  // this write's own chunks in flight or by another user -- the oldest chunk is written first,
  // which gives its buffer back; with nothing in flight, it waits up to job_.staging_wait for
  // another user to give one back (holding none itself, it cannot be what that user waits
  // for), then returns the ring's error.
  Status start_copy(WriteSlot& slot, DeviceAddress source) {
    while (held_staging_ >= staging_limit_ && pipeline_->pending() > 0) {
      SIESTA_RETURN_IF_ERROR(retire_oldest());
    }
    Result<StagingBuffer> buffer = job_.backend->acquire_staging();
    while (!buffer.ok() && pipeline_->pending() > 0) {
      SIESTA_RETURN_IF_ERROR(retire_oldest());
      buffer = job_.backend->acquire_staging();
    }
    // Nothing of ours in flight: another session's pipeline holds the ring; wait for it.
    if (!buffer.ok()) {
      buffer = job_.backend->acquire_staging_waiting(job_.staging_wait);
    }
    if (!buffer.ok()) return buffer.status();
    slot.staging = std::move(buffer).value();
    ++held_staging_;
    SIESTA_ASSIGN_OR_RETURN(slot.ticket,
                            job_.backend->copy_to_staging(source, slot.span.length, slot.staging));
    return Status::Ok();
  }

  // Runs on a worker (or inline). Touches only `slot` and what is immutable during the write.
  Status seal(WriteSlot& slot, ChunkSealer& sealer) const {
    if (slot.device) {
      // Any thread may wait for a ticket (memory_backend.h); waiting here keeps the calling
      // thread free to start the next copies.
      SIESTA_RETURN_IF_ERROR(job_.backend->wait(slot.ticket));
      slot.plaintext = reinterpret_cast<const uint8_t*>(slot.staging.bytes().data());
    }
    const uint32_t length = slot.span.length;
    const std::span<const uint8_t> plaintext(slot.plaintext, length);
    const std::vector<uint8_t> aad =
        snapshot::record_aad(job_.header.file_id, job_.header_digest, slot.chunk_header);
    if (!encrypts_) {
      // The digest leaves the plaintext as it is: it is written straight from where it lies.
      return sealer.seal(SealDomain::kChunk, slot.index, aad, plaintext,
                         {const_cast<uint8_t*>(slot.plaintext), length}, slot.tag);
    }
    const snapshot::ChunkRecordLayout layout = snapshot::chunk_record_layout(length);
    slot.record.resize(layout.size);
    std::memcpy(slot.record.data(), slot.chunk_header.data(), slot.chunk_header.size());
    snapshot::Tag tag{};
    SIESTA_RETURN_IF_ERROR(sealer.seal(SealDomain::kChunk, slot.index, aad, plaintext,
                                       {slot.record.data() + layout.payload_at, length}, tag));
    std::memcpy(slot.record.data() + layout.tag_at, tag.data(), tag.size());
    return Status::Ok();
  }

  static bool raised(const std::atomic<bool>* flag) {
    return flag != nullptr && flag->load(std::memory_order_acquire);
  }

  // Checked before a chunk is sealed and again before it is written, so that a command waits
  // for at most the chunks being sealed (one per thread) and the one being written.
  Status check_cancel(uint64_t chunks_done) const {
    if (!raised(job_.cancel) && !raised(job_.cancel_also)) return Status::Ok();
    return Cancelled(job_.name + " cancelled after " + std::to_string(chunks_done) + " of " +
                     std::to_string(chunk_count_) + " chunks");
  }

  // Waits for the oldest chunk's seal and writes it at its offset.
  Status retire_oldest() {
    WriteSlot& slot = slots_[retired_ % slots_.size()];
    SIESTA_RETURN_IF_ERROR(check_cancel(retired_));
    ++retired_;
    SIESTA_RETURN_IF_ERROR(pipeline_->retire());
    const snapshot::ChunkRecordLayout layout = snapshot::chunk_record_layout(slot.span.length);
    if (encrypts_) {
      SIESTA_RETURN_IF_ERROR(file_.write_at(slot.offset, as_bytes(slot.record)));
    } else {
      SIESTA_RETURN_IF_ERROR(file_.write_at(slot.offset, as_bytes(slot.chunk_header)));
      SIESTA_RETURN_IF_ERROR(file_.write_at(slot.offset + layout.payload_at,
                                            as_bytes({slot.plaintext, slot.span.length})));
      SIESTA_RETURN_IF_ERROR(file_.write_at(slot.offset + layout.tag_at, as_bytes(slot.tag)));
    }
    if (slot.device) {
      slot.staging.reset();
      --held_staging_;
    }
    keep_writeback_window(slot.offset + layout.size);
    return Status::Ok();
  }

  // Starts the write-back of everything written up to `end` and waits for what lies more
  // than the job's window behind it, so that at most the window is dirty. Without this the
  // kernel lets gigabytes pile up and then throttles a write() for as long as it likes --
  // time a cancelling command waits for (the chunk being written when it arrives) -- and the
  // final fdatasync writes everything at once while the disk sat idle during the chunks.
  void keep_writeback_window(uint64_t end) {
    file_.start_writeback(started_to_, end - started_to_);
    started_to_ = end;
    if (end > waited_to_ + job_.writeback_window) {
      const uint64_t until = end - job_.writeback_window;
      file_.wait_writeback(waited_to_, until - waited_to_);
      waited_to_ = until;
    }
  }

  const ChunkWriteJob& job_;
  WritableFile& file_;
  bool encrypts_ = false;
  uint64_t chunk_count_ = 0;
  size_t staging_limit_ = 0;
  size_t held_staging_ = 0;
  uint64_t retired_ = 0;
  uint64_t started_to_ = 0;  // write-back started for [0, started_to_): header and chunks so far
  uint64_t waited_to_ = 0;   // write-back waited for over [0, waited_to_)
  std::vector<WriteSlot> slots_;
  ChunkPipeline* pipeline_ = nullptr;  // run()'s, while it runs
};

}  // namespace

Result<uint64_t> write_snapshot_chunks(const ChunkWriteJob& job, WritableFile& file,
                                       uint64_t first_offset, uint64_t chunk_count) {
  if (job.threads == 0) return Internal("snapshot writer: no sealing thread");
  ChunkWriter writer(job, file);
  return writer.run(first_offset, chunk_count);
}

}  // namespace siesta
