// OffloaderFixture: an Offloader over a FakeOffloadTarget on a small SimBackend, with a
// ManualClock and a ManualExecutor, so a test decides when time passes and when timers and
// saves run. The Offloader's backend is a HookedBackend (decommit hooks, none until a test sets
// them) over a FaultyBackend (no fault until a test plans one) over the simulator. Storage is
// the POSIX file system behind a FaultyFileSystem (no fault until a test plans one) and a
// SnapshotStore in a fresh private directory.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/offload/offloader.h"
#include "core/offload/ram_tier.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_store.h"
#include "testing/faulty_backend.h"
#include "testing/faulty_file_system.h"
#include "testing/hooked_backend.h"
#include "tests/support/fake_offload_target.h"
#include "tests/support/small_sim_options.h"
#include "tests/support/temp_dir.h"

namespace siesta::test_util {

struct OffloaderSetup {
  uint32_t positions = 256;
  int64_t idle_seconds = 60;
  int64_t expire_seconds = 600;
  bool encrypt = true;
  FaultPlan backend_faults = FaultPlan::none();   // on the Offloader's commits/decommits
  uint32_t chunk_bytes = 4096;                    // many chunks: many cancellation points
  uint32_t max_delta_segments = 0;                // OffloaderOptions' (0: whole saves only)
  uint64_t ram_tier_bytes = 0;                    // > 0: a RamTier of that budget (ram_tier_)
  uint64_t disk_budget_bytes = 0;                 // > 0: a DiskBudget of that many bytes
  std::function<std::vector<uint8_t>()> route{};  // OffloaderOptions::route
};

// The RAM tier's pages, refused on demand (a test's injected fault): anonymous mappings
// otherwise. They record the largest block announced to them.
class SwitchableRamPages final : public RamPages {
 public:
  Result<std::byte*> map(size_t bytes) override {
    if (refuse.load())
      return OutOfMemory("injected: RamPages::map refused " + std::to_string(bytes));
    return pages_.map(bytes);
  }
  void unmap(std::byte* pages, size_t bytes) override { pages_.unmap(pages, bytes); }
  // Records the largest size announced (RamPages::expect).
  void expect(uint64_t bytes) override {
    uint64_t seen = expected.load();
    while (bytes > seen && !expected.compare_exchange_weak(seen, bytes)) {
    }
  }
  std::atomic<bool> refuse{false};
  std::atomic<uint64_t> expected{0};

 private:
  AnonymousRamPages pages_;
};

class OffloaderFixture {
 public:
  static constexpr int64_t kIdle = 60;
  static constexpr int64_t kExpire = 600;

  using Setup = OffloaderSetup;

  explicit OffloaderFixture(const Setup& setup = {}) : setup_(setup), executor_(clock_) {
    sim_ = SimBackend::create(small_sim_options()).value();
    faulty_backend_ = std::make_unique<FaultyBackend>(*sim_, setup.backend_faults);
    hooked_backend_ = std::make_unique<HookedBackend>(*faulty_backend_);
    key_ = std::make_unique<ProcessKey>(ProcessKey::generate().value());
    SnapshotStore::Options store_options;
    store_options.nonce = SnapshotStore::nonce_hex(key_->nonce());
    store_options.read_expiry = [this](const std::string& path) {
      return read_snapshot_expiry(posix_, path);
    };
    store_ = SnapshotStore::open(fs_, clock_, dir_.path(), store_options).value();
    target_ = FakeOffloadTarget::create(*sim_, host_, setup.positions);
    if (setup.ram_tier_bytes > 0) {
      auto pages = std::make_unique<SwitchableRamPages>();
      ram_pages_ = pages.get();
      ram_tier_ = std::make_unique<RamTier>(setup.ram_tier_bytes, std::move(pages));
    }
    if (setup.disk_budget_bytes > 0) {
      disk_budget_ = std::make_unique<DiskBudget>(setup.disk_budget_bytes);
    }
    make_offloader();
  }

  void make_offloader() {
    OffloaderOptions options;
    options.config.idle_seconds = setup_.idle_seconds;
    options.config.expire_seconds = setup_.expire_seconds;
    options.config.encrypt = setup_.encrypt;
    options.chunk_bytes = setup_.chunk_bytes;
    options.config.delta_segments = setup_.max_delta_segments;
    options.route = setup_.route;
    options.on_fatal = [this](const Status& s) { fatal_.push_back(s); };
    options.log = [this](const std::string& line) {
      if (log_hook_) log_hook_(line);
      log_.push_back(line);
    };
    offloader_ = Offloader::create({*target_, *hooked_backend_, host_, fs_, clock_, &executor_,
                                    store_.get(), key_.get(), ram_tier_.get(), disk_budget_.get()},
                                   options)
                     .value();
  }

  // A command: acquire, append `positions`, give the lease back. Returns the admission.
  Result<Admission> command(uint32_t positions) {
    Result<Offloader::Lease> lease = offloader_->acquire();
    if (!lease.ok()) return lease.status();
    target_->advance(positions);
    return lease->admission();
  }

  // Moves time and runs whatever became due.
  void pass(int64_t seconds) {
    clock_.advance(std::chrono::seconds(seconds));
    executor_.run_due();
  }

  OffloadState state() const { return offloader_->status().state; }
  std::string snapshot_path(uint32_t segment = 0) const {
    return store_->snapshot_path("0", segment).value();
  }
  bool snapshot_exists(uint32_t segment = 0) const {
    return std::filesystem::exists(snapshot_path(segment));
  }

  Setup setup_;
  siesta::testing::TempDir dir_;
  ManualClock clock_;
  // setup.disk_budget_bytes > 0; outlives the offloaders, whose files' room it counts.
  std::unique_ptr<DiskBudget> disk_budget_;
  ManualExecutor executor_;
  PosixFileSystem posix_;
  FaultyFileSystem fs_{posix_};
  HostVmm host_;
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<FaultyBackend> faulty_backend_;
  std::unique_ptr<HookedBackend> hooked_backend_;
  std::unique_ptr<ProcessKey> key_;
  std::unique_ptr<SnapshotStore> store_;
  std::unique_ptr<FakeOffloadTarget> target_;
  SwitchableRamPages* ram_pages_ = nullptr;  // ram_tier_'s, while it lives
  std::unique_ptr<RamTier> ram_tier_;        // setup.ram_tier_bytes > 0; outlives the offloader
  std::unique_ptr<Offloader> offloader_;
  std::vector<Status> fatal_;
  std::vector<std::string> log_;
  // Called with each log line before it is kept (on the thread that writes it).
  std::function<void(const std::string&)> log_hook_;
};

// Another session beside the fixture's (store name `name`, its bytes drawn from `seed`), on
// the same device, host memory, store, key, clock, executor and RAM tier; options as the
// fixture's. Its log lines are kept under a mutex: a spill of its copy runs on whichever
// thread's save needs the room.
class NeighbourSession {
 public:
  NeighbourSession(OffloaderFixture& f, const std::string& name, uint64_t seed) {
    target = FakeOffloadTarget::create(*f.sim_, f.host_, f.setup_.positions, seed);
    OffloaderOptions options;
    options.config.idle_seconds = f.setup_.idle_seconds;
    options.config.expire_seconds = f.setup_.expire_seconds;
    options.config.encrypt = f.setup_.encrypt;
    options.config.delta_segments = f.setup_.max_delta_segments;
    options.chunk_bytes = f.setup_.chunk_bytes;
    options.session = name;
    options.log = [this](const std::string& line) {
      std::lock_guard lock(log_mu_);
      log_.push_back(line);
    };
    offloader =
        Offloader::create({*target, *f.hooked_backend_, f.host_, f.fs_, f.clock_, &f.executor_,
                           f.store_.get(), f.key_.get(), f.ram_tier_.get(), f.disk_budget_.get()},
                          options)
            .value();
  }

  // A command: acquire, append `positions`, give the lease back. Returns the admission.
  Result<Admission> command(uint32_t positions) {
    Result<Offloader::Lease> lease = offloader->acquire();
    if (!lease.ok()) return lease.status();
    target->advance(positions);
    return lease->admission();
  }

  std::vector<std::string> log() const {
    std::lock_guard lock(log_mu_);
    return log_;
  }

  std::unique_ptr<FakeOffloadTarget> target;
  std::unique_ptr<Offloader> offloader;

 private:
  mutable std::mutex log_mu_;
  std::vector<std::string> log_;
};

}  // namespace siesta::test_util
