// host_offload: the smallest engine that hands its session to siesta, on the simulator (no GPU
// needed). Its "KV cache" is one reserved device range that grows a 64-byte row per token, and
// its token history lives in one host range. The Offloader saves both to a sealed snapshot
// after a second without a command, releases the memory (the addresses stay reserved), and
// the next command maps fresh memory at the same addresses and reads the snapshot back.
// docs/EMBEDDING.md walks through each step.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "core/offload/offloader.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

using namespace siesta;

// 1. The session: what siesta sees of an engine's conversation (core/offload/offload_target.h).
class KvSession final : public OffloadTarget {
 public:
  static constexpr size_t kRowBytes = 64, kMaxTokens = 4096;

  KvSession(SimBackend& backend, HostVmm& host) {
    // Reserve once, for the session's life: these addresses never move.
    kv_ = ReservedRange::reserve(backend, kRowBytes * kMaxTokens).value();
    (void)backend.commit(kv_.range());
    meta_ = std::make_unique<HostRange>(host.reserve(8 + kMaxTokens).value());
    (void)meta_->commit();
  }

  // A command's work: one row of "KV" per token. On the simulator a device address is a host
  // pointer; a CUDA engine writes these rows with its kernels instead.
  void append(const std::string& tokens) {
    for (char token : tokens) {
      std::memset(row(length_), token, kRowBytes);
      meta_->data()[8 + length_] = static_cast<std::byte>(token);
      ++length_;
    }
    std::memcpy(meta_->data(), &length_, 8);
  }
  bool holds(const std::string& tokens) const {
    if (length_ != tokens.size()) return false;
    for (size_t i = 0; i < length_; ++i) {
      if (row(i)[kRowBytes - 1] != static_cast<uint8_t>(tokens[i])) return false;
    }
    return true;
  }
  DeviceAddress kv_address() const { return kv_.range().base; }

  // 2. What to save: only the bytes used so far (extents), so a snapshot grows with the
  // conversation, not with the reserved capacity.
  std::vector<SnapshotRegion> snapshot_regions() const override {
    SnapshotRegion kv, meta;
    kv.layout = {"kv", snapshot::PersistKind::kContents, kv_.range().size, {}};
    kv.place = SnapshotRegion::Place::kDevice;
    kv.device = kv_.range().base;
    meta.layout = {"meta", snapshot::PersistKind::kContents, meta_->size(), {{0, 8 + length_}}};
    meta.host = meta_->data();
    if (length_ > 0) kv.layout.extents.push_back({0, length_ * kRowBytes});
    return {kv, meta};
  }
  // 3. What to release and commit again: whole ranges.
  std::vector<DeviceRange> device_memory() const override { return {kv_.range()}; }
  std::vector<HostRange*> host_memory() override { return {meta_.get()}; }
  // 4. Who may read a snapshot back: a fixed identity for this layout (a real engine hashes
  // its model, weights and layout, so that another model's state is never restored).
  snapshot::Fingerprint fingerprint() const override { return {'h', 'o', 's', 't', '-', 'k', 'v'}; }
  uint64_t history_tokens() const override { return length_; }
  // 5. After a restore: re-read the session's own state from its restored memory and check it.
  Status adopt_restored_state() override {
    uint64_t length = 0;
    std::memcpy(&length, meta_->data(), 8);
    if (length > kMaxTokens) return Corrupt("restored length out of range");
    length_ = length;
    return Status::Ok();
  }
  // 6. When a snapshot cannot be used: start over (the engine reads the prompt again).
  Status discard_history() override {
    length_ = 0;
    std::memcpy(meta_->data(), &length_, 8);
    return Status::Ok();
  }

 private:
  uint8_t* row(uint64_t i) const {
    return reinterpret_cast<uint8_t*>(kv_.range().base) + i * kRowBytes;
  }
  ReservedRange kv_;
  std::unique_ptr<HostRange> meta_;
  uint64_t length_ = 0;  // ordinary memory: readable while the session is released
};

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1]
                                   : std::filesystem::temp_directory_path().string() +
                                         "/host-offload-" + std::to_string(getpid());
  // 7. What the Offloader runs on: a backend, host memory, files, a clock, a thread for its
  // timers and saves, a process key (in memory only) and the store that owns the directory.
  std::unique_ptr<SimBackend> backend = SimBackend::create().value();
  HostVmm host;
  PosixFileSystem fs;
  const Clock& clock = SystemClock::instance();
  ThreadExecutor executor(clock);
  ProcessKey key = ProcessKey::generate().value();
  SnapshotStore::Options store_options;
  store_options.nonce = SnapshotStore::nonce_hex(key.nonce());
  Result<std::unique_ptr<SnapshotStore>> store = SnapshotStore::open(fs, clock, dir, store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "host_offload: %s\n", store.status().to_string().c_str());
    return 1;
  }
  KvSession session(*backend, host);

  // 8. The Offloader: offload after 1 idle second, delete the snapshot after a minute.
  OffloaderOptions options;
  options.config.idle_seconds = 1;
  options.config.expire_seconds = 60;
  options.config.disk_dir = dir;
  Result<std::unique_ptr<Offloader>> made = Offloader::create(
      {session, *backend, host, fs, clock, &executor, store->get(), &key}, options);
  if (!made.ok()) {
    std::fprintf(stderr, "host_offload: %s\n", made.status().to_string().c_str());
    return 1;
  }
  Offloader& offloader = *made.value();

  // 9. Every command holds a Lease: while it is held, nothing is saved or released.
  const std::string said = "hello from an engine outside siesta";
  {
    Offloader::Lease lease = offloader.acquire().value();
    session.append(said);
  }  // given back: the idle timer starts
  const DeviceAddress before = session.kv_address();
  const uint64_t held = backend->stats().committed_bytes;

  // 10. Idle: the timer saves and releases. (An engine need not wait; this one shows it.)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (offloader.status().state != OffloadState::kDisk) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "host_offload: no offload within 30 s: %s\n",
                   offloader.status().last_error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("offloaded: %llu device bytes committed before, %llu now; snapshot %llu bytes\n",
              static_cast<unsigned long long>(held),
              static_cast<unsigned long long>(backend->stats().committed_bytes),
              static_cast<unsigned long long>(offloader.status().disk_bytes));

  // 11. The next command: fresh memory at the same address, the snapshot read back.
  Offloader::Lease lease = offloader.acquire().value();
  const bool same_address = session.kv_address() == before;
  const bool same_bytes = session.holds(said);
  std::printf("restored: %s, same address %s, same bytes %s\n",
              lease.admission().restored ? "yes" : "no", same_address ? "yes" : "no",
              same_bytes ? "yes" : "no");
  lease.release();
  return lease.admission().restored && same_address && same_bytes ? 0 : 1;
}
