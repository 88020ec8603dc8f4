#include "runtime/engine_stack.h"

#include <cstdio>
#include <string>
#include <utility>

#include "core/offload/pinned_ram_pool.h"

namespace siesta::runtime {
namespace {

void log_cleanup(const SnapshotStore::CleanupReport& cleanup, const LogLine& log) {
  if (cleanup.removed_dead_owner_files + cleanup.removed_expired_files + cleanup.failures > 0) {
    log("snapshot directory clean-up: removed " + std::to_string(cleanup.removed_dead_owner_files) +
        " files of stopped servers, " + std::to_string(cleanup.removed_expired_files) +
        " expired; " + std::to_string(cleanup.failures) + " could not be removed");
  }
  for (const std::string& failure : cleanup.failure_messages) log(failure);
}

// Sets `*failed` to `part` (when asked) and gives `status` back.
Status failed_at(StackPart part, StackPart* failed, Status status) {
  if (failed != nullptr) *failed = part;
  return status;
}

}  // namespace

EngineStack::EngineStack(const Clock& clock, FileSystem* lent_fs)
    : clock_(clock), fs_(lent_fs != nullptr ? lent_fs : &posix_) {}

EngineStack::~EngineStack() {
  // Members go in reverse declaration order; spelled out for the two that matter most: the
  // engine (and its Offloader) must be gone before the executor its timers run on and the
  // store its saves write to.
  engine_.reset();
  own_executor_.reset();
}

Result<std::unique_ptr<EngineStack>> EngineStack::open(EngineStackOptions options,
                                                       const Clock& clock, StackPart* failed) {
  LogLine log = options.log;
  if (!log) {
    log = [](const std::string& line) { (void)std::fprintf(stderr, "siesta: %s\n", line.c_str()); };
  }
  std::unique_ptr<EngineStack> stack(new EngineStack(clock, options.fs));

  std::string note;
  Result<OpenedDevice> device = open_device(options.device, &note);
  if (!note.empty()) log(note);
  if (!device.ok()) return failed_at(StackPart::kDevice, failed, device.status());
  stack->device_ = std::move(device).value();
  Kernels* kernels = stack->device_.kernels.get();
  if (options.wrap_kernels) {
    stack->wrapped_kernels_ = options.wrap_kernels(*kernels);
    kernels = stack->wrapped_kernels_.get();
  }

  // The Offloader is always there; with offload off it reports "disabled" with these times.
  engine::EngineOffload offload;
  offload.options = offloader_options(options.offload, log);
  stack->executor_ = options.executor;
  if (options.offload.enabled()) {
    if (options.offload.persist && options.offload.key_file.empty()) {
      return failed_at(StackPart::kStorage, failed,
                       InvalidArgument("conversations kept across a restart need a key file"));
    }
    OffloadStorage::Persistence persistence;
    if (options.offload.persist) persistence.key_file = options.offload.key_file;
    Result<std::unique_ptr<OffloadStorage>> storage =
        OffloadStorage::open(*stack->fs_, clock, options.offload.config.disk_dir, persistence);
    if (!storage.ok()) return failed_at(StackPart::kStorage, failed, storage.status());
    stack->storage_ = std::move(storage).value();
    if (stack->storage_->created_key_file()) log("created the snapshot key file (mode 0600)");
    log_cleanup(stack->storage_->store().startup_cleanup(), log);
    if (stack->executor_ == nullptr) {
      stack->own_executor_ = std::make_unique<ThreadExecutor>(clock);
      stack->executor_ = stack->own_executor_.get();
    }
    offload.store = &stack->storage_->store();
    offload.key = &stack->storage_->key();
    offload.persist = options.offload.persist;
    offload.exit_save_limit = options.offload.exit_save_limit;
    offload.executor = stack->executor_;
    if (options.offload.config.ram_bytes > 0) {
      // Where the backend copies to host memory directly (pinned on CUDA), blocks come from a
      // pool pinned ahead in the background: a snapshot moves at the link's rate, without the
      // staging ring and without pinning on its own time. Should the pool's address range not
      // be reserved, each block is registered when it is made instead.
      MemoryBackend& backend = *stack->device_.backend;
      const uint64_t budget = options.offload.config.ram_bytes;
      std::unique_ptr<RamPages> pages = std::make_unique<AnonymousRamPages>();
      if (backend.copies_to_host()) {
        Result<std::unique_ptr<PinnedRamPool>> pool = PinnedRamPool::create(backend, budget);
        if (pool.ok()) {
          pages = std::move(pool).value();
        } else {
          log("RAM tier: " + pool.status().to_string() + "; pinning each block instead");
          pages = std::make_unique<RegisteredRamPages>(backend, std::move(pages));
        }
      }
      stack->ram_tier_ = std::make_unique<RamTier>(budget, std::move(pages));
      offload.ram_tier = stack->ram_tier_.get();
    }
    if (options.offload.config.disk_max_bytes > 0) {
      stack->disk_budget_ = std::make_unique<DiskBudget>(options.offload.config.disk_max_bytes);
      offload.disk_budget = stack->disk_budget_.get();
    }
  }

  engine::EngineOptions engine_options{std::move(options.model), std::move(options.export_dir),
                                       std::move(offload), options.sessions};
  Result<std::unique_ptr<engine::Engine>> engine = engine::Engine::start(
      engine_options, *stack->device_.backend, *kernels, stack->host_, *stack->fs_, clock);
  if (!engine.ok()) {
    return failed_at(StackPart::kEngine, failed,
                     engine.status().with_context("starting the engine"));
  }
  stack->engine_ = std::move(engine).value();
  return stack;
}

bool EngineStack::wait_offload_idle(std::chrono::milliseconds timeout) const {
  if (storage_ == nullptr) return true;        // offload off: nothing runs in the background
  if (own_executor_ == nullptr) return false;  // lent: it runs when its owner says
  return own_executor_->wait_idle(timeout);
}

}  // namespace siesta::runtime
