// EngineStack: everything one engine serves from, opened in one place from one options struct
// and closed in the reverse order: the device (backend + kernels), host memory (HostVmm), the
// file system, with idle offload on the key and the snapshot store (OffloadStorage) and the
// executor for the Offloader's timers and saves, and the engine with its Offloader. The server,
// the engine's test rigs and the engine benchmarks open it; nothing else assembles an engine.
//
// Lent parts: the caller may lend the executor (tests and benchmarks lend a ManualExecutor, so
// that timers and saves run only when they say) and the file system (tests lend a
// FaultyFileSystem over the POSIX one). Otherwise the stack makes a ThreadExecutor on its
// clock, only when offload is on, and uses the POSIX file system.
//
// Thread rule: open() and the destructor on one thread. The accessors may be called from any
// thread; what they return is used by its own rules (engine() from any thread; the kernels
// compute only on the engine thread once the engine runs, so others ask them only for their
// name; the backend's stats() from any thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backends/sim/sim_backend.h"
#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/base/posix_file_system.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/disk_budget.h"
#include "core/offload/ram_tier.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "runtime/device.h"
#include "runtime/offload_settings.h"
#include "runtime/offload_storage.h"

namespace siesta::runtime {

// The part of the stack that open() could not open, so that a front end can word the error
// with its own names for its inputs (the server names its flags).
enum class StackPart : uint8_t { kDevice, kStorage, kEngine };

struct EngineStackOptions {
  DeviceOptions device;
  engine::ModelConfig model;
  // Where the engine's exports and imports live; empty: both are refused.
  std::string export_dir;
  OffloadSettings offload;
  // Conversations kept and sessions committed at once (engine::EngineOptions::sessions).
  engine::EngineSessions sessions;
  // The stack's lines (the device's note, the snapshot directory's clean-up) and the
  // Offloader's, one at a time. Empty: stderr, each line prefixed "siesta: ".
  LogLine log;

  // Lent parts; each must outlive the stack. Null: the stack's own.
  Executor* executor = nullptr;  // runs the Offloader's timers and saves
  FileSystem* fs = nullptr;      // the engine's exports and the snapshot store

  // When set, the engine computes through the Kernels this returns for the device's kernels
  // (tests inject faults so); the stack keeps the wrapper and destroys it before the kernels.
  std::function<std::unique_ptr<Kernels>(Kernels&)> wrap_kernels;
};

class EngineStack {
 public:
  // Opens, in order:
  //   1. the device, open_device(options.device); its note, when there is one, is logged
  //      (also when opening then fails);
  //   2. host memory;
  //   3. with offload on, the OffloadStorage on offload.config.disk_dir, whose start-up
  //      clean-up is logged (one line with the counts when it removed or failed to remove any
  //      file, then one line per failure), and the executor (the lent one, else a
  //      ThreadExecutor on `clock`);
  //   4. the engine: Engine::start with options.model, options.export_dir, and, with offload on,
  //      an Offloader configured by offloader_options(options.offload, log).
  // REQUIRES: options.offload.config passes validate_offload_config(); `clock` outlives the
  // stack (with the stack's own executor, timers fire as `clock` reaches them: SystemClock in
  // the server).
  // Failure, with `failed` (when not null) naming the part: kDevice: open_device()'s error;
  // kStorage: OffloadStorage::open()'s, without context (the caller names the directory as
  // its user knows it); kEngine: Engine::start()'s, with context "starting the engine".
  // Whatever was opened is closed again, in reverse order.
  static Result<std::unique_ptr<EngineStack>> open(EngineStackOptions options, const Clock& clock,
                                                   StackPart* failed = nullptr);

  // Destroys the engine first (the running command finished, queued ones cancelled, a running
  // save stopped), then the executor, the storage (this process's snapshots and lock removed),
  // host memory, the kernels and the backend.
  ~EngineStack();
  EngineStack(const EngineStack&) = delete;
  EngineStack& operator=(const EngineStack&) = delete;

  engine::Engine& engine() const { return *engine_; }
  MemoryBackend& backend() const { return *device_.backend; }
  // The backend as the simulator when that is what runs (DeviceOptions: kSim, or kAuto without
  // a GPU); null on CUDA.
  SimBackend* simulator() const { return device_.simulator; }
  // The device's kernels (beneath wrap_kernels' wrapper, when there is one).
  Kernels& kernels() const { return *device_.kernels; }
  HostVmm& host() { return host_; }
  FileSystem& fs() const { return *fs_; }
  // Null when offload is off.
  SnapshotStore* store() const { return storage_ ? &storage_->store() : nullptr; }
  const ProcessKey* key() const { return storage_ ? &storage_->key() : nullptr; }
  // The RAM tier (offload.config.ram_bytes > 0 with offload on); null otherwise.
  const RamTier* ram_tier() const { return ram_tier_.get(); }
  // The snapshot directory's budget (offload.config.disk_max_bytes > 0 with offload on); null
  // otherwise.
  const DiskBudget* disk_budget() const { return disk_budget_.get(); }
  // Where the Offloader's timers and saves run: the lent executor, else the stack's own; null
  // when offload is off and none was lent.
  Executor* executor() const { return executor_; }
  const Clock& clock() const { return clock_; }

  // Waits until the Offloader's background work has run: the stack's own executor has no task
  // running and none due (a save that offload_now() posted has then finished, and cache_status()
  // says how: disk, or resident after a failed write), at most `timeout` of real time.
  // True: idle, also at once when offload is off. False: still busy at the deadline, or the
  // executor is lent (it runs only when its owner says: ManualExecutor::run_due()).
  // Any thread but the executor's own (a task waiting for itself would wait until the timeout).
  bool wait_offload_idle(std::chrono::milliseconds timeout) const;

 private:
  EngineStack(const Clock& clock, FileSystem* lent_fs);

  const Clock& clock_;
  // Declared in opening order; destroyed in reverse, so each part outlives its users.
  OpenedDevice device_;
  std::unique_ptr<Kernels> wrapped_kernels_;  // wrap_kernels' wrapper; null without one
  HostVmm host_;
  PosixFileSystem posix_;
  FileSystem* fs_;                           // the lent one, else &posix_
  std::unique_ptr<OffloadStorage> storage_;  // null when offload is off
  std::unique_ptr<RamTier> ram_tier_;        // null when offload or the tier is off
  std::unique_ptr<DiskBudget> disk_budget_;  // null when offload is off or has no budget
  std::unique_ptr<ThreadExecutor> own_executor_;
  Executor* executor_ = nullptr;            // the lent one, else own_executor_
  std::unique_ptr<engine::Engine> engine_;  // last: destroyed first
};

}  // namespace siesta::runtime
