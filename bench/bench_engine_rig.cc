#include "bench/bench_engine_rig.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "backends/sim/sim_backend.h"
#include "bench/bench_backends.h"
#include "bench/bench_env.h"

namespace siesta::bench {

Result<runtime::DeviceOptions> bench_device(const std::string& backend_name) {
  runtime::DeviceOptions device;
  if (backend_name == "host") {
    device.kind = runtime::BackendKind::kSim;
    // Room for synthetic:large at a long context; the simulator commits only what is used.
    device.sim.capacity_bytes = 32ull << 30;
    // The hazards catch missing synchronisation in tests; a benchmark measures the path.
    device.sim.hazards = SimHazards::none();
    return device;
  }
  if (backend_name == "cuda") {
    device.kind = runtime::BackendKind::kCuda;
    return device;
  }
  return InvalidArgument("unknown backend " + backend_name + " (host or cuda)");
}

Status open_device(const std::string& backend_name, std::unique_ptr<MemoryBackend>& backend,
                   std::unique_ptr<Kernels>& kernels) {
  SIESTA_ASSIGN_OR_RETURN(const runtime::DeviceOptions options, bench_device(backend_name));
  SIESTA_ASSIGN_OR_RETURN(runtime::OpenedDevice device, runtime::open_device(options, nullptr));
  kernels = std::move(device.kernels);
  backend = std::move(device.backend);
  return Status::Ok();
}

Status make_engine_rig(const std::string& backend_name, const engine::ModelConfig& config,
                       bool offload_on, bool encrypt, const std::string& dir, EngineRig& rig,
                       const engine::EngineSessions& sessions, bool background,
                       const std::string& key_file) {
  runtime::EngineStackOptions options;
  SIESTA_ASSIGN_OR_RETURN(options.device, bench_device(backend_name));
  options.model = config;
  options.sessions = sessions;
  if (offload_on) {
    // The idle deadline, an hour away, never comes during a benchmark: saves happen only
    // when the benchmark asks (save_now()), and every command still goes through the
    // Offloader's lease.
    options.offload.config.idle_seconds = 3600;
    options.offload.config.expire_seconds = 7200;
    options.offload.config.disk_dir = dir;
    options.offload.config.encrypt = encrypt;
    // SIESTA_BENCH_DELTA_SAVES=0 measures whole saves only, as before delta saves.
    options.offload.config.delta_segments =
        static_cast<uint32_t>(env_number("SIESTA_BENCH_DELTA_SAVES", kDefaultDeltaSegments));
    // SIESTA_BENCH_RAM_MIB=N keeps snapshots in a RAM tier of N MiB (default 0: on disk).
    options.offload.config.ram_bytes = static_cast<uint64_t>(env_number("SIESTA_BENCH_RAM_MIB", 0))
                                       << 20;
    options.offload.persist = !key_file.empty();
    options.offload.key_file = key_file;
    options.offload.exit_save_limit = std::chrono::seconds(3600);
  }
  options.log = [](const std::string&) {};                  // fallbacks are expected here
  options.executor = background ? nullptr : &rig.executor;  // null: the stack's own thread
  SIESTA_ASSIGN_OR_RETURN(rig.stack,
                          runtime::EngineStack::open(std::move(options), SystemClock::instance()));
  return Status::Ok();
}

std::vector<std::string> engine_backends(const char* who) {
  std::vector<std::string> backends = {"host"};
  if (cuda_available(who)) backends.push_back("cuda");
  return backends;
}

void pad_prompt(std::string& prompt, size_t tokens) {
  for (size_t i = prompt.size(); i < tokens; ++i) {
    prompt.push_back(static_cast<char>('a' + (i * 7) % 26));
  }
}

Result<OffloadStatus> save_now(EngineRig& rig) {
  SIESTA_RETURN_IF_ERROR(rig.engine().offload_now());
  rig.executor.run_due();  // the save offload_now() posted: write, sync, rename, release
  OffloadStatus slept = rig.engine().cache_status();
  // On disk, or in the RAM tier with SIESTA_BENCH_RAM_MIB.
  if (slept.state != OffloadState::kDisk && slept.state != OffloadState::kRam) {
    return Internal("not saved (state " + std::string(offload_state_name(slept.state)) +
                    "): " + slept.last_error);
  }
  return slept;
}

Result<uint64_t> delete_snapshots(EngineRig& rig) {
  const SnapshotStore* store = rig.stack->store();
  if (store == nullptr) return FailedPrecondition("offload is off: no snapshot store");
  // Only this rig's files: another benchmark's store may share the directory.
  const std::string prefix = "siesta-" + store->nonce() + "-";
  FileSystem& fs = rig.stack->fs();
  SIESTA_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.list_directory(store->directory()));
  uint64_t removed = 0;
  for (const std::string& name : names) {
    if (name.rfind(prefix, 0) != 0 || name.find(".snap") == std::string::npos) continue;
    SIESTA_RETURN_IF_ERROR(fs.remove(store->directory() + "/" + name));
    ++removed;
  }
  return removed;
}

}  // namespace siesta::bench
