// A reference Engine on one backend, with or without idle offload, as the engine benchmarks
// (offload_bench, engine_offload_bench) open it: the runtime's EngineStack, so that they
// measure what the server runs.
//
// What it promises:
//   - make_engine_rig() gives a started Engine on "host" (HostKernels on a SimBackend) or
//     "cuda" (CudaKernels on the CudaVmmBackend, where the build has CUDA). With offload on,
//     the Offloader has an idle timer an hour away and a lent ManualExecutor: nothing is saved
//     unless the benchmark asks (save_now()), so every figure is of work the benchmark chose.
//   - Real time (SystemClock), the POSIX file system and a real SnapshotStore in the
//     directory given, so saves and restores write, fdatasync, read and verify real files
//     (choose a real disk: tmpfs makes fdatasync free).
//   - Destroying an EngineRig closes the stack (engine first; the store then removes this
//     process's snapshot files) before the executor it lent goes.
//   - Nothing here crashes on failure: every error comes back as a Status for the benchmark to
//     report.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "runtime/device.h"
#include "runtime/engine_stack.h"

namespace siesta::bench {

struct EngineRig {
  // The stack's engine. REQUIRES: make_engine_rig() succeeded.
  engine::Engine& engine() const { return stack->engine(); }

  // Runs the Offloader's saves and timers only when run_due() is called (save_now()).
  ManualExecutor executor{SystemClock::instance()};
  std::unique_ptr<runtime::EngineStack> stack;  // after the executor it borrows
};

// The device a benchmark names: "host" (the simulator with room for synthetic:large at a long
// context, without the hazards that tests use to catch missing synchronisation: a benchmark
// measures the path) or "cuda" (device 0). Failure: InvalidArgument for another name.
Result<runtime::DeviceOptions> bench_device(const std::string& backend_name);

// A backend and kernels that compute on it, of bench_device(backend_name).
// Failure: bench_device()'s; runtime::open_device()'s (CUDA unavailable: Unsupported).
Status open_device(const std::string& backend_name, std::unique_ptr<MemoryBackend>& backend,
                   std::unique_ptr<Kernels>& kernels);

// Opens `rig`'s stack (rig fresh: default-constructed) for `config` on `backend_name` ("host",
// "cuda"). offload_on: idle 3600 s, expiry 7200 s, `encrypt` choosing AES-GCM seals or
// digests, the Offloader's lines dropped (fallbacks are expected here), a SnapshotStore in
// `dir` (which must exist or have an existing parent; it is made private); otherwise offload
// is off and `dir` is unused. `sessions`: the conversations kept and sessions resident (the
// default: one). `background`: the Offloaders' work runs on a worker thread of the stack's
// own, as in the server, instead of the rig's ManualExecutor (so the saves the engine posts by
// itself, the writes ahead of many conversations, run while the benchmark goes on; save_now()
// is then not for this rig). `key_file` (with offload on and AES seals): conversations kept
// across a restart under that key file (--cache-persist on), the close saving every one
// (exit save limit 3600 s).
// Failure: bench_device()'s; the stack's (runtime::EngineStack::open()).
Status make_engine_rig(const std::string& backend_name, const engine::ModelConfig& config,
                       bool offload_on, bool encrypt, const std::string& dir, EngineRig& rig,
                       const engine::EngineSessions& sessions = {}, bool background = false,
                       const std::string& key_file = "");

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
