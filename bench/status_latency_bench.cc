// How long Offloader::status() (what /v1/status and /metrics read) takes while a multi-GiB
// session is saved and its memory released, against the same polling with nothing running,
// per backend ("sim" always, "cuda" where a device is present):
//
//   status_latency/<backend>/session_mib:<S>
//     A thread calls status() in a loop, one call every SIESTA_BENCH_POLL_US microseconds,
//     and times each call. Each round polls first with the session resident and idle (the
//     baseline, as long as the previous round's save took), then through one save started by
//     offload_now() until the state is disk; the restore that follows is not measured. A call
//     is counted in the phase it started in: "save" from offload_now() until the first
//     decommit, "release" from the first decommit until the last one has returned (the
//     backend is wrapped in a HookedBackend to see them).
//     Counters, in microseconds, over every round's calls:
//       idle_p50_us, idle_p99_us, idle_max_us           nothing running
//       save_p50_us, save_p99_us, save_max_us           synchronize, copy, seal, write, sync
//       release_p50_us, release_p99_us, release_max_us  decommit + host release
//       save_p99_ratio, release_p99_ratio, save_max_ratio, release_max_ratio  (/ idle's)
//       idle_calls, save_calls, release_calls, save_ms, release_ms (medians over rounds)
//     A status() that waited for the release would show a release_max near release_ms.
//
// Environment (all optional):
//   SIESTA_BENCH_DIR          snapshot directory's parent (default /tmp; a real disk)
//   SIESTA_BENCH_SIZES_MIB    session sizes (default 4096)
//   SIESTA_BENCH_POLL_US      pause between two status() calls (default 20)
//   SIESTA_BENCH_ROUNDS       rounds per size (default 3)
//
//   status_latency_bench --benchmark_out=status.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_backends.h"
#include "bench/bench_env.h"
#include "bench/bench_stats.h"
#include "bench/bench_store.h"
#include "bench/synthetic_session.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/offload/offloader.h"
#include "runtime/offload_settings.h"
#include "runtime/offload_storage.h"
#include "testing/hooked_backend.h"

namespace siesta::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// The phase a status() call started in.
enum Phase : int { kIdle, kSave, kRelease, kAfter, kPhases };

// When the measured save's phases began and ended (steady-clock ns; 0: not yet), written by
// the bench thread and the HookedBackend's hooks, read by the poller.
struct Marks {
  std::atomic<int64_t> save_start{0};
  std::atomic<int64_t> release_start{0};
  std::atomic<int64_t> release_end{0};

  Phase phase_of(int64_t t) const {
    const int64_t save = save_start.load(), release = release_start.load();
    const int64_t released = release_end.load();
    if (save == 0 || t < save) return kIdle;
    if (release == 0 || t < release) return kSave;
    if (released == 0 || t < released) return kRelease;
    return kAfter;
  }
};

// Calls status() every `pause` until stopped, keeping each call's duration (us) by phase.
class Poller {
 public:
  Poller(const Offloader& offloader, const Marks& marks, std::chrono::microseconds pause)
      : thread_([this, &offloader, &marks, pause] {
          while (!stop_.load()) {
            const int64_t start = now_ns();
            const OffloadStatus status = offloader.status();
            const int64_t end = now_ns();
            benchmark::DoNotOptimize(status);
            calls_[marks.phase_of(start)].push_back(static_cast<double>(end - start) / 1e3);
            std::this_thread::sleep_for(pause);
          }
        }) {}
  ~Poller() { stop(); }
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Stops and joins; then calls() may be read.
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<double>& calls(Phase phase) { return calls_[phase]; }

 private:
  std::atomic<bool> stop_{false};
  std::vector<double> calls_[kPhases];
  std::thread thread_;  // last: started once everything above exists
};

struct Rig {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<HookedBackend> hooked;
  HostVmm host;
  PosixFileSystem fs;
  std::unique_ptr<runtime::OffloadStorage> storage;  // the key and the store
  std::unique_ptr<SyntheticSession> session;
  std::unique_ptr<Offloader> offloader;  // after what it refers to: destroyed first
};

Status make_rig(const BenchBackend& which, uint64_t session_bytes, Executor& executor, Rig& rig) {
  BenchBackendOptions backend_options;
  backend_options.sim_capacity_bytes = session_bytes + (1ull << 30);
  SIESTA_ASSIGN_OR_RETURN(rig.backend, which.make(backend_options));
  rig.hooked = std::make_unique<HookedBackend>(*rig.backend);
  SIESTA_ASSIGN_OR_RETURN(
      rig.storage,
      runtime::OffloadStorage::open(rig.fs, SystemClock::instance(),
                                    bench_store_dir(bench_base_dir(), "siesta-status-bench")));
  SIESTA_ASSIGN_OR_RETURN(rig.session,
                          SyntheticSession::create(*rig.hooked, rig.host, session_bytes, 1.0));
  runtime::OffloadSettings settings;
  settings.config.idle_seconds = 3600;  // never fires during a run: the bench says when to save
  settings.config.expire_seconds = 7200;
  SIESTA_ASSIGN_OR_RETURN(
      rig.offloader,
      Offloader::create({*rig.session, *rig.hooked, rig.host, rig.fs, SystemClock::instance(),
                         &executor, &rig.storage->store(), &rig.storage->key()},
                        runtime::offloader_options(settings, [](const std::string&) {})));
  return Status::Ok();
}

// Waits (bounded: 10 minutes) until the offloader reports `want`.
bool until_state(const Offloader& offloader, OffloadState want) {
  const auto deadline = SteadyClock::now() + std::chrono::minutes(10);
  while (offloader.status().state != want) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void status_latency(benchmark::State& state, const BenchBackend& which, uint64_t session_mib) {
  ThreadExecutor executor(SystemClock::instance());  // saves run on their own thread
  Rig rig;
  if (Status made = make_rig(which, session_mib << 20, executor, rig); !made.ok()) {
    state.SkipWithError(made.to_string().c_str());
    return;
  }
  const std::chrono::microseconds pause(env_numbers("SIESTA_BENCH_POLL_US", "20").at(0));
  std::vector<double> calls[kPhases];
  std::vector<double> save_ms, release_ms;
  double baseline_s = 1.0;  // the first round's baseline; then the previous save's length
  for (auto _ : state) {    // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    Marks marks;
    rig.hooked->set_decommit_hooks(
        [&marks](DeviceRange) {
          int64_t unset = 0;
          marks.release_start.compare_exchange_strong(unset, now_ns());
        },
        [&marks](DeviceRange) { marks.release_end = now_ns(); });
    Poller poller(*rig.offloader, marks, pause);
    // The baseline: the same polling, the session resident and idle.
    std::this_thread::sleep_for(std::chrono::duration<double>(baseline_s));
    marks.save_start = now_ns();
    if (Status asked = rig.offloader->offload_now(); !asked.ok()) {
      state.SkipWithError(asked.to_string().c_str());
      return;
    }
    const bool saved = until_state(*rig.offloader, OffloadState::kDisk);
    poller.stop();
    rig.hooked->set_decommit_hooks({}, {});
    if (!saved || marks.release_start == 0) {
      state.SkipWithError(("save: " + rig.offloader->status().last_error).c_str());
      return;
    }
    for (int p = 0; p < kPhases; ++p) {
      calls[p].insert(calls[p].end(), poller.calls(Phase(p)).begin(), poller.calls(Phase(p)).end());
    }
    save_ms.push_back(static_cast<double>(marks.release_start - marks.save_start) / 1e6);
    release_ms.push_back(static_cast<double>(marks.release_end - marks.release_start) / 1e6);
    baseline_s = std::max(0.5, save_ms.back() / 1e3);
    // Back to resident for the next round (not measured).
    if (Result<Offloader::Lease> lease = rig.offloader->acquire(); !lease.ok()) {
      state.SkipWithError(lease.status().to_string().c_str());
      return;
    }
    state.SetIterationTime(save_ms.back() / 1e3);
  }
  const char* names[] = {"idle", "save", "release"};
  double p99[3] = {}, max[3] = {};
  for (int p = kIdle; p <= kRelease; ++p) {
    const std::string name = names[p];
    p99[p] = percentile(calls[p], 0.99);
    max[p] = percentile(calls[p], 1.0);
    state.counters[name + "_p50_us"] = percentile(calls[p], 0.50);
    state.counters[name + "_p99_us"] = p99[p];
    state.counters[name + "_max_us"] = max[p];
    state.counters[name + "_calls"] = static_cast<double>(calls[p].size());
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  state.counters["save_p99_ratio"] = ratio(p99[kSave], p99[kIdle]);
  state.counters["release_p99_ratio"] = ratio(p99[kRelease], p99[kIdle]);
  state.counters["save_max_ratio"] = ratio(max[kSave], max[kIdle]);
  state.counters["release_max_ratio"] = ratio(max[kRelease], max[kIdle]);
  state.counters["session_mib"] = static_cast<double>(session_mib);
  state.counters["save_ms"] = median(save_ms);
  state.counters["release_ms"] = median(release_ms);
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  using namespace siesta::bench;
  static const std::vector<BenchBackend> backends = available_backends("status_latency_bench");
  const std::vector<uint64_t> sizes = env_numbers("SIESTA_BENCH_SIZES_MIB", "4096");
  const auto rounds = static_cast<int64_t>(env_numbers("SIESTA_BENCH_ROUNDS", "3").at(0));
  for (const BenchBackend& backend : backends) {
    for (uint64_t mib : sizes) {
      const std::string name =
          "status_latency/" + backend.name + "/session_mib:" + std::to_string(mib);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [&backend, mib](benchmark::State& state) { status_latency(state, backend, mib); })
          ->Iterations(rounds)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
