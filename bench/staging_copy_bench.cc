// Throughput of whole-buffer copies between host memory and a device through the backend's
// staging ring (core/memory/device_copy.h), on every backend this build has.
//
// Baseline, measured in the same run, alternating with the measured copies: a host memcpy of
// the same bytes between the same host buffer and a second one. `vs_memcpy` is the copy's
// throughput divided by that memcpy's. device_copy moves each chunk through a pinned buffer
// with a memcpy on the calling thread, so on the simulator (where the "device" copy is a
// memcpy too) about 0.5 is the ceiling; on CUDA the PCIe copies overlap those memcpys.
//
//   build/release/bench/staging_copy_bench --benchmark_format=json --benchmark_out=copy.json
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_backends.h"
#include "bench/bench_main.h"
#include "core/memory/device_copy.h"

namespace siesta {
namespace {

using bench::BackendFactory;

constexpr size_t kMiB = 1u << 20;
constexpr size_t kBytes = 512 * kMiB;

enum class Direction { kToDevice, kToHost };

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void copy_through_staging(benchmark::State& state, const BackendFactory& factory,
                          Direction direction) {
  auto backend = factory({.sim_capacity_bytes = 2 * kBytes});
  if (!backend.ok()) {
    state.SkipWithError(("backend unavailable: " + backend.status().to_string()).c_str());
    return;
  }
  auto reserved = ReservedRange::reserve(**backend, kBytes);
  if (!reserved.ok() || !(*backend)->commit(reserved->range()).ok()) {
    state.SkipWithError("reserve/commit failed");
    return;
  }
  const DeviceAddress device = reserved->range().base;
  std::vector<std::byte> host(kBytes, std::byte{0x5a});
  std::vector<std::byte> other(kBytes, std::byte{0});

  double copy_seconds = 0;
  double memcpy_seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    Status copied = direction == Direction::kToDevice
                        ? copy_host_to_device(**backend, host, device)
                        : copy_device_to_host(**backend, device, host);
    copy_seconds += seconds_since(start);
    state.PauseTiming();
    start = std::chrono::steady_clock::now();
    std::memcpy(other.data(), host.data(), kBytes);
    benchmark::DoNotOptimize(other.data());
    memcpy_seconds += seconds_since(start);
    state.ResumeTiming();
    if (!copied.ok()) {
      state.SkipWithError(copied.to_string().c_str());
      return;
    }
  }
  const double bytes = static_cast<double>(kBytes) * static_cast<double>(state.iterations());
  state.counters["GB_per_s"] = bytes / copy_seconds / 1e9;
  state.counters["memcpy_GB_per_s"] = bytes / memcpy_seconds / 1e9;
  state.counters["vs_memcpy"] = memcpy_seconds / copy_seconds;
  (void)(*backend)->decommit(reserved->range());
}

void register_all() {
  for (const auto& backend : bench::available_backends("staging_copy_bench")) {
    for (Direction direction : {Direction::kToDevice, Direction::kToHost}) {
      std::string label = std::string("copy_512MiB/") + backend.name +
                          (direction == Direction::kToDevice ? "/to_device" : "/to_host");
      benchmark::RegisterBenchmark(label.c_str(), copy_through_staging, backend.make, direction)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Iterations(8);
    }
  }
}

}  // namespace
}  // namespace siesta

int main(int argc, char** argv) {
  return siesta::bench::run_registered(argc, argv, siesta::register_all);
}
