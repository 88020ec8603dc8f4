// MultiRangeOffloadTarget: a session without a model whose memory is several device
// reservations and several host ranges (FakeOffloadTarget has one of each), so that a restore
// failing on the second commit of either kind has a first one to undo. Every range is one
// kContents region saved whole, filled with a pattern of (seed, range, generation);
// advance() moves every byte to the next generation, and verify() says which range differs.
// A test may also make adopt_restored_state() or discard_history() fail.
//
// Runs only on the SimBackend, whose device addresses are host pointers.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_vmm.h"
#include "core/offload/offload_target.h"
#include "tests/support/backend_test_util.h"

namespace siesta::test_util {

class MultiRangeOffloadTarget final : public OffloadTarget {
 public:
  // `device_bytes` and `host_bytes`: one entry per range. Null when any reservation or commit
  // fails.
  static std::unique_ptr<MultiRangeOffloadTarget> create(SimBackend& backend, HostVmm& host,
                                                         const std::vector<size_t>& device_bytes,
                                                         const std::vector<size_t>& host_bytes) {
    std::unique_ptr<MultiRangeOffloadTarget> target(new MultiRangeOffloadTarget());
    for (size_t bytes : device_bytes) {
      auto reserved = ReservedRange::reserve(backend, bytes);
      if (!reserved.ok() || !backend.commit(reserved->range()).ok()) return nullptr;
      target->device_.push_back(std::move(reserved).value());
      target->device_sizes_.push_back(bytes);
    }
    for (size_t bytes : host_bytes) {
      auto range = host.reserve(bytes);
      if (!range.ok() || !range->commit().ok()) return nullptr;
      target->host_.push_back(std::make_unique<HostRange>(std::move(range).value()));
    }
    target->fill();
    return target;
  }

  // A command: every byte moves to the next generation's pattern.
  void advance() {
    ++generation_;
    fill();
  }

  // "" when every range holds the current generation's pattern (all zero after a discard).
  std::string verify() const {
    for (size_t i = 0; i < ranges(); ++i) {
      const std::vector<std::byte> expected =
          discarded_ ? std::vector<std::byte>(size_of(i)) : make_pattern(size_of(i), seed_of(i));
      if (std::memcmp(expected.data(), bytes_of(i), size_of(i)) != 0) {
        return (i < device_.size() ? "device range " + std::to_string(i)
                                   : "host range " + std::to_string(i - device_.size())) +
               " differs";
      }
    }
    return "";
  }

  uint64_t generation() const { return generation_; }
  // What the next adopt_restored_state() / discard_history() returns (after doing its work).
  Status adopt_result = Status::Ok();
  Status discard_result = Status::Ok();
  uint64_t adopted = 0, discarded = 0;  // calls

  // ---- OffloadTarget ----
  std::vector<SnapshotRegion> snapshot_regions() const override {
    std::vector<SnapshotRegion> out(ranges());
    for (size_t i = 0; i < ranges(); ++i) {
      SnapshotRegion& r = out[i];
      r.layout = {"range." + std::to_string(i),
                  snapshot::PersistKind::kContents,
                  size_of(i),
                  {{0, size_of(i)}}};
      if (i < device_.size()) {
        r.place = SnapshotRegion::Place::kDevice;
        r.device = device_[i].range().base;
      } else {
        r.place = SnapshotRegion::Place::kHost;
        r.host = host_[i - device_.size()]->data();
      }
    }
    return out;
  }
  std::vector<DeviceRange> device_memory() const override {
    std::vector<DeviceRange> out;
    for (const ReservedRange& r : device_) out.push_back(r.range());
    return out;
  }
  std::vector<HostRange*> host_memory() override {
    std::vector<HostRange*> out;
    for (const std::unique_ptr<HostRange>& r : host_) out.push_back(r.get());
    return out;
  }
  snapshot::Fingerprint fingerprint() const override {
    snapshot::Fingerprint f{};
    f[0] = static_cast<uint8_t>(device_.size());
    f[1] = static_cast<uint8_t>(host_.size());
    return f;
  }
  uint64_t history_tokens() const override { return discarded_ ? 0 : generation_ + 1; }
  Status adopt_restored_state() override {
    ++adopted;
    discarded_ = false;
    return adopt_result;
  }
  Status discard_history() override {
    ++discarded;
    discarded_ = true;
    for (size_t i = 0; i < ranges(); ++i) std::memset(bytes_of(i), 0, size_of(i));
    return discard_result;
  }

 private:
  MultiRangeOffloadTarget() = default;

  size_t ranges() const { return device_.size() + host_.size(); }
  size_t size_of(size_t i) const {
    return i < device_.size() ? device_sizes_[i] : host_[i - device_.size()]->size();
  }
  std::byte* bytes_of(size_t i) const {
    // The simulator's device addresses are host addresses.
    return i < device_.size() ? reinterpret_cast<std::byte*>(  // NOLINT(performance-no-int-to-ptr)
                                    device_[i].range().base)
                              : host_[i - device_.size()]->data();
  }
  uint64_t seed_of(size_t i) const { return generation_ * 1000 + i + 1; }
  void fill() {
    discarded_ = false;
    for (size_t i = 0; i < ranges(); ++i) {
      const std::vector<std::byte> bytes = make_pattern(size_of(i), seed_of(i));
      std::memcpy(bytes_of(i), bytes.data(), bytes.size());
    }
  }

  std::vector<ReservedRange> device_;
  std::vector<size_t> device_sizes_;
  std::vector<std::unique_ptr<HostRange>> host_;
  uint64_t generation_ = 0;
  bool discarded_ = false;
};

}  // namespace siesta::test_util
