// A reference Engine on one backend, with or without idle offload, as the engine benchmarks
// (offload_bench, engine_offload_bench) build it, so that they measure the same thing.
//
// What it promises:
//   - make_engine_rig() gives a started Engine on "host" (HostKernels on a SimBackend) or
//     "cuda" (CudaKernels on the CudaVmmBackend, SIESTA_WITH_CUDA builds only). With offload
//     on, the Offloader has an idle timer an hour away and a ManualExecutor: nothing is saved
//     unless the benchmark asks (save_now()), so every figure is of work the benchmark chose.
//   - Real time (SystemClock), a real file system (PosixFileSystem) and a real SnapshotStore
//     in the directory given, so saves and restores write, fdatasync, read and verify real
//     files (choose a real disk: tmpfs makes fdatasync free).
//   - The members are declared in dependency order, so destroying an EngineRig stops the
//     engine before the store, key, executor and backend it uses go away; the store then
//     removes this process's snapshot files.
//   - Nothing here crashes on failure: every error comes back as a Status for the benchmark to
//     report.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_store.h"
#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::bench {

struct EngineRig {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<Kernels> kernels;  // computes on *backend
  HostVmm host;
  PosixFileSystem fs;
  // Runs the Offloader's saves and timers only when run_due() is called (save_now()).
  ManualExecutor executor{SystemClock::instance()};
  std::optional<ProcessKey> key;           // set when offload is on
  std::unique_ptr<SnapshotStore> store;    // set when offload is on
  std::unique_ptr<engine::Engine> engine;  // last: destroyed first
};

// A backend and kernels that compute on it: "host" (HostKernels on a SimBackend with room for
// synthetic:large at a long context) or "cuda" (CudaKernels on the CudaVmmBackend of device 0).
// Failure: InvalidArgument naming an unknown or unavailable backend; the backend's or kernels'.
Status open_device(const std::string& backend_name, std::unique_ptr<MemoryBackend>& backend,
                   std::unique_ptr<Kernels>& kernels);

// Builds `rig` (fresh: default-constructed) for `config` on `backend_name` ("host", "cuda").
// offload_on: EngineOptions::offload set (idle 3600 s, expiry 7200 s, `encrypt` choosing AES-GCM
// seals or digests) with a SnapshotStore in `dir` (which must exist or have an existing
// parent; SnapshotStore::open makes it private); otherwise no offloader and `dir` is unused.
// Failure: InvalidArgument naming an unknown or unavailable backend; the backend's, kernels',
// store's or engine's error.
Status make_engine_rig(const std::string& backend_name, const engine::ModelConfig& config,
                       bool offload_on, bool encrypt, const std::string& dir, EngineRig& rig);

// "host", then "cuda" where the build has CUDA and a device is present; otherwise prints once
// to stderr, naming `who`, why cuda is skipped.
std::vector<std::string> engine_backends(const char* who);

// Appends the filler text ('a' + (i * 7) % 26 at position i) until `prompt` has `tokens` bytes
// (one token per byte); a prompt that long already is left as it is.
void pad_prompt(std::string& prompt, size_t tokens);

// Asks the engine to offload now and runs the save on the executor, so that it has completed
// on return. Success: the status after the save, state disk (snapshot durable, memory released).
// Failure: offload_now()'s error (offload off, a command running); Internal with the
// Offloader's last error when the save did not complete.
Result<OffloadStatus> save_now(EngineRig& rig);

// Deletes this rig's snapshot files (siesta-<nonce>-*.snap and their temporaries) behind the
// store's back, as a cleaner or an operator could, so that the next restore falls back with
// NotFound. Success: how many files went (0 when there were none). Failure: FailedPrecondition
// without a store; the file system's error when the directory cannot be listed or a file
// cannot be removed.
Result<uint64_t> delete_snapshots(EngineRig& rig);

}  // namespace siesta::bench
