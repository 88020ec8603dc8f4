// The offload path against the hardware limit, per backend ("sim" always, "cuda"
// where a device is present), on SyntheticSession sessions of any size:
//
//   save_restore/<backend>/session_mib:<S>/used_pct:<U>
//     The Offloader's save (synchronize, copy out, seal on worker threads, write, fdatasync,
//     rename, directory fsync, release) and restore (commit, read, verify, copy in), each
//     beside a baseline on the same bytes in the same run: the plain hardware path with no
//     format, two staging buffers so the copy of the next chunk overlaps the write of this
//     one -- copy out + write + fdatasync for the save, read + copy in for the restore.
//     Counters (throughput is payload bytes per second, the same bytes for both; medians over
//     rounds that alternate which goes first, ratios taken per round):
//       save_gb_s, save_baseline_gb_s, save_ratio (= baseline time / save time; target >= 0.8)
//       restore_gb_s, restore_baseline_gb_s, restore_ratio (target >= 0.8)
//       restore_fresh_baseline_gb_s, restore_fresh_ratio: the restore baseline with the
//         release and commit of fresh memory included, as every restore must do
//       restore_parallel_baseline_gb_s, restore_parallel_ratio: the raw read + copy in on as
//         many threads as the restore reads on (each its own staging buffer and a share of
//         the chunks): the most a restore with no format could do on them
//       session_mib, used_pct, payload_bytes, snapshot_bytes, released_bytes
//
//   mid_save_wait/<backend>/session_mib:<S>
//     A request arriving at a random moment of a save (ThreadExecutor: the save runs on its
//     own thread): the time acquire() takes, p50/p99/max in ms (target: p99 <= 50 ms), over
//     SIESTA_BENCH_TRIALS requests that landed mid-save. A request whose save finished before
//     it came is counted in `missed` and left out (that request restores; it is not mid-save).
//
// Environment (all optional):
//   SIESTA_BENCH_DIR              snapshot directory's parent (default /tmp; use a real disk:
//                                 tmpfs makes fdatasync free)
//   SIESTA_BENCH_SIZES_MIB        session sizes for save_restore (default 64,256,1024,4096)
//   SIESTA_BENCH_USED_PCT         used fractions (default 10,25,50,100)
//   SIESTA_BENCH_WAIT_SIZES_MIB   session sizes for mid_save_wait (default 64,1024)
//   SIESTA_BENCH_TRIALS           mid-save requests per size (default 100; at most 4x as
//                                 many tries)
//   SIESTA_BENCH_ENCRYPT          on (AES-256-GCM, default) or off (digests)
//   SIESTA_BENCH_LOG              1: the Offloader's log lines on stderr (restore breakdown)
//   SIESTA_BENCH_THREADS          the Offloader's snapshot threads (default 0: the library's)
//   SIESTA_BENCH_HOST_KIB         the session's host region (default 1024; 0: none), whose
//                                 pages a restore maps fresh
//   SIESTA_BENCH_STAGING_COUNT,   the backend's staging ring (buffers, MiB each) and the
//   SIESTA_BENCH_STAGING_MIB,     snapshot's chunk size (MiB), instead of the defaults: how
//   SIESTA_BENCH_CHUNK_MIB        deep the copy/seal/write pipeline can be (chunk: 0, the
//                                 default, cuts each file to the read threads)
//
//   offload_throughput_bench --benchmark_out=offload.json --benchmark_out_format=json
//   bench/plot_offload.py --out DIR offload.json ...   (docs/PERFORMANCE.md)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
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
#include "core/snapshot/snapshot_threads.h"
#include "runtime/offload_settings.h"
#include "runtime/offload_storage.h"

namespace siesta::bench {
namespace {

using Seconds = std::chrono::duration<double>;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return Seconds(std::chrono::steady_clock::now() - start).count();
}

// Everything one measurement needs: a backend, a session on it, and its Offloader. Declared in
// dependency order, so the Offloader goes first, then the session it saves, then the store.
struct Rig {
  std::unique_ptr<MemoryBackend> backend;
  HostVmm host;
  PosixFileSystem fs;
  std::unique_ptr<runtime::OffloadStorage> storage;  // the key and the store
  std::unique_ptr<SyntheticSession> session;
  std::unique_ptr<Offloader> offloader;
  std::string dir;
};

// SIESTA_BENCH_THREADS: the Offloader's snapshot threads (0: the library's default).
uint32_t bench_snapshot_threads() {
  return static_cast<uint32_t>(env_numbers("SIESTA_BENCH_THREADS", "0").at(0));
}

Status make_rig(const BenchBackend& which, uint64_t session_bytes, double used_fraction,
                Executor& executor, Rig& rig) {
  BenchBackendOptions backend_options;
  backend_options.sim_capacity_bytes = session_bytes + (1ull << 30);
  backend_options.staging_buffer_count = env_numbers("SIESTA_BENCH_STAGING_COUNT", "0").at(0);
  backend_options.staging_buffer_bytes = env_numbers("SIESTA_BENCH_STAGING_MIB", "0").at(0) << 20;
  SIESTA_ASSIGN_OR_RETURN(rig.backend, which.make(backend_options));
  rig.dir = bench_store_dir(bench_base_dir(), "siesta-throughput-bench");
  SIESTA_ASSIGN_OR_RETURN(rig.storage,
                          runtime::OffloadStorage::open(rig.fs, SystemClock::instance(), rig.dir));
  SIESTA_ASSIGN_OR_RETURN(
      rig.session,
      SyntheticSession::create(*rig.backend, rig.host, session_bytes, used_fraction,
                               env_numbers("SIESTA_BENCH_HOST_KIB", "1024").at(0) << 10));
  runtime::OffloadSettings settings;
  settings.config.idle_seconds = 3600;  // never fires during a run: the bench says when to save
  settings.config.expire_seconds = 7200;
  settings.config.encrypt = env_text("SIESTA_BENCH_ENCRYPT", "on") != "off";
  // SIESTA_BENCH_LOG=1: the Offloader's own log lines (each restore's commit/read/retire
  // breakdown) on stderr.
  const bool log = env_text("SIESTA_BENCH_LOG", "0") == "1";
  OffloaderOptions options = runtime::offloader_options(
      settings, log ? runtime::LogLine() : [](const std::string&) {});
  if (const uint64_t chunk_mib = env_numbers("SIESTA_BENCH_CHUNK_MIB", "0").at(0); chunk_mib != 0) {
    options.chunk_bytes = static_cast<uint32_t>(chunk_mib << 20);
  }
  options.snapshot_threads = bench_snapshot_threads();
  SIESTA_ASSIGN_OR_RETURN(
      rig.offloader,
      Offloader::create({*rig.session, *rig.backend, rig.host, rig.fs, SystemClock::instance(),
                         &executor, &rig.storage->store(), &rig.storage->key()},
                        options));
  return Status::Ok();
}

// ---- The baseline: the same payload over the plain hardware path ------------------------------

// One staging-buffer-sized piece of the payload and where it lies in the baseline file.
struct RawChunk {
  bool on_device;
  DeviceAddress device;
  std::byte* host;
  size_t bytes;
  uint64_t offset;
};

std::vector<RawChunk> raw_chunks(const SyntheticSession& session, size_t chunk_bytes) {
  std::vector<RawChunk> out;
  uint64_t offset = 0;
  for (const SyntheticSession::Piece& piece : session.pieces()) {
    for (uint64_t done = 0; done < piece.bytes;) {
      const size_t n = std::min<uint64_t>(chunk_bytes, piece.bytes - done);
      out.push_back({piece.on_device, piece.device + done,
                     piece.host == nullptr ? nullptr : piece.host + done, n, offset});
      offset += n;
      done += n;
    }
  }
  return out;
}

// Copy out + write + fdatasync: two staging buffers, the copy of chunk k+1 in flight while
// chunk k is written. Returns seconds.
Result<double> baseline_save(Rig& rig, const std::string& path) {
  MemoryBackend& backend = *rig.backend;
  const std::vector<RawChunk> chunks = raw_chunks(*rig.session, backend.staging_buffer_bytes());
  const auto start = std::chrono::steady_clock::now();
  SIESTA_RETURN_IF_ERROR(backend.synchronize());
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, rig.fs.create_exclusive(path, 0600));
  StagingBuffer buffers[2];
  for (StagingBuffer& buffer : buffers) {
    SIESTA_ASSIGN_OR_RETURN(buffer, backend.acquire_staging());
  }
  CopyTicket tickets[2];
  auto start_copy = [&](size_t k) -> Status {
    if (k >= chunks.size() || !chunks[k].on_device) return Status::Ok();
    SIESTA_ASSIGN_OR_RETURN(
        tickets[k % 2], backend.copy_to_staging(chunks[k].device, chunks[k].bytes, buffers[k % 2]));
    return Status::Ok();
  };
  SIESTA_RETURN_IF_ERROR(start_copy(0));
  for (size_t k = 0; k < chunks.size(); ++k) {
    const RawChunk& chunk = chunks[k];
    if (chunk.on_device) SIESTA_RETURN_IF_ERROR(backend.wait(tickets[k % 2]));
    SIESTA_RETURN_IF_ERROR(start_copy(k + 1));  // into the other buffer, already written
    const std::byte* from = chunk.on_device ? buffers[k % 2].bytes().data() : chunk.host;
    SIESTA_RETURN_IF_ERROR(file->write_at(chunk.offset, {from, chunk.bytes}));
  }
  SIESTA_RETURN_IF_ERROR(file->sync());
  SIESTA_RETURN_IF_ERROR(file->close());
  return seconds_since(start);
}

// Read + copy in: the read of chunk k+1 overlaps the copy of chunk k. With `fresh_memory`, the
// session's device memory is first released and committed again (timed), as a restore must:
// on the simulator, fresh memory costs a page fault per 4 KiB at its first touch, a cost of
// the simulated device that no restore can avoid. Returns seconds.
Result<double> baseline_restore(Rig& rig, const std::string& path, bool fresh_memory) {
  MemoryBackend& backend = *rig.backend;
  const std::vector<RawChunk> chunks = raw_chunks(*rig.session, backend.staging_buffer_bytes());
  const auto start = std::chrono::steady_clock::now();
  if (fresh_memory) {
    for (const DeviceRange& range : rig.session->device_memory()) {
      SIESTA_RETURN_IF_ERROR(backend.decommit(range));
      SIESTA_RETURN_IF_ERROR(backend.commit(range));
    }
  }
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, rig.fs.open_readable(path));
  StagingBuffer buffers[2];
  for (StagingBuffer& buffer : buffers) {
    SIESTA_ASSIGN_OR_RETURN(buffer, backend.acquire_staging());
  }
  bool in_flight[2] = {false, false};
  CopyTicket tickets[2];
  for (size_t k = 0; k < chunks.size(); ++k) {
    const RawChunk& chunk = chunks[k];
    std::span<std::byte> into{chunk.host, chunk.bytes};
    if (chunk.on_device) {
      if (in_flight[k % 2]) SIESTA_RETURN_IF_ERROR(backend.wait(tickets[k % 2]));
      into = buffers[k % 2].bytes().first(chunk.bytes);
    }
    SIESTA_ASSIGN_OR_RETURN(size_t got, file->read_at(chunk.offset, into));
    if (got != chunk.bytes) return Internal("baseline file is short");
    if (chunk.on_device) {
      SIESTA_ASSIGN_OR_RETURN(tickets[k % 2],
                              backend.copy_from_staging(buffers[k % 2], chunk.bytes, chunk.device));
      in_flight[k % 2] = true;
    }
  }
  SIESTA_RETURN_IF_ERROR(backend.synchronize());
  return seconds_since(start);
}

// Read + copy in on `threads` threads (at most one per staging buffer): thread t reads chunks
// t, t + threads, ... into its own buffer and copies each in, waiting for the buffer's previous
// copy first. Returns seconds.
Result<double> baseline_restore_parallel(Rig& rig, const std::string& path, size_t threads) {
  MemoryBackend& backend = *rig.backend;
  threads = std::clamp<size_t>(threads, 1, backend.staging_buffer_count());
  const std::vector<RawChunk> chunks = raw_chunks(*rig.session, backend.staging_buffer_bytes());
  const auto start = std::chrono::steady_clock::now();
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, rig.fs.open_readable(path));
  std::vector<StagingBuffer> buffers(threads);
  for (StagingBuffer& buffer : buffers) {
    SIESTA_ASSIGN_OR_RETURN(buffer, backend.acquire_staging());
  }
  std::vector<Status> outcomes(threads);
  auto work = [&](size_t t) -> Status {
    std::optional<CopyTicket> in_flight;
    for (size_t k = t; k < chunks.size(); k += threads) {
      const RawChunk& chunk = chunks[k];
      std::span<std::byte> into{chunk.host, chunk.bytes};
      if (chunk.on_device) {
        if (in_flight) SIESTA_RETURN_IF_ERROR(backend.wait(*in_flight));
        in_flight.reset();
        into = buffers[t].bytes().first(chunk.bytes);
      }
      SIESTA_ASSIGN_OR_RETURN(const size_t got, file->read_at(chunk.offset, into));
      if (got != chunk.bytes) return Internal("baseline file is short");
      if (chunk.on_device) {
        SIESTA_ASSIGN_OR_RETURN(in_flight,
                                backend.copy_from_staging(buffers[t], chunk.bytes, chunk.device));
      }
    }
    return in_flight ? backend.wait(*in_flight) : Status::Ok();
  };
  {
    std::vector<std::jthread> workers;
    workers.reserve(threads);
    for (size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { outcomes[t] = work(t); });
    }
  }
  for (const Status& outcome : outcomes) SIESTA_RETURN_IF_ERROR(outcome);
  SIESTA_RETURN_IF_ERROR(backend.synchronize());
  return seconds_since(start);
}

// ---- save_restore --------------------------------------------------------------------------

// One round's times in seconds, the offload and its baselines on the same bytes.
struct Round {
  double save = 0, restore = 0;  // the Offloader's own measurements
  double base_save = 0, base_restore = 0, fresh_restore = 0, parallel_restore = 0;
  uint64_t snapshot_bytes = 0, released_bytes = 0;
};

// The baselines, while the memory is resident; the restore baselines write the same bytes
// back, so the session is unchanged.
Status measure_baselines(Rig& rig, Round& round) {
  const std::string path = rig.dir + "/baseline-" + std::to_string(::getpid()) + ".raw";
  Result<double> raw_save = baseline_save(rig, path);
  Result<double> raw_restore =
      raw_save.ok() ? baseline_restore(rig, path, false) : raw_save.status();
  Result<double> fresh =
      raw_restore.ok() ? baseline_restore(rig, path, true) : raw_restore.status();
  Result<double> parallel =
      fresh.ok() ? baseline_restore_parallel(
                       rig, path, resolve_snapshot_read_threads(bench_snapshot_threads()))
                 : fresh.status();
  (void)rig.fs.remove(path);
  if (!parallel.ok()) return parallel.status();
  round.parallel_restore = *parallel;
  round.base_save = *raw_save;
  round.base_restore = *raw_restore;
  round.fresh_restore = *fresh;
  return Status::Ok();
}

// A save through the Offloader (run inside run_due()) and the restore of the next command.
Status measure_offload(Rig& rig, ManualExecutor& executor, Round& round) {
  SIESTA_RETURN_IF_ERROR(rig.offloader->offload_now());
  executor.run_due();
  const OffloadStatus slept = rig.offloader->status();
  if (slept.state != OffloadState::kDisk)
    return Internal("save did not complete: " + slept.last_error);
  Admission woke;
  {
    SIESTA_ASSIGN_OR_RETURN(const Offloader::Lease lease, rig.offloader->acquire());
    woke = lease.admission();
  }
  executor.run_due();  // the restored file's unlink, which the restore posted: timed by no one
  if (!woke.restored) return Internal("restore: history not restored");
  round.save = slept.last_save_ms / 1e3;
  round.restore = rig.offloader->status().last_restore_ms / 1e3;
  round.snapshot_bytes = slept.disk_bytes;
  round.released_bytes = slept.released_vram_bytes;
  return Status::Ok();
}

// Disks (a VM's above all) vary by several times from one second to the next, so each round
// measures the offload and its baselines back to back, alternating which goes first, and the
// figures are medians over rounds: ratios per round, then their median.
void save_restore(benchmark::State& state, const BenchBackend& which, uint64_t session_mib,
                  uint64_t used_pct) {
  ManualExecutor executor(SystemClock::instance());  // the save runs inside run_due()
  Rig rig;
  if (Status made = make_rig(which, session_mib << 20, used_pct / 100.0, executor, rig);
      !made.ok()) {
    state.SkipWithError(made.to_string().c_str());
    return;
  }
  const double payload = static_cast<double>(rig.session->payload_bytes());
  std::vector<Round> rounds;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    Round round;
    const bool baseline_first = rounds.size() % 2 == 0;
    Status measured =
        baseline_first ? measure_baselines(rig, round) : measure_offload(rig, executor, round);
    if (measured.ok()) {
      measured =
          baseline_first ? measure_offload(rig, executor, round) : measure_baselines(rig, round);
    }
    if (!measured.ok()) {
      state.SkipWithError(measured.to_string().c_str());
      return;
    }
    state.SetIterationTime(round.save + round.restore);
    rounds.push_back(round);
  }
  auto med = [&](auto field) {
    std::vector<double> values;
    values.reserve(rounds.size());
    for (const Round& round : rounds) values.push_back(field(round));
    return median(values);
  };
  auto rate = [&](double seconds) { return payload / seconds / 1e9; };
  state.counters["session_mib"] = static_cast<double>(session_mib);
  state.counters["used_pct"] = static_cast<double>(used_pct);
  state.counters["payload_bytes"] = payload;
  state.counters["snapshot_bytes"] = static_cast<double>(rounds.back().snapshot_bytes);
  state.counters["released_bytes"] = static_cast<double>(rounds.back().released_bytes);
  state.counters["save_gb_s"] = rate(med([](const Round& r) { return r.save; }));
  state.counters["save_baseline_gb_s"] = rate(med([](const Round& r) { return r.base_save; }));
  state.counters["save_ratio"] = med([](const Round& r) { return r.base_save / r.save; });
  state.counters["restore_gb_s"] = rate(med([](const Round& r) { return r.restore; }));
  state.counters["restore_baseline_gb_s"] =
      rate(med([](const Round& r) { return r.base_restore; }));
  state.counters["restore_ratio"] = med([](const Round& r) { return r.base_restore / r.restore; });
  state.counters["restore_fresh_baseline_gb_s"] =
      rate(med([](const Round& r) { return r.fresh_restore; }));
  state.counters["restore_fresh_ratio"] =
      med([](const Round& r) { return r.fresh_restore / r.restore; });
  state.counters["restore_parallel_baseline_gb_s"] =
      rate(med([](const Round& r) { return r.parallel_restore; }));
  state.counters["restore_parallel_ratio"] =
      med([](const Round& r) { return r.parallel_restore / r.restore; });
}

// ---- mid_save_wait -------------------------------------------------------------------------

void mid_save_wait(benchmark::State& state, const BenchBackend& which, uint64_t session_mib) {
  ThreadExecutor executor(SystemClock::instance());  // saves run on their own thread
  Rig rig;
  if (Status made = make_rig(which, session_mib << 20, 1.0, executor, rig); !made.ok()) {
    state.SkipWithError(made.to_string().c_str());
    return;
  }
  Offloader& offloader = *rig.offloader;
  auto until_state = [&](OffloadState want) {
    const auto start = std::chrono::steady_clock::now();
    while (offloader.status().state != want) {
      if (seconds_since(start) > 600) return false;
      std::this_thread::yield();
    }
    return true;
  };
  const int trials = static_cast<int>(env_numbers("SIESTA_BENCH_TRIALS", "100").at(0));
  const uint64_t seed = std::random_device{}();
  std::fprintf(stderr, "mid_save_wait/%s/%llu MiB: seed %llu, %d trials\n", which.name.c_str(),
               static_cast<unsigned long long>(session_mib), static_cast<unsigned long long>(seed),
               trials);
  std::mt19937_64 random(seed);
  std::vector<double> waits_ms;
  int missed = 0;
  double save_ms = 0;
  // A whole save (so its duration is known), then the restore of the next command.
  auto full_save = [&]() -> bool {
    if (!offloader.offload_now().ok() || !until_state(OffloadState::kDisk)) return false;
    save_ms = offloader.status().last_save_ms;
    if (!offloader.acquire().ok()) return false;  // the lease goes back at once
    return true;
  };
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    if (!full_save()) {
      state.SkipWithError(("save: " + offloader.status().last_error).c_str());
      return;
    }
    // Each arrival is drawn over the latest whole save's duration; a request that came after
    // its save had finished is a miss, and that save's duration is the new one (disks speed up
    // and slow down). Trials go on until `trials` requests landed mid-save, or 4x as many ran.
    for (int attempt = 0; std::ssize(waits_ms) < trials && attempt < 4 * trials; ++attempt) {
      if (!offloader.offload_now().ok() || !until_state(OffloadState::kSaving)) {
        state.SkipWithError("save did not start");
        return;
      }
      std::uniform_real_distribution<double> moment(0, 0.9 * save_ms);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(moment(random)));
      const auto arrived = std::chrono::steady_clock::now();
      Result<Offloader::Lease> admitted = offloader.acquire();
      const double wait_ms = seconds_since(arrived) * 1e3;
      if (!admitted.ok()) {
        state.SkipWithError(admitted.status().to_string().c_str());
        return;
      }
      const Admission admission = admitted->admission();
      admitted->release();
      if (admission.cancelled_save) {
        waits_ms.push_back(wait_ms);
      } else {
        ++missed;
        if (admission.restored) save_ms = offloader.status().last_save_ms;
      }
    }
    state.SetIterationTime(1e-3 * percentile(waits_ms, 0.99));
  }
  state.counters["session_mib"] = static_cast<double>(session_mib);
  state.counters["save_ms"] = save_ms;
  state.counters["trials"] = static_cast<double>(waits_ms.size());
  state.counters["missed"] = missed;
  state.counters["wait_p50_ms"] = percentile(waits_ms, 0.50);
  state.counters["wait_p99_ms"] = percentile(waits_ms, 0.99);
  state.counters["wait_max_ms"] = percentile(waits_ms, 1.0);
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  using namespace siesta::bench;
  static const std::vector<BenchBackend> backends = available_backends("offload_throughput_bench");
  const std::vector<uint64_t> sizes = env_numbers("SIESTA_BENCH_SIZES_MIB", "64,256,1024,4096");
  const std::vector<uint64_t> used = env_numbers("SIESTA_BENCH_USED_PCT", "10,25,50,100");
  const std::vector<uint64_t> wait_sizes = env_numbers("SIESTA_BENCH_WAIT_SIZES_MIB", "64,1024");
  for (const BenchBackend& backend : backends) {
    for (uint64_t mib : sizes) {
      for (uint64_t pct : used) {
        const std::string name = "save_restore/" + backend.name +
                                 "/session_mib:" + std::to_string(mib) +
                                 "/used_pct:" + std::to_string(pct);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&backend, mib, pct](benchmark::State& state) {
                                       save_restore(state, backend, mib, pct);
                                     })
            ->Iterations(mib >= 4096 ? 3 : 5)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
    for (uint64_t mib : wait_sizes) {
      const std::string name =
          "mid_save_wait/" + backend.name + "/session_mib:" + std::to_string(mib);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [&backend, mib](benchmark::State& state) { mid_save_wait(state, backend, mib); })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
