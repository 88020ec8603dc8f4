// Snapshot format cost: write and read throughput of SnapshotWriter / SnapshotReader against a
// raw baseline of the same bytes, measured alternately in the same iterations, and the
// sealing cost per GB in memory.
//
//   raw write   create_exclusive + pwrite of 4 MiB pieces + fdatasync + rename + dir fsync
//   raw read    pread of the same file in 4 MiB pieces
//   format      the same payload as one host region, chunks of 4 MiB, in each mode, sealed and
//               verified on N threads (the second argument; 0 = the defaults:
//               min(4, cores) to write, 3/4 of the cores, 4 to 16, to read)
// Counters: raw_*_GBps, format_*_GBps (median round) and *_overhead (median over rounds of
// format time / raw time - 1; target <= 0.10 on the CPU machines). The files go to
// $SIESTA_BENCH_DIR (default /tmp): point it at the disk you mean to measure.
// SIESTA_BENCH_SNAPSHOT_MIB: the payload sizes (default 256); SIESTA_BENCH_CHUNK_KIB: the
// chunk size (default 4096), e.g. 8 MiB in 256 KiB chunks for a small restore's fixed costs.
//
//   build/release/bench/snapshot_bench --benchmark_format=json --benchmark_out=snap.json
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_env.h"
#include "bench/bench_main.h"
#include "bench/bench_stats.h"
#include "bench/bench_store.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_threads.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {
namespace {

using snapshot::SnapshotMode;

constexpr size_t kMiB = 1u << 20;
constexpr size_t kPiece = 4 * kMiB;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void die(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::abort();
  }
}

std::vector<std::byte> payload(size_t bytes) {
  std::vector<std::byte> out(bytes);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

void raw_write(FileSystem& fs, const std::string& path, std::span<const std::byte> bytes) {
  const std::string temp = path + ".tmp-raw";
  auto file = fs.create_exclusive(temp, 0600);
  die(file.status(), "create");
  for (size_t off = 0; off < bytes.size(); off += kPiece) {
    die((*file)->write_at(off, bytes.subspan(off, std::min(kPiece, bytes.size() - off))), "write");
  }
  die((*file)->sync(), "sync");
  die((*file)->close(), "close");
  die(fs.rename(temp, path), "rename");
  die(fs.sync_directory(parent_directory(path)), "sync_directory");
}

void raw_read(FileSystem& fs, const std::string& path, std::span<std::byte> out) {
  auto file = fs.open_readable(path);
  die(file.status(), "open");
  for (size_t off = 0; off < out.size(); off += kPiece) {
    auto got = (*file)->read_at(off, out.subspan(off, std::min(kPiece, out.size() - off)));
    die(got.status(), "read");
  }
}

// One iteration: raw write, format write, raw read, format read, timed separately.
void file_round(benchmark::State& state, SnapshotMode mode) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * kMiB;
  const auto threads = static_cast<uint32_t>(state.range(1));
  PosixFileSystem fs;
  ManualClock clock;
  auto key = ProcessKey::generate();
  die(key.status(), "key");
  std::vector<std::byte> source = payload(bytes), dest(bytes);
  const std::string base =
      bench::bench_base_dir() + "/siesta-snapshot-bench-" + std::to_string(::getpid());
  SnapshotRegion region;
  region.layout = {"payload", snapshot::PersistKind::kContents, bytes, {{0, bytes}}};
  region.host = source.data();
  SnapshotRegion into = region;
  into.host = dest.data();
  SnapshotWriteOptions wo;
  wo.path = base + ".snap";
  wo.mode = mode;
  wo.expiry_unix = clock.unix_seconds() + 3600;
  wo.chunk_bytes = static_cast<uint32_t>(bench::env_number("SIESTA_BENCH_CHUNK_KIB", 4096) << 10);
  wo.threads = threads;
  SnapshotWriter writer(fs, clock, *key, nullptr);
  SnapshotReader reader(fs, clock, *key, nullptr);
  // Seconds per round; each round times all four back to back.
  std::vector<double> raw_w, fmt_w, raw_r, fmt_r;
  bool format_first = false;
  for (auto _ : state) {
    // The order alternates, so that neither side always pays for the other's dirty pages.
    auto timed = [](std::vector<double>& rounds, auto&& body) {
      const auto t = std::chrono::steady_clock::now();
      body();
      rounds.push_back(seconds_since(t));
    };
    auto write_raw = [&] { raw_write(fs, base + ".raw", source); };
    auto write_format = [&] {
      die(writer.write(wo, std::span(&region, 1)).status(), "snapshot write");
    };
    auto read_raw = [&] { raw_read(fs, base + ".raw", dest); };
    auto read_format = [&] {
      SnapshotReadOptions ro{wo.path, mode, {}};
      ro.threads = threads;
      die(reader.read(ro, std::span(&into, 1)).status(), "snapshot read");
    };
    if (format_first) {
      timed(fmt_w, write_format), timed(raw_w, write_raw);
      timed(fmt_r, read_format), timed(raw_r, read_raw);
    } else {
      timed(raw_w, write_raw), timed(fmt_w, write_format);
      timed(raw_r, read_raw), timed(fmt_r, read_format);
    }
    format_first = !format_first;
  }
  fs.remove(base + ".raw").ignore();
  fs.remove(wo.path).ignore();
  // A disk (a VM's above all) changes speed several-fold from one second to the next, which
  // moves whole-run totals by more than the format costs; a round's format and raw timings
  // are taken seconds apart, so the figures are medians: of each side's rounds for GB/s, of the
  // per-round ratios for the overheads.
  const double gb = static_cast<double>(bytes) / 1e9;
  auto overhead = [](const std::vector<double>& format, const std::vector<double>& raw) {
    std::vector<double> ratios;
    for (size_t i = 0; i < format.size(); ++i) ratios.push_back(format[i] / raw[i] - 1);
    return bench::median(ratios);
  };
  state.counters["raw_write_GBps"] = gb / bench::median(raw_w);
  state.counters["format_write_GBps"] = gb / bench::median(fmt_w);
  state.counters["write_overhead"] = overhead(fmt_w, raw_w);
  state.counters["raw_read_GBps"] = gb / bench::median(raw_r);
  state.counters["format_read_GBps"] = gb / bench::median(fmt_r);
  state.counters["read_overhead"] = overhead(fmt_r, raw_r);
  state.counters["write_threads"] = static_cast<double>(resolve_snapshot_write_threads(threads));
  state.counters["read_threads"] = static_cast<double>(resolve_snapshot_read_threads(threads));
}

// Sealing alone, in memory: seconds per GB of 4 MiB chunks.
void seal_cost(benchmark::State& state, SnapshotMode mode) {
  auto key = ProcessKey::generate();
  die(key.status(), "key");
  auto sealer = make_sealer(mode, *key, snapshot::FileId{});
  die(sealer.status(), "sealer");
  std::vector<std::byte> in = payload(kPiece);
  std::vector<uint8_t> out(kPiece);
  std::vector<uint8_t> aad(64, 1);
  snapshot::Tag tag{};
  uint64_t index = 0;
  const std::span<const uint8_t> plain(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  for (auto _ : state) {
    die((*sealer)->seal(SealDomain::kChunk, index++, aad, plain, out, tag), "seal");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kPiece));
  state.counters["s_per_GB"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kPiece) / 1e9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// {MiB, threads} for each mode: the default thread count, and one thread (the sealing of the
// old writer).
void register_file_rounds() {
  const std::pair<const char*, SnapshotMode> modes[] = {
      {"file_round/encrypted", SnapshotMode::kSessionEncrypted},
      {"file_round/digest", SnapshotMode::kSessionDigest}};
  for (const uint64_t mib : bench::env_numbers("SIESTA_BENCH_SNAPSHOT_MIB", "256")) {
    for (const int64_t threads : {0, 1}) {
      for (const auto& [name, mode] : modes) {
        benchmark::RegisterBenchmark(name, file_round, mode)
            ->Args({static_cast<int64_t>(mib), threads})
            ->Iterations(10)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

BENCHMARK_CAPTURE(seal_cost, aes_gcm, SnapshotMode::kSessionEncrypted);
BENCHMARK_CAPTURE(seal_cost, sha256_digest, SnapshotMode::kSessionDigest);

}  // namespace
}  // namespace siesta

int main(int argc, char** argv) {
  return siesta::bench::run_registered(argc, argv, siesta::register_file_rounds);
}
