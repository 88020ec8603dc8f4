// FakeOffloadTarget: a session without a model, for testing the Offloader in core alone. Its
// state is a length and bytes that are a pure function of (position, seed), written as a
// session would write them:
//   device "rows"     kContents  row p (kRowBytes) written when position p is added
//   device "table"    kReinit    a fixed pattern, rewritten by adopt/discard
//   device "scratch"  kDiscard   overwritten by every advance()
//   host   "meta"     kContents  the length (8 bytes, always saved)
//   host   "history"  kContents  one byte per position
// verify() reads everything back and says what differs, so a restore that loses or corrupts a
// byte is seen. rewind() cuts the history, as a prompt that diverges does; the positions it
// cuts are written again in a new epoch, with other bytes, so a restore that brings back a
// row from before the rewind is seen too. Delta saves: snapshot_regions_after() lists the
// rows and history added since the unchanged length, take_unchanged_tokens() reports the
// lowest length since its last call. Runs only on the SimBackend, whose device addresses are
// host pointers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_vmm.h"
#include "core/offload/offload_target.h"

namespace siesta::test_util {

class FakeOffloadTarget final : public OffloadTarget {
 public:
  static constexpr size_t kRowBytes = 1024;
  static constexpr uint64_t kMetaMagic = 0x5349455354414641ull;  // "SIESTAFA"

  // `positions`: capacity. REQUIRES: backend granularity divides nothing in particular.
  static std::unique_ptr<FakeOffloadTarget> create(SimBackend& backend, HostVmm& host,
                                                   uint32_t positions, uint64_t seed = 1) {
    auto target = std::unique_ptr<FakeOffloadTarget>(new FakeOffloadTarget(backend, seed));
    target->positions_ = positions;
    target->written_in_.assign(positions, 0);
    const size_t device_bytes = rows_bytes(positions) + 2 * kTableBytes;
    auto reserved = ReservedRange::reserve(backend, device_bytes);
    if (!reserved.ok() || !backend.commit(reserved->range()).ok()) return nullptr;
    target->device_ = std::move(reserved).value();
    auto range = host.reserve(16 + positions);
    if (!range.ok() || !range->commit().ok()) return nullptr;
    target->host_ = std::make_unique<HostRange>(std::move(range).value());
    if (!target->discard_history().ok()) return nullptr;
    return target;
  }

  // A command: appends `count` positions.
  void advance(uint32_t count) {
    for (uint32_t i = 0; i < count && length_ < positions_; ++i, ++length_) {
      std::memset(scratch(), static_cast<int>(length_), kTableBytes);
      written_in_[length_] = epoch_;
      fill_row(length_, rows() + size_t{length_} * kRowBytes);
      history()[length_] = byte_at(length_, 0);
    }
    write_meta();
  }

  // A command: cuts the history to `length` positions (no longer than it is); the positions
  // past it are written with other bytes when advance() reaches them again.
  void rewind(uint32_t length) {
    length_ = std::min(length_, length);
    unchanged_ = std::min(unchanged_, length_);
    ++epoch_;
    write_meta();
  }

  // "" when every saved and re-initialised byte is what the length implies.
  std::string verify() const {
    uint64_t meta[2];
    std::memcpy(meta, host_->data(), sizeof meta);
    if (meta[0] != kMetaMagic || meta[1] != length_) return "meta differs";
    std::vector<uint8_t> row(kRowBytes);
    for (uint32_t p = 0; p < length_; ++p) {
      fill_row(p, row.data());
      if (std::memcmp(row.data(), rows() + size_t{p} * kRowBytes, kRowBytes) != 0) {
        return "row " + std::to_string(p) + " differs";
      }
      if (history()[p] != byte_at(p, 0)) return "history byte " + std::to_string(p) + " differs";
    }
    for (size_t i = 0; i < kTableBytes; ++i) {
      if (table()[i] != static_cast<uint8_t>(i * 7 + 3)) return "reinit table differs";
    }
    return "";
  }

  uint32_t length() const { return length_; }
  uint64_t committed_device_bytes() const { return device_.range().size; }
  uint64_t adopted = 0, discarded = 0;  // calls, for tests
  // With marks on, mark_device_work() counts a mark and wait_for_marked_work() answers that
  // the session's work is done (as a session whose every operation finished would) instead
  // of letting the Offloader synchronize the device.
  bool marks = false;
  uint64_t marks_made = 0, marked_waits = 0;

  // ---- OffloadTarget ----
  std::vector<SnapshotRegion> snapshot_regions() const override {
    return snapshot_regions_after(0);
  }
  uint64_t take_unchanged_tokens() override { return std::exchange(unchanged_, length_); }
  void mark_device_work() override { marks_made += marks ? 1 : 0; }
  Result<bool> wait_for_marked_work() override {
    if (!marks || marks_made == 0) return false;
    ++marked_waits;
    return true;
  }
  std::vector<SnapshotRegion> snapshot_regions_after(uint64_t unchanged_tokens) const override {
    const uint64_t from = std::min<uint64_t>(unchanged_tokens, length_);
    using snapshot::PersistKind;
    std::vector<SnapshotRegion> out(5);
    auto device_region = [&](SnapshotRegion& r, const char* name, PersistKind kind, uint8_t* at,
                             uint64_t size, uint64_t start, uint64_t used) {
      r.layout = {name, kind, size, {}};
      if (used > start) r.layout.extents.push_back({start, used - start});
      r.place = SnapshotRegion::Place::kDevice;
      r.device = reinterpret_cast<DeviceAddress>(at);
    };
    auto host_region = [&](SnapshotRegion& r, const char* name, uint8_t* at, uint64_t size,
                           uint64_t start, uint64_t used) {
      r.layout = {name, PersistKind::kContents, size, {}};
      if (used > start) r.layout.extents.push_back({start, used - start});
      r.place = SnapshotRegion::Place::kHost;
      r.host = reinterpret_cast<std::byte*>(at);
    };
    device_region(out[0], "rows", PersistKind::kContents, rows(), rows_bytes(positions_),
                  from * kRowBytes, uint64_t{length_} * kRowBytes);
    device_region(out[1], "table", PersistKind::kReinit, table(), kTableBytes, 0, 0);
    device_region(out[2], "scratch", PersistKind::kDiscard, scratch(), kTableBytes, 0, 0);
    host_region(out[3], "meta", reinterpret_cast<uint8_t*>(host_->data()), 16, 0, 16);
    host_region(out[4], "history", history(), positions_, from, length_);
    return out;
  }
  std::vector<DeviceRange> device_memory() const override { return {device_.range()}; }
  std::vector<HostRange*> host_memory() override { return {host_.get()}; }
  snapshot::Fingerprint fingerprint() const override {
    snapshot::Fingerprint f{};
    f[0] = static_cast<uint8_t>(positions_);
    f[1] = static_cast<uint8_t>(seed_);
    return f;
  }
  uint64_t history_tokens() const override { return length_; }
  Status adopt_restored_state() override {
    ++adopted;
    uint64_t meta[2];
    std::memcpy(meta, host_->data(), sizeof meta);
    if (meta[0] != kMetaMagic || meta[1] > positions_) return Corrupt("fake meta is impossible");
    length_ = static_cast<uint32_t>(meta[1]);
    unchanged_ = 0;  // replaced, as Session's
    fill_table();
    return Status::Ok();
  }
  Status discard_history() override {
    ++discarded;
    length_ = 0;
    unchanged_ = 0;
    ++epoch_;
    std::memset(rows(), 0, rows_bytes(positions_));
    std::memset(history(), 0, positions_);
    write_meta();
    fill_table();
    return Status::Ok();
  }

 private:
  static constexpr size_t kTableBytes = 4096;
  FakeOffloadTarget(SimBackend& backend, uint64_t seed) : backend_(backend), seed_(seed) {}
  static size_t rows_bytes(uint32_t positions) { return size_t{positions} * kRowBytes; }

  // The byte `i` of position `position` as last written (its epoch).
  uint8_t byte_at(uint32_t position, size_t i) const {
    uint64_t x = (seed_ * 0x9E3779B97F4A7C15ull) ^ (uint64_t{position} << 20) ^ i ^
                 (uint64_t{written_in_[position]} << 44);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return static_cast<uint8_t>(x >> 56);
  }
  void fill_row(uint32_t position, uint8_t* out) const {
    for (size_t i = 0; i < kRowBytes; ++i) out[i] = byte_at(position, i);
  }
  void fill_table() {
    for (size_t i = 0; i < kTableBytes; ++i) table()[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  void write_meta() {
    const uint64_t meta[2] = {kMetaMagic, length_};
    std::memcpy(host_->data(), meta, sizeof meta);
  }
  // The simulator's device addresses are host addresses.
  uint8_t* rows() const {
    return reinterpret_cast<uint8_t*>(device_.range().base);  // NOLINT(performance-no-int-to-ptr)
  }
  uint8_t* table() const { return rows() + rows_bytes(positions_); }
  uint8_t* scratch() const { return table() + kTableBytes; }
  uint8_t* history() const { return reinterpret_cast<uint8_t*>(host_->data()) + 16; }

  SimBackend& backend_;
  uint64_t seed_;
  uint32_t positions_ = 0;
  uint32_t length_ = 0;
  uint32_t unchanged_ = 0;  // the lowest length since take_unchanged_tokens()
  uint32_t epoch_ = 0;      // advanced by rewind() and discard_history()
  // Per position, the epoch it was last written in (plain memory: the truth verify() checks
  // the restored bytes against).
  std::vector<uint32_t> written_in_;
  ReservedRange device_;
  std::unique_ptr<HostRange> host_;
};

}  // namespace siesta::test_util
