// How the physical chunk size of a commit changes the cost of commit + decommit, on every
// backend this build has (the simulator always; CUDA where a device is present).
//
// Baseline, measured in the same run on the same backend, its cycles alternating with the
// measured ones: the whole range committed as ONE chunk. Each result's `vs_one_chunk` counter
// is its time divided by that baseline's, so 1.0 means "as cheap as one chunk". Measured with
// the driver API alone on the H200: 2 MiB chunks cost ~26 ms/GiB, 1 GiB chunks ~0.14 ms/GiB; this
// is where the backends' default chunk sizes come from.
//
//   build/release/bench/commit_chunk_bench --benchmark_format=json --benchmark_out=commit.json
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_backends.h"
#include "bench/bench_main.h"

namespace siesta {
namespace {

using bench::BackendFactory;
using bench::BenchBackendOptions;

constexpr size_t kMiB = 1u << 20;
constexpr size_t kRangeBytes = 1024 * kMiB;

// Small staging ring: this benchmark copies nothing.
BenchBackendOptions options_for_chunk(size_t chunk_bytes) {
  return {.max_chunk_bytes = chunk_bytes,
          .staging_buffer_bytes = kMiB,
          .staging_buffer_count = 1,
          .sim_capacity_bytes = 2 * kRangeBytes};
}

// One commit + decommit cycle of `range`; returns its seconds, or a negative value and the
// error in `failure`.
double timed_cycle(MemoryBackend& backend, DeviceRange range, Status* failure) {
  auto start = std::chrono::steady_clock::now();
  Status committed = backend.commit(range);
  Status decommitted = committed.ok() ? backend.decommit(range) : Status::Ok();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!committed.ok() || !decommitted.ok()) {
    *failure = committed.ok() ? decommitted : committed;
    return -1;
  }
  return seconds;
}

void commit_decommit(benchmark::State& state, const BackendFactory& factory) {
  const size_t chunk_bytes = static_cast<size_t>(state.range(0)) * kMiB;
  // The measured backend and the baseline's (the whole range as one chunk) live side by side
  // and their cycles alternate, so both see the same device and driver state: a drift over
  // the run (deferred frees, clocks) moves both figures, not their ratio.
  auto backend = factory(options_for_chunk(chunk_bytes));
  auto one_chunk = factory(options_for_chunk(kRangeBytes));
  if (!backend.ok() || !one_chunk.ok()) {
    Status failed = backend.ok() ? one_chunk.status() : backend.status();
    state.SkipWithError(("backend unavailable: " + failed.to_string()).c_str());
    return;
  }
  auto reserved = ReservedRange::reserve(**backend, kRangeBytes);
  auto baseline_reserved = ReservedRange::reserve(**one_chunk, kRangeBytes);
  if (!reserved.ok() || !baseline_reserved.ok()) {
    state.SkipWithError("reserve failed");
    return;
  }

  double seconds = 0;
  double baseline_seconds = 0;
  Status failure;
  bool baseline_first = false;
  for (auto _ : state) {
    // Which goes first alternates, so neither always runs right after the other's release.
    double measured = 0;
    double baseline = 0;
    state.PauseTiming();
    if (baseline_first) baseline = timed_cycle(**one_chunk, baseline_reserved->range(), &failure);
    state.ResumeTiming();
    measured = timed_cycle(**backend, reserved->range(), &failure);
    state.PauseTiming();
    if (!baseline_first) baseline = timed_cycle(**one_chunk, baseline_reserved->range(), &failure);
    state.ResumeTiming();
    baseline_first = !baseline_first;
    if (measured < 0 || baseline < 0) {
      state.SkipWithError(failure.to_string().c_str());
      return;
    }
    seconds += measured;
    baseline_seconds += baseline;
  }
  const double gib = static_cast<double>(kRangeBytes) / static_cast<double>(1u << 30);
  const double cycles = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRangeBytes));
  state.counters["chunk_MiB"] = static_cast<double>(state.range(0));
  state.counters["ms_per_GiB"] = 1e3 * seconds / cycles / gib;
  state.counters["baseline_ms_per_GiB"] = 1e3 * baseline_seconds / cycles / gib;
  state.counters["vs_one_chunk"] = seconds / baseline_seconds;
}

void register_all() {
  for (const auto& backend : bench::available_backends("commit_chunk_bench")) {
    benchmark::RegisterBenchmark(("commit_decommit_1GiB/" + backend.name).c_str(), commit_decommit,
                                 backend.make)
        ->ArgName("chunk_MiB")
        ->Arg(2)
        ->Arg(64)
        ->Arg(256)
        ->Arg(1024)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace siesta

int main(int argc, char** argv) {
  return siesta::bench::run_registered(argc, argv, siesta::register_all);
}
