// SyntheticSession: an OffloadTarget of any size on any MemoryBackend, for measuring the
// offload path alone (bench/offload_throughput_bench.cc). No model: a session of
// `session_bytes` of device memory split into kLayers regions (as a model's per-layer K and V
// caches are), each holding data in its first `used_fraction` (as KV rows below the current
// length are), plus one host region of `host_bytes` of checkpoints (default 1 MiB; 0: none),
// saved whole. Filling a multi-GiB session this way takes a second; a real prefill of the
// same size takes minutes.
//
// create() commits the memory and fills every used byte with a pseudo-random pattern through
// the backend's staging ring, so the copies are real device copies on CUDA.
// Failure: the backend's errors (OutOfMemory...), HostVmm's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offload_target.h"

namespace siesta::bench {

class SyntheticSession final : public OffloadTarget {
 public:
  static constexpr size_t kLayers = 8;
  static constexpr size_t kRowBytes = 4096;  // extents end on a row, as KV rows do
  static constexpr size_t kDefaultHostBytes = 1u << 20;

  static Result<std::unique_ptr<SyntheticSession>> create(MemoryBackend& backend, HostVmm& host,
                                                          uint64_t session_bytes,
                                                          double used_fraction,
                                                          size_t host_bytes = kDefaultHostBytes) {
    auto session = std::unique_ptr<SyntheticSession>(new SyntheticSession(backend));
    session->region_bytes_ = session_bytes / kLayers / kRowBytes * kRowBytes;
    const uint64_t rows = session->region_bytes_ / kRowBytes;
    const auto used_rows = static_cast<uint64_t>(used_fraction * static_cast<double>(rows));
    session->used_bytes_ = std::clamp<uint64_t>(used_rows, 1, rows) * kRowBytes;
    SIESTA_ASSIGN_OR_RETURN(session->device_,
                            ReservedRange::reserve(backend, session->region_bytes_ * kLayers));
    SIESTA_RETURN_IF_ERROR(backend.commit(session->device_.range()));
    session->host_bytes_ = host_bytes;
    if (host_bytes > 0) {
      SIESTA_ASSIGN_OR_RETURN(HostRange range, host.reserve(host_bytes));
      SIESTA_RETURN_IF_ERROR(range.commit());
      session->host_ = std::make_unique<HostRange>(std::move(range));
    }
    SIESTA_RETURN_IF_ERROR(session->fill());
    return session;
  }

  // Bytes a snapshot carries (device extents + the host region), the payload both the offload
  // and its baseline move.
  uint64_t payload_bytes() const { return used_bytes_ * kLayers + host_bytes_; }
  uint64_t device_bytes() const { return device_.range().size; }

  // The used extents of every region, device ones first, as (address-or-pointer, bytes).
  struct Piece {
    bool on_device;
    DeviceAddress device;
    std::byte* host;
    uint64_t bytes;
  };
  std::vector<Piece> pieces() const {
    std::vector<Piece> out;
    for (size_t layer = 0; layer < kLayers; ++layer) {
      out.push_back({true, device_.range().base + layer * region_bytes_, nullptr, used_bytes_});
    }
    if (host_ != nullptr) out.push_back({false, 0, host_->data(), host_bytes_});
    return out;
  }

  // ---- OffloadTarget ----
  std::vector<SnapshotRegion> snapshot_regions() const override {
    std::vector<SnapshotRegion> out(kLayers + (host_ != nullptr ? 1 : 0));
    for (size_t layer = 0; layer < kLayers; ++layer) {
      SnapshotRegion& r = out[layer];
      r.layout = {"layer" + std::to_string(layer),
                  snapshot::PersistKind::kContents,
                  region_bytes_,
                  {{0, used_bytes_}}};
      r.place = SnapshotRegion::Place::kDevice;
      r.device = device_.range().base + layer * region_bytes_;
    }
    if (host_ == nullptr) return out;
    SnapshotRegion& h = out[kLayers];
    h.layout = {"checkpoints", snapshot::PersistKind::kContents, host_bytes_, {{0, host_bytes_}}};
    h.place = SnapshotRegion::Place::kHost;
    h.host = host_->data();
    return out;
  }
  std::vector<DeviceRange> device_memory() const override { return {device_.range()}; }
  std::vector<HostRange*> host_memory() override {
    if (host_ == nullptr) return {};
    return {host_.get()};
  }
  snapshot::Fingerprint fingerprint() const override {
    snapshot::Fingerprint f{};
    const uint64_t size = region_bytes_;
    std::memcpy(f.data(), &size, sizeof size);
    return f;
  }
  uint64_t history_tokens() const override { return used_bytes_ / kRowBytes; }
  Status adopt_restored_state() override { return Status::Ok(); }
  Status discard_history() override { return backend_.zero(device_.range()); }

 private:
  explicit SyntheticSession(MemoryBackend& backend) : backend_(backend) {}

  // xorshift64: incompressible enough, and cheap next to the copies.
  static void fill_pattern(std::span<std::byte> out, uint64_t& state) {
    for (size_t i = 0; i + 8 <= out.size(); i += 8) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::memcpy(out.data() + i, &state, 8);
    }
  }

  Status fill() {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    SIESTA_ASSIGN_OR_RETURN(StagingBuffer buffer, backend_.acquire_staging());
    for (const Piece& piece : pieces()) {
      if (!piece.on_device) {
        fill_pattern({piece.host, piece.bytes}, state);
        continue;
      }
      for (uint64_t done = 0; done < piece.bytes;) {
        const size_t n = std::min<uint64_t>(buffer.bytes().size(), piece.bytes - done);
        fill_pattern(buffer.bytes().first(n), state);
        SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                                backend_.copy_from_staging(buffer, n, piece.device + done));
        SIESTA_RETURN_IF_ERROR(backend_.wait(ticket));
        done += n;
      }
    }
    return backend_.synchronize();
  }

  MemoryBackend& backend_;
  uint64_t region_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  size_t host_bytes_ = 0;
  ReservedRange device_;
  std::unique_ptr<HostRange> host_;
};

}  // namespace siesta::bench
