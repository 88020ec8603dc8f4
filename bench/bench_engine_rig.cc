#include "bench/bench_engine_rig.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "bench/bench_backends.h"
#ifdef SIESTA_WITH_CUDA
#include "backends/cuda_vmm/cuda_kernels.h"
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#endif

namespace siesta::bench {

Status open_device(const std::string& backend_name, std::unique_ptr<MemoryBackend>& backend,
                   std::unique_ptr<Kernels>& kernels) {
  if (backend_name == "host") {
    SimBackendOptions options;
    // Room for synthetic:large at a long context; the simulator commits only what is used.
    options.capacity_bytes = 32ull << 30;
    // The hazards catch missing synchronisation in tests; a benchmark measures the path.
    options.hazards = SimHazards::none();
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<SimBackend> sim, SimBackend::create(options));
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<HostKernels> host_kernels, HostKernels::create(*sim));
    kernels = std::move(host_kernels);
    backend = std::move(sim);
    return Status::Ok();
  }
#ifdef SIESTA_WITH_CUDA
  if (backend_name == "cuda") {
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<CudaVmmBackend> cuda, CudaVmmBackend::create({}));
    SIESTA_ASSIGN_OR_RETURN(kernels, CudaKernels::create(0));
    backend = std::move(cuda);
    return Status::Ok();
  }
#endif
  return InvalidArgument("unknown or unavailable backend " + backend_name);
}

Status make_engine_rig(const std::string& backend_name, const engine::ModelConfig& config,
                       bool offload_on, bool encrypt, const std::string& dir, EngineRig& rig) {
  SIESTA_RETURN_IF_ERROR(open_device(backend_name, rig.backend, rig.kernels));

  engine::EngineOptions options;
  options.model = config;
  if (offload_on) {
    SIESTA_RETURN_IF_ERROR(open_bench_store(rig.fs, dir, rig.key, rig.store));
    engine::EngineOffload offload;
    // The idle deadline, an hour away, never comes during a benchmark: saves happen only
    // when the benchmark asks (save_now()), and every command still goes through the
    // Offloader's lease.
    offload.options.idle_seconds = 3600;
    offload.options.expire_seconds = 7200;
    offload.options.encrypt = encrypt;
    offload.options.log = [](const std::string&) {};  // fallbacks are expected here
    offload.store = rig.store.get();
    offload.key = &*rig.key;
    offload.executor = &rig.executor;
    options.offload = offload;
  }
  SIESTA_ASSIGN_OR_RETURN(
      rig.engine, engine::Engine::start(options, *rig.backend, *rig.kernels, rig.host, rig.fs,
                                        SystemClock::instance()));
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
  SIESTA_RETURN_IF_ERROR(rig.engine->offload_now());
  rig.executor.run_due();  // the save offload_now() posted: write, sync, rename, release
  OffloadStatus slept = rig.engine->cache_status();
  if (slept.state != OffloadState::kDisk) {
    return Internal("not saved (state " + std::string(offload_state_name(slept.state)) +
                    "): " + slept.last_error);
  }
  return slept;
}

Result<uint64_t> delete_snapshots(EngineRig& rig) {
  if (rig.store == nullptr) return FailedPrecondition("offload is off: no snapshot store");
  // Only this rig's files: another benchmark's store may share the directory.
  const std::string prefix = "siesta-" + rig.store->nonce() + "-";
  SIESTA_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          rig.fs.list_directory(rig.store->directory()));
  uint64_t removed = 0;
  for (const std::string& name : names) {
    if (name.rfind(prefix, 0) != 0 || name.find(".snap") == std::string::npos) continue;
    SIESTA_RETURN_IF_ERROR(rig.fs.remove(rig.store->directory() + "/" + name));
    ++removed;
  }
  return removed;
}

}  // namespace siesta::bench
