// cuda_offload: a CUDA engine's session handed to siesta. Its "KV cache" lives in device memory
// it reserves through siesta's CUDA VMM backend (cuMemAddressReserve; mapped with cuMemMap), and
// a kernel writes one 256-byte row per token there. After a second without a command the
// Offloader saves the rows to a sealed snapshot and releases the physical memory (the address
// stays reserved: a CUDA graph or a stored pointer stays valid); the next command maps fresh
// memory at the same address and reads the snapshot back. The rows are then checked on the
// host. docs/EMBEDDING.md walks through each step; examples/host_offload is the same on the
// simulator.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "core/offload/offloader.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

using namespace siesta;

constexpr size_t kRowBytes = 256, kMaxTokens = 1 << 16;  // 16 MiB of "KV"

// The engine's kernel: row p holds byte (p * 31 + 7) & 0xff, for p in [from, to).
__global__ void write_rows(uint8_t* kv, uint64_t from, uint64_t to) {
  const uint64_t i = from * kRowBytes + blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < to * kRowBytes) kv[i] = static_cast<uint8_t>((i / kRowBytes) * 31 + 7);
}

class KvSession final : public OffloadTarget {
 public:
  KvSession(CudaVmmBackend& backend, HostVmm& host) {
    kv_ = ReservedRange::reserve(backend, kRowBytes * kMaxTokens).value();  // once, for life
    (void)backend.commit(kv_.range());
    meta_ = std::make_unique<HostRange>(host.reserve(4096).value());
    (void)meta_->commit();
  }
  // A command: `count` tokens, their rows written by the kernel (queued; the save fences).
  void append(uint64_t count) {
    const uint64_t bytes = count * kRowBytes;
    write_rows<<<(bytes + 255) / 256, 256>>>(kv(), length_, length_ + count);
    length_ += count;
    std::memcpy(meta_->data(), &length_, 8);
  }
  // Every row as the kernel wrote it, read back to the host.
  bool rows_intact() const {
    std::vector<uint8_t> rows(length_ * kRowBytes);
    if (cudaMemcpy(rows.data(), kv(), rows.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return false;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] != static_cast<uint8_t>((i / kRowBytes) * 31 + 7)) return false;
    }
    return true;
  }
  DeviceAddress kv_address() const { return kv_.range().base; }

  // ---- What siesta sees (core/offload/offload_target.h) ----
  std::vector<SnapshotRegion> snapshot_regions() const override {
    SnapshotRegion rows, meta;
    rows.layout = {"kv", snapshot::PersistKind::kContents, kv_.range().size, {}};
    if (length_ > 0) rows.layout.extents.push_back({0, length_ * kRowBytes});
    rows.place = SnapshotRegion::Place::kDevice;
    rows.device = kv_.range().base;
    meta.layout = {"meta", snapshot::PersistKind::kContents, meta_->size(), {{0, 8}}};
    meta.host = meta_->data();
    return {rows, meta};
  }
  std::vector<DeviceRange> device_memory() const override { return {kv_.range()}; }
  std::vector<HostRange*> host_memory() override { return {meta_.get()}; }
  snapshot::Fingerprint fingerprint() const override { return {'c', 'u', 'd', 'a', '-', 'k', 'v'}; }
  uint64_t history_tokens() const override { return length_; }
  Status adopt_restored_state() override {
    uint64_t length = 0;
    std::memcpy(&length, meta_->data(), 8);
    if (length > kMaxTokens) return Corrupt("restored length out of range");
    length_ = length;
    return Status::Ok();
  }
  Status discard_history() override {
    length_ = 0;
    std::memcpy(meta_->data(), &length_, 8);
    return Status::Ok();
  }

 private:
  uint8_t* kv() const { return reinterpret_cast<uint8_t*>(kv_.range().base); }
  ReservedRange kv_;
  std::unique_ptr<HostRange> meta_;
  uint64_t length_ = 0;
};

int main(int argc, char** argv) {
  if (const std::string why = CudaVmmBackend::unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "cuda_offload: no CUDA device to run on: %s\n", why.c_str());
    return 77;  // "skipped", for test harnesses
  }
  const std::string dir = argc > 1 ? argv[1]
                                   : std::filesystem::temp_directory_path().string() +
                                         "/cuda-offload-" + std::to_string(getpid());
  std::unique_ptr<CudaVmmBackend> backend = CudaVmmBackend::create().value();
  HostVmm host;
  PosixFileSystem fs;
  const Clock& clock = SystemClock::instance();
  ThreadExecutor executor(clock);
  ProcessKey key = ProcessKey::generate().value();
  SnapshotStore::Options store_options;
  store_options.nonce = SnapshotStore::nonce_hex(key.nonce());
  Result<std::unique_ptr<SnapshotStore>> store = SnapshotStore::open(fs, clock, dir, store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "cuda_offload: %s\n", store.status().to_string().c_str());
    return 1;
  }
  KvSession session(*backend, host);
  OffloaderOptions options;
  options.config.idle_seconds = 1;
  options.config.expire_seconds = 60;
  options.config.disk_dir = dir;
  Result<std::unique_ptr<Offloader>> made = Offloader::create(
      {session, *backend, host, fs, clock, &executor, store->get(), &key}, options);
  if (!made.ok()) {
    std::fprintf(stderr, "cuda_offload: %s\n", made.status().to_string().c_str());
    return 1;
  }
  Offloader& offloader = *made.value();

  {
    Offloader::Lease lease = offloader.acquire().value();  // a command holds the session
    session.append(40000);                                 // ~10 MB of rows
  }
  const DeviceAddress before = session.kv_address();
  const uint64_t held = backend->stats().committed_bytes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (offloader.status().state != OffloadState::kDisk) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "cuda_offload: no offload within 30 s: %s\n",
                   offloader.status().last_error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("offloaded: %llu device bytes committed before, %llu now; snapshot %llu bytes\n",
              static_cast<unsigned long long>(held),
              static_cast<unsigned long long>(backend->stats().committed_bytes),
              static_cast<unsigned long long>(offloader.status().disk_bytes));

  Offloader::Lease lease = offloader.acquire().value();  // fresh memory, same address, read back
  const bool same_address = session.kv_address() == before;
  const bool same_bytes = session.rows_intact();
  std::printf("restored: %s, same address %s, same bytes %s\n",
              lease.admission().restored ? "yes" : "no", same_address ? "yes" : "no",
              same_bytes ? "yes" : "no");
  lease.release();
  return lease.admission().restored && same_address && same_bytes ? 0 : 1;
}
