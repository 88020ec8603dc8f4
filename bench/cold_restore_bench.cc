// The cold path: a snapshot restored when none of its file is in the page cache, against the
// best raw cold reads of the same file measured in the same rounds. Every read, the restore's
// and each baseline's, starts after the file's pages were dropped (fdatasync'd, then
// posix_fadvise DONTNEED; no root needed), and the bench checks with mincore that they were.
//
//   cold_restore/size_mib:N   an N MiB payload as one host region, sealed with AES-256-GCM
//                             (the server's default) in the chunks the Offloader picks for it
//                             (chunk_bytes_for_readers: 256 KiB to 4 MiB; counter chunk_kib)
//     restore_GBps        SnapshotReader::read into host memory (the Offloader's disk restore,
//                         on the default read threads: counter read_threads), which finds the
//                         file out of the cache and reads it around it, in order
//                         (ReadAheadFile; counter read_around_cache: the fraction of these
//                         restores that did)
//     restore_through_cache_GBps  the same restore with every read through the page cache
//                         (SnapshotReadOptions::ColdRead::kThroughCache): the way before
//     buffered_seq_GBps   one thread, pread of 4 MiB pieces in order (the kernel's readahead)
//     buffered_par_GBps   read_threads threads, pread of 4 MiB pieces, interleaved
//     direct_qK_GBps      O_DIRECT, K = 1, 4, 8, 16 threads each with one 4 MiB read in flight
//     best_raw_GBps       the fastest of the raw ways, its median
//     restore_vs_best     restore_GBps / best_raw_GBps (target: >= 0.9)
//     restore_after_save_GBps  the same restore right after the file was saved again, its
//                         pages as the save left them (what a conversation released to disk
//                         and soon back meets)
//     cached_after_save   the fraction of the file in the page cache right after its save
//                         (mincore; the median over the rounds)
//     cached_after_drop   the largest fraction of the file still cached right after a drop (0
//                         when the drops work; a figure above 0.05 means the run measured the
//                         page cache, not the disk)
//   Each figure is the median over the rounds (SIESTA_BENCH_ROUNDS, default 5).
//
//   SIESTA_BENCH_DIR=/path/on/the/disk build/release/bench/cold_restore_bench
//   (SIESTA_BENCH_COLD_SIZES_MIB, default 64,512; SIESTA_BENCH_READ_AHEAD_IN_FLIGHT and
//   SIESTA_BENCH_READ_AHEAD_BLOCK_KIB set ReadAheadOptions' loaders and block size;
//   SIESTA_BENCH_READ_AHEAD_LOADERS=2,4 adds restore_loaders_N_GBps: the restore around the
//   cache with N loaders, in the same rounds)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_env.h"
#include "bench/bench_main.h"
#include "bench/bench_stats.h"
#include "bench/bench_store.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/base/unique_fd.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_threads.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPiece = 4 * kMiB;

void die_if(bool failed, const std::string& what) {
  if (!failed) return;
  std::fprintf(stderr, "cold_restore_bench: %s\n", what.c_str());
  std::abort();
}

void die(const Status& s, const char* what) {
  die_if(!s.ok(), std::string(what) + ": " + s.to_string());
}

// The fraction of `path`'s bytes in the page cache now (ReadableFile::cached_bytes: mincore
// over a mapping of the file).
double cached_fraction(FileSystem& fs, const std::string& path) {
  Result<std::unique_ptr<ReadableFile>> file = fs.open_readable(path);
  die(file.status(), "open");
  Result<uint64_t> size = (*file)->size();
  die(size.status(), "size");
  Result<uint64_t> cached = (*file)->cached_bytes(0, *size);
  die(cached.status(), "mincore");
  return *size == 0 ? 0.0 : static_cast<double>(*cached) / static_cast<double>(*size);
}

// Drops `path`'s pages from the page cache; returns the fraction still cached after it.
double drop_pages(FileSystem& fs, const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  die_if(!fd.valid(), "open " + path);
  die_if(::fdatasync(fd.get()) != 0, "fdatasync " + path);
  die_if(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) != 0, "posix_fadvise " + path);
  return cached_fraction(fs, path);
}

// `threads` threads read `path` in kPiece pieces, thread t taking pieces t, t + threads, ...
// into `out` (buffered), or into aligned buffers of their own (O_DIRECT).
void parallel_read(const std::string& path, size_t bytes, size_t threads, bool direct,
                   std::vector<std::byte>& out) {
  std::vector<std::thread> readers;
  readers.reserve(threads);
  std::atomic<bool> failed{false};
  for (size_t t = 0; t < threads; ++t) {
    readers.emplace_back([&, t] {
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0)));
      if (!fd.valid()) {
        failed = true;
        return;
      }
      if (!direct) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
      void* aligned = nullptr;
      if (direct && ::posix_memalign(&aligned, 4096, kPiece) != 0) {
        failed = true;
        return;
      }
      std::unique_ptr<void, decltype(&std::free)> buffer(aligned, &std::free);
      for (size_t off = t * kPiece; off < bytes; off += threads * kPiece) {
        const size_t want = std::min(kPiece, bytes - off);
        // O_DIRECT reads whole blocks: the last piece is read rounded up (the file ends there).
        void* into = direct ? buffer.get() : static_cast<void*>(out.data() + off);
        const size_t ask = direct ? (want + 4095) / 4096 * 4096 : want;
        const ssize_t got = ::pread(fd.get(), into, ask, static_cast<off_t>(off));
        if (got < static_cast<ssize_t>(std::min(want, ask))) {
          failed = true;
          return;
        }
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  die_if(failed.load(), "a raw read of " + path + " failed");
}

void cold_restore(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * kMiB;
  const auto rounds = static_cast<size_t>(bench::env_number("SIESTA_BENCH_ROUNDS", 5));
  PosixFileSystem fs;
  ManualClock clock;
  auto key = ProcessKey::generate();
  die(key.status(), "key");
  // The raw reads land in `dest` (at least the file's size), the restore in `restored`.
  std::vector<std::byte> source(bytes), restored(bytes), dest(bytes + kPiece);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::byte& b : source) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  const std::string path = bench::bench_base_dir() + "/siesta-cold-restore-bench-" +
                           std::to_string(::getpid()) + ".snap";
  SnapshotRegion region;
  region.layout = {"payload", snapshot::PersistKind::kContents, bytes, {{0, bytes}}};
  region.host = source.data();
  SnapshotRegion into = region;
  into.host = restored.data();
  SnapshotWriteOptions wo;
  wo.path = path;
  wo.mode = snapshot::SnapshotMode::kSessionEncrypted;
  wo.expiry_unix = clock.unix_seconds() + 3600;
  wo.chunk_bytes = chunk_bytes_for_readers(bytes, kPiece);
  const size_t read_threads = default_snapshot_read_threads();
  SnapshotWriter writer(fs, clock, *key, nullptr);
  die(writer.write(wo, std::span(&region, 1)).status(), "snapshot write");
  SnapshotReader reader(fs, clock, *key, nullptr);
  // The file as the raw reads see it: the snapshot itself (its header, records and trailer).
  const size_t file_bytes = static_cast<size_t>(std::filesystem::file_size(path));

  SnapshotReadOptions cold_options{path, wo.mode, {}};
  cold_options.read_ahead.reads_in_flight = static_cast<size_t>(bench::env_number(
      "SIESTA_BENCH_READ_AHEAD_IN_FLIGHT", cold_options.read_ahead.reads_in_flight));
  cold_options.read_ahead.block_bytes =
      static_cast<size_t>(bench::env_number("SIESTA_BENCH_READ_AHEAD_BLOCK_KIB",
                                            cold_options.read_ahead.block_bytes >> 10))
      << 10;
  size_t restores = 0, read_around = 0;  // cold restores, and those that read around the cache
  // Restores with other loader counts, in the same rounds (SIESTA_BENCH_READ_AHEAD_LOADERS).
  std::map<std::string, std::function<void()>> ways;
  for (const uint64_t loaders : bench::env_numbers("SIESTA_BENCH_READ_AHEAD_LOADERS", "")) {
    ways["restore_loaders_" + std::to_string(loaders)] = [&, loaders] {
      SnapshotReadOptions ro = cold_options;
      ro.read_ahead.reads_in_flight = static_cast<size_t>(loaders);
      die(reader.read(ro, std::span(&into, 1)).status(), "snapshot read");
    };
  }
  ways.insert({
      {"restore",
       [&] {
         Result<SnapshotReadResult> read = reader.read(cold_options, std::span(&into, 1));
         die(read.status(), "snapshot read");
         ++restores;
         read_around += read->read_around_cache ? 1 : 0;
       }},
      {"restore_through_cache",
       [&] {
         SnapshotReadOptions ro{path, wo.mode, {}};
         ro.cold_read = SnapshotReadOptions::ColdRead::kThroughCache;
         die(reader.read(ro, std::span(&into, 1)).status(), "snapshot read");
       }},

      // The restore of a file just saved, its pages as the save left them (not dropped).
      {"restore_after_save",
       [&] {
         SnapshotReadOptions ro{path, wo.mode, {}};
         die(reader.read(ro, std::span(&into, 1)).status(), "snapshot read");
       }},
      {"buffered_seq", [&] { parallel_read(path, file_bytes, 1, false, dest); }},
      {"buffered_par", [&] { parallel_read(path, file_bytes, read_threads, false, dest); }},
      {"direct_q1", [&] { parallel_read(path, file_bytes, 1, true, dest); }},
      {"direct_q4", [&] { parallel_read(path, file_bytes, 4, true, dest); }},
      {"direct_q8", [&] { parallel_read(path, file_bytes, 8, true, dest); }},
      {"direct_q16", [&] { parallel_read(path, file_bytes, 16, true, dest); }},
  });
  std::map<std::string, std::vector<double>> gbps;
  double cached_after_drop = 0;
  std::vector<double> after_save;  // the fraction of the file cached right after each save
  for (auto _ : state) {
    for (size_t round = 0; round < rounds; ++round) {
      // The order turns each round, so that no way always follows the same one.
      std::vector<std::string> order;
      order.reserve(ways.size());
      for (const auto& [name, unused] : ways) order.push_back(name);
      std::rotate(order.begin(), order.begin() + static_cast<long>(round % order.size()),
                  order.end());
      for (const std::string& name : order) {
        if (name == "restore_after_save") {
          die(writer.write(wo, std::span(&region, 1)).status(), "snapshot write");
          after_save.push_back(cached_fraction(fs, path));
        } else {
          cached_after_drop = std::max(cached_after_drop, drop_pages(fs, path));
        }
        const auto start = std::chrono::steady_clock::now();
        ways[name]();
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const bool restore = name.starts_with("restore");
        gbps[name].push_back(static_cast<double>(restore ? bytes : file_bytes) / seconds / 1e9);
      }
    }
  }
  die_if(restored != source, "the restore did not give back the payload");
  fs.remove(path).ignore();
  double best = 0;
  for (auto& [name, figures] : gbps) {
    const double median = bench::median(figures);
    state.counters[name + "_GBps"] = median;
    if (!name.starts_with("restore")) best = std::max(best, median);
  }
  state.counters["cached_after_save"] = bench::median(after_save);
  state.counters["read_around_cache"] =
      static_cast<double>(read_around) / static_cast<double>(std::max<size_t>(restores, 1));
  state.counters["best_raw_GBps"] = best;
  state.counters["restore_vs_best"] = bench::median(gbps["restore"]) / best;
  state.counters["cached_after_drop"] = cached_after_drop;
  state.counters["read_threads"] = static_cast<double>(read_threads);
  state.counters["chunk_kib"] = static_cast<double>(wo.chunk_bytes >> 10);
}

void register_sizes() {
  for (const uint64_t mib : bench::env_numbers("SIESTA_BENCH_COLD_SIZES_MIB", "64,512")) {
    benchmark::RegisterBenchmark("cold_restore", cold_restore)
        ->Name("cold_restore/size_mib:" + std::to_string(mib))
        ->Arg(static_cast<int64_t>(mib))
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace siesta

int main(int argc, char** argv) {
  return siesta::bench::run_registered(argc, argv, siesta::register_sizes);
}
