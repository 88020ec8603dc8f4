// A session's device memory to the RAM tier and back (core/offload/ram_snapshot.h), against
// the link itself, measured in the same run and alternating with it.
//
// Per iteration, for one region of `bytes` saved whole:
//   save     RamTier::allocate + copy_to_ram, the tier's pages either
//              pool           from the PinnedRamPool, prepared (pinned) before the timing, as
//                             the server runs it, or
//              pin_per_block  mapped and registered for each block, on the save's time (the
//                             server's fallback when the pool's addresses cannot be reserved)
//   restore  copy_from_ram
//   baseline the same bytes copied device -> host and host -> device between the same device
//            memory and host memory registered once before the loop, in 64 MiB pieces
//            (copy_to_host / copy_from_host, waited for once): the link's rate with pinning
//            paid up front.
// Counters: save_ms, restore_ms, link_out_ms, link_in_ms, and save_vs_link / restore_vs_link
// (the link's time divided by the tier's: 1 is link speed). SIESTA_BENCH_RAM_SIZES_MIB picks
// the sizes (default 256,1024,4096). Labels: ram_tier/<backend>/<pages>/<size>.
//
//   build/release/bench/ram_tier_copy_bench --benchmark_filter=cuda
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_backends.h"
#include "bench/bench_env.h"
#include "bench/bench_main.h"
#include "core/offload/pinned_ram_pool.h"
#include "core/offload/ram_snapshot.h"
#include "core/offload/ram_tier.h"

namespace siesta {
namespace {

using bench::BackendFactory;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kPiece = 64 * kMiB;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The baseline's host memory: mapped and registered once, for the whole run.
class PinnedHost {
 public:
  PinnedHost(MemoryBackend& backend, uint64_t bytes) : backend_(backend), bytes_(bytes) {
    void* pages =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) return;
    data_ = static_cast<std::byte*>(pages);
    status_ = backend_.register_host({data_, bytes_});
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (data_ == nullptr) return;
    if (status_.ok()) backend_.unregister_host(data_);
    ::munmap(data_, bytes_);
  }
  Status status() const { return data_ == nullptr ? OutOfMemory("mmap failed") : status_; }
  std::byte* data() const { return data_; }

 private:
  MemoryBackend& backend_;
  uint64_t bytes_;
  std::byte* data_ = nullptr;
  Status status_;
};

Status link_copy(MemoryBackend& backend, DeviceAddress device, std::byte* host, uint64_t bytes,
                 bool to_host) {
  CopyTicket last;
  for (uint64_t done = 0; done < bytes; done += kPiece) {
    const uint64_t length = std::min(kPiece, bytes - done);
    Result<CopyTicket> ticket = to_host
                                    ? backend.copy_to_host(device + done, length, host + done)
                                    : backend.copy_from_host(host + done, length, device + done);
    if (!ticket.ok()) return ticket.status();
    last = *ticket;
  }
  return backend.wait(last);
}

enum class Pages { kPool, kPinPerBlock };

// The tier's pages; for the pool, prepared for a block of `bytes` before the timing starts
// (the first request is refused and makes the pool prepare that much; it keeps room for the
// largest block asked for from then on).
Result<std::unique_ptr<RamTier>> make_tier(MemoryBackend& backend, Pages pages, uint64_t bytes) {
  const uint64_t budget = bytes + kMiB;
  if (pages == Pages::kPinPerBlock) {
    return std::make_unique<RamTier>(budget, std::make_unique<RegisteredRamPages>(
                                                 backend, std::make_unique<AnonymousRamPages>()));
  }
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<PinnedRamPool> pool,
                          PinnedRamPool::create(backend, budget));
  auto tier = std::make_unique<RamTier>(budget, std::move(pool));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (;;) {
    Result<RamBlock> block = tier->allocate(bytes);
    if (block.ok()) return tier;  // the block goes back at once; its room stays prepared
    if (std::chrono::steady_clock::now() > deadline) return block.status();
    std::this_thread::yield();
  }
}

void ram_tier_round_trip(benchmark::State& state, const BackendFactory& factory, Pages pages,
                         uint64_t bytes) {
  auto backend = factory({.sim_capacity_bytes = 2 * bytes});
  if (!backend.ok()) {
    state.SkipWithError(("backend unavailable: " + backend.status().to_string()).c_str());
    return;
  }
  MemoryBackend& b = **backend;
  auto reserved = ReservedRange::reserve(b, bytes);
  if (!reserved.ok() || !b.commit(reserved->range()).ok() || !b.zero(reserved->range()).ok() ||
      !b.synchronize().ok()) {
    state.SkipWithError("reserve/commit failed");
    return;
  }
  PinnedHost pinned(b, bytes);
  if (!pinned.status().ok()) {
    state.SkipWithError(("pinned baseline: " + pinned.status().to_string()).c_str());
    return;
  }
  Result<std::unique_ptr<RamTier>> made = make_tier(b, pages, bytes);
  if (!made.ok()) {
    state.SkipWithError(("RAM tier: " + made.status().to_string()).c_str());
    return;
  }
  RamTier& tier = **made;
  SnapshotRegion region;
  region.layout = {"kv", snapshot::PersistKind::kContents, bytes, {{0, bytes}}};
  region.place = SnapshotRegion::Place::kDevice;
  region.device = reserved->range().base;
  const std::vector<SnapshotRegion> regions{region};

  double save = 0, restore = 0, link_out = 0, link_in = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    Result<RamSnapshot> ram = copy_to_ram(tier, b, regions, nullptr, {});
    save += seconds_since(start);
    if (!ram.ok()) {
      state.SkipWithError(("save to RAM: " + ram.status().to_string()).c_str());
      return;
    }
    start = std::chrono::steady_clock::now();
    Status back = copy_from_ram(*ram, b, regions);
    restore += seconds_since(start);
    state.PauseTiming();
    start = std::chrono::steady_clock::now();
    Status out = link_copy(b, region.device, pinned.data(), bytes, /*to_host=*/true);
    link_out += seconds_since(start);
    start = std::chrono::steady_clock::now();
    Status in = link_copy(b, region.device, pinned.data(), bytes, /*to_host=*/false);
    link_in += seconds_since(start);
    ram->block.reset();  // the tier's pages go back (unpinned, unmapped) outside the timing
    state.ResumeTiming();
    for (const Status& s : {back, out, in}) {
      if (!s.ok()) {
        state.SkipWithError(s.to_string().c_str());
        return;
      }
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["save_ms"] = save / n * 1e3;
  state.counters["restore_ms"] = restore / n * 1e3;
  state.counters["link_out_ms"] = link_out / n * 1e3;
  state.counters["link_in_ms"] = link_in / n * 1e3;
  state.counters["save_vs_link"] = link_out / save;
  state.counters["restore_vs_link"] = link_in / restore;
  state.counters["link_GB_per_s"] = static_cast<double>(bytes) * n / link_out / 1e9;
  (void)b.decommit(reserved->range());
}

void register_all() {
  const std::vector<uint64_t> sizes =
      bench::env_numbers("SIESTA_BENCH_RAM_SIZES_MIB", "256,1024,4096");
  for (const auto& backend : bench::available_backends("ram_tier_copy_bench")) {
    for (auto [pages, pages_name] :
         {std::pair{Pages::kPool, "pool"}, std::pair{Pages::kPinPerBlock, "pin_per_block"}}) {
      for (uint64_t mib : sizes) {
        const std::string label =
            "ram_tier/" + backend.name + "/" + pages_name + "/" + std::to_string(mib) + "MiB";
        benchmark::RegisterBenchmark(label.c_str(), ram_tier_round_trip, backend.make, pages,
                                     mib * kMiB)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->Iterations(5);
      }
    }
  }
}

}  // namespace
}  // namespace siesta

int main(int argc, char** argv) {
  return siesta::bench::run_registered(argc, argv, siesta::register_all);
}
