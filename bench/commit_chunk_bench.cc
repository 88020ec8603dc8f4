// How the physical chunk size of a commit changes the cost of commit + decommit, on every
// backend this build has (the simulator always; CUDA where a device is present).
//
// Baseline, measured in the same run on the same backend: the whole range committed as ONE
// chunk. Each result's `vs_one_chunk` counter is its time divided by that baseline, so a
// figure of 1.0 means "as cheap as the cheapest possible commit". ANCHORS.md measured on the
// H200: 2 MiB chunks cost ~26 ms/GiB, 1 GiB chunks ~0.14 ms/GiB; this is where the backends'
// default chunk sizes come from.
//
//   build/release/bench/commit_chunk_bench --benchmark_format=json --benchmark_out=commit.json
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#ifdef SIESTA_WITH_CUDA
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#endif

namespace siesta {
namespace {

constexpr size_t kMiB = 1u << 20;
constexpr size_t kRangeBytes = 1024 * kMiB;

using BackendFactory = std::function<Result<std::unique_ptr<MemoryBackend>>(size_t chunk_bytes)>;

Result<std::unique_ptr<MemoryBackend>> make_sim(size_t chunk_bytes) {
  SimBackendOptions options;
  options.capacity_bytes = 2 * kRangeBytes;
  options.max_chunk_bytes = chunk_bytes;
  options.staging_buffer_bytes = kMiB;
  options.staging_buffer_count = 1;
  auto backend = SimBackend::create(options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<MemoryBackend>(std::move(backend).value());
}

#ifdef SIESTA_WITH_CUDA
Result<std::unique_ptr<MemoryBackend>> make_cuda(size_t chunk_bytes) {
  CudaVmmOptions options;
  options.max_chunk_bytes = chunk_bytes;
  options.staging_buffer_bytes = kMiB;
  options.staging_buffer_count = 1;
  auto backend = CudaVmmBackend::create(options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<MemoryBackend>(std::move(backend).value());
}
#endif

// Seconds per commit+decommit cycle of the one-chunk baseline, per backend, measured once.
std::map<std::string, double>& baseline_seconds() {
  static std::map<std::string, double> seconds;
  return seconds;
}

double time_cycles(MemoryBackend& backend, DeviceRange range, int cycles) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < cycles; ++i) {
    if (!backend.commit(range).ok() || !backend.decommit(range).ok()) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / cycles;
}

void commit_decommit(benchmark::State& state, std::string backend_name, BackendFactory factory) {
  const size_t chunk_bytes = static_cast<size_t>(state.range(0)) * kMiB;
  auto backend = factory(chunk_bytes);
  if (!backend.ok()) {
    state.SkipWithError(("backend unavailable: " + backend.status().to_string()).c_str());
    return;
  }
  auto reserved = ReservedRange::reserve(**backend, kRangeBytes);
  if (!reserved.ok()) {
    state.SkipWithError(reserved.status().to_string().c_str());
    return;
  }
  DeviceRange range = reserved->range();

  double& baseline = baseline_seconds()[backend_name];
  if (baseline == 0) {
    auto one_chunk = factory(kRangeBytes);
    if (one_chunk.ok()) {
      auto whole = ReservedRange::reserve(**one_chunk, kRangeBytes);
      if (whole.ok()) {
        time_cycles(**one_chunk, whole->range(), 1);  // warm-up
        baseline = time_cycles(**one_chunk, whole->range(), 5);
      }
    }
  }

  double seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    Status committed = (*backend)->commit(range);
    Status decommitted = (*backend)->decommit(range);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!committed.ok() || !decommitted.ok()) {
      state.SkipWithError((committed.ok() ? decommitted : committed).to_string().c_str());
      return;
    }
  }
  const double per_cycle = seconds / static_cast<double>(state.iterations());
  const double gib = static_cast<double>(kRangeBytes) / static_cast<double>(1u << 30);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRangeBytes));
  state.counters["chunk_MiB"] = static_cast<double>(state.range(0));
  state.counters["ms_per_GiB"] = 1e3 * per_cycle / gib;
  if (baseline > 0) {
    state.counters["baseline_ms_per_GiB"] = 1e3 * baseline / gib;
    state.counters["vs_one_chunk"] = per_cycle / baseline;
  }
}

void register_all() {
  std::vector<std::pair<std::string, BackendFactory>> backends = {{"sim", make_sim}};
#ifdef SIESTA_WITH_CUDA
  if (CudaVmmBackend::unavailable_reason().empty()) {
    backends.emplace_back("cuda", make_cuda);
  } else {
    std::fprintf(stderr, "commit_chunk_bench: skipping cuda: %s\n",
                 CudaVmmBackend::unavailable_reason().c_str());
  }
#endif
  for (auto& [name, factory] : backends) {
    benchmark::RegisterBenchmark(("commit_decommit_1GiB/" + name).c_str(), commit_decommit, name,
                                 factory)
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
  benchmark::Initialize(&argc, argv);
  siesta::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
