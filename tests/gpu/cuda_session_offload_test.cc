// An engine::Session on the GPU (CudaVmmBackend + CudaKernels, synthetic:small, each KV type)
// driven directly (reuse_prefix / feed / greedy_next / next_logits) under an Offloader with a
// ManualClock and a ManualExecutor, so the test decides when a save runs:
//   - every used byte of every kContents region, every region's address and the driver's
//     range start come back unchanged after each restore, and the next token's logits equal,
//     bit for bit, those of a reference session (same model, backend and kernels) that never
//     offloads;
//   - a restore refused for lack of device memory leaves the snapshot on disk and a later one
//     succeeds with every byte back;
//   - after 100 cycles the device still computes and its free memory is back.
// Each test skips, printing why, where CUDA is unavailable.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "core/snapshot/snapshot_region.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/session.h"
#include "runtime/device.h"
#include "runtime/offload_settings.h"
#include "runtime/offload_storage.h"
#include "tests/gpu/device_probe.h"
#include "tests/support/temp_dir.h"

namespace siesta::engine {
namespace {

constexpr int64_t kIdleSeconds = 60;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kSlack = 2 * kMiB;  // one 2 MiB granule of driver accounting

constexpr std::string_view kPrompt =
    "The quick brown fox jumps over the lazy dog, then sleeps on the disk and wakes up.";

std::span<const Token> as_tokens(std::string_view text) {
  return {reinterpret_cast<const Token*>(text.data()), text.size()};
}

// reuse_prefix(prompt), then feeds the rest of the prompt.
Status feed_prompt(Session& session, std::span<const Token> prompt) {
  SIESTA_ASSIGN_OR_RETURN(const uint32_t reused, session.reuse_prefix(prompt));
  for (size_t i = reused; i < prompt.size(); ++i) SIESTA_RETURN_IF_ERROR(session.feed(prompt[i]));
  return Status::Ok();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Everything a test remembers of one region.
struct RegionCopy {
  snapshot::RegionLayout layout;
  SnapshotRegion::Place place = SnapshotRegion::Place::kHost;
  std::byte* host = nullptr;
  DeviceAddress device = 0;
  DeviceAddress range_start = 0;             // device regions: the driver's range start
  std::vector<std::vector<std::byte>> used;  // kContents: one copy per used extent
};

// The runtime's device and storage, with a Model and two Sessions built by hand: the test
// drives a Session directly, which an Engine would hide.
struct Rig {
  runtime::OpenedDevice device;
  HostVmm host;
  PosixFileSystem fs;
  ManualClock clock;
  ManualExecutor executor{clock};
  siesta::testing::TempDir dir;
  std::unique_ptr<runtime::OffloadStorage> storage;
  std::unique_ptr<Model> model;
  std::unique_ptr<Session> session;    // under the offloader
  std::unique_ptr<Session> reference;  // never offloaded: the expected logits
  std::unique_ptr<Offloader> offloader;
  std::vector<Status> fatal;

  MemoryBackend& backend() const { return *device.backend; }
  Kernels& kernels() const { return *device.kernels; }

  Status start(KvType kv) {
    runtime::DeviceOptions device_options;
    device_options.kind = runtime::BackendKind::kCuda;
    SIESTA_ASSIGN_OR_RETURN(device, runtime::open_device(device_options, nullptr));
    SIESTA_ASSIGN_OR_RETURN(const ModelConfig config,
                            model_config_from_spec("synthetic:small", std::nullopt, kv));
    SIESTA_ASSIGN_OR_RETURN(storage, runtime::OffloadStorage::open(fs, clock, dir.path()));
    SIESTA_ASSIGN_OR_RETURN(model, Model::load(config, backend(), kernels()));
    SIESTA_ASSIGN_OR_RETURN(session, Session::create(*model, backend(), kernels(), host));
    SIESTA_ASSIGN_OR_RETURN(reference, Session::create(*model, backend(), kernels(), host));
    runtime::OffloadSettings settings;
    settings.config.idle_seconds = kIdleSeconds;
    settings.config.expire_seconds = 10 * kIdleSeconds;
    settings.on_fatal = [this](const Status& s) { fatal.push_back(s); };
    SIESTA_ASSIGN_OR_RETURN(offloader,
                            Offloader::create({*session, backend(), host, fs, clock, &executor,
                                               &storage->store(), &storage->key()},
                                              runtime::offloader_options(settings, nullptr)));
    return Status::Ok();
  }

  // Lets the idle timer fire and runs the save it starts.
  void sleep_session() {
    clock.advance(std::chrono::seconds(kIdleSeconds));
    executor.run_due();
  }

  std::string snapshot_path() const {
    Result<std::string> path = storage->store().snapshot_path("0");
    return path.ok() ? *path : std::string();
  }
  bool snapshot_exists() const { return std::filesystem::exists(snapshot_path()); }

  uint64_t session_device_bytes() const {
    uint64_t bytes = 0;
    for (const DeviceRange& range : session->device_memory()) bytes += range.size;
    return bytes;
  }
};

class CudaSessionOffloadTest : public ::testing::TestWithParam<KvType> {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "CUDA unavailable: " << reason;
  }

  // Starts the rig and feeds kPrompt to both sessions (inside one command of the offloader).
  void start_and_prompt(Rig& rig) {
    Status started = rig.start(GetParam());
    ASSERT_TRUE(started.ok()) << started.to_string();
    Result<Offloader::Lease> admitted = rig.offloader->acquire();
    ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
    Status fed = feed_prompt(*rig.session, as_tokens(kPrompt));
    Status fed_reference = feed_prompt(*rig.reference, as_tokens(kPrompt));
    admitted->release();
    ASSERT_TRUE(fed.ok()) << fed.to_string();
    ASSERT_TRUE(fed_reference.ok()) << fed_reference.to_string();
    ASSERT_NO_FATAL_FAILURE(expect_same_logits(rig, "after the prompt"));
  }

  // The offloaded session's next logits equal the reference session's, bit for bit.
  // REQUIRES: inside a command (or resident), both sessions fed since their last restore.
  static void expect_same_logits(Rig& rig, const std::string& when) {
    Result<std::vector<float>> got = rig.session->next_logits();
    Result<std::vector<float>> want = rig.reference->next_logits();
    ASSERT_TRUE(got.ok()) << when << ": " << got.status().to_string();
    ASSERT_TRUE(want.ok()) << when << ": " << want.status().to_string();
    ASSERT_EQ(got->size(), kVocabSize) << when;
    ASSERT_TRUE(same_bits(*got, *want)) << when << ": logits differ from the reference session";
  }

  // One command: restore if needed, feed the reference session's greedy choice to both
  // sessions, compare the logits, release. `expect_restored`: the admission must say so.
  static void feed_one(Rig& rig, bool expect_restored, const std::string& when) {
    Result<Offloader::Lease> admitted = rig.offloader->acquire();
    ASSERT_TRUE(admitted.ok()) << when << ": " << admitted.status().to_string();
    EXPECT_EQ(admitted->admission().restored, expect_restored) << when;
    EXPECT_FALSE(admitted->admission().fallback.has_value()) << when;
    Result<Token> token = rig.reference->greedy_next();
    Status fed = token.ok() ? rig.session->feed(*token) : token.status();
    Status fed_reference = token.ok() ? rig.reference->feed(*token) : token.status();
    if (fed.ok() && fed_reference.ok()) expect_same_logits(rig, when);
    admitted->release();
    ASSERT_TRUE(fed.ok()) << when << ": " << fed.to_string();
    ASSERT_TRUE(fed_reference.ok()) << when << ": " << fed_reference.to_string();
  }

  // Saves: the state goes to disk, the snapshot exists, and the device's free memory rises by
  // at least the released bytes (within one granule).
  static void save(Rig& rig, const test_util::DeviceProbe& probe, const std::string& when) {
    const uint64_t free_before = probe.free_bytes();
    rig.sleep_session();
    const OffloadStatus slept = rig.offloader->status();
    ASSERT_EQ(slept.state, OffloadState::kDisk) << when << ": " << slept.last_error;
    const uint64_t free_after = probe.free_bytes();
    EXPECT_GT(slept.released_vram_bytes, 0u) << when;
    EXPECT_GE(free_after + kSlack, free_before + slept.released_vram_bytes)
        << when << ": free " << free_before << " -> " << free_after << ", released "
        << slept.released_vram_bytes;
    EXPECT_TRUE(rig.snapshot_exists()) << when << ": " << rig.snapshot_path();
  }

  // Copies every region of the offloaded session as it is now.
  // REQUIRES: the session's memory committed (inside a command).
  static void take_copy(Rig& rig, const test_util::DeviceProbe& probe,
                        std::vector<RegionCopy>* out) {
    out->clear();
    ASSERT_TRUE(rig.kernels().synchronize().ok());
    for (const SnapshotRegion& region : rig.session->snapshot_regions()) {
      RegionCopy copy;
      copy.layout = region.layout;
      copy.place = region.place;
      copy.host = region.host;
      copy.device = region.device;
      if (region.place == SnapshotRegion::Place::kDevice) {
        copy.range_start = probe.range_start(region.device);
      }
      if (region.layout.persist == snapshot::PersistKind::kContents) {
        for (const snapshot::Extent& extent : region.layout.extents) {
          ASSERT_LE(extent.offset + extent.length, region.layout.size) << region.layout.name;
          std::vector<std::byte> bytes(extent.length);
          if (region.place == SnapshotRegion::Place::kDevice) {
            Status downloaded = rig.kernels().download(region.device + extent.offset, bytes);
            ASSERT_TRUE(downloaded.ok()) << region.layout.name << ": " << downloaded.to_string();
          } else {
            ASSERT_NE(region.host, nullptr) << region.layout.name;
            std::memcpy(bytes.data(), region.host + extent.offset, extent.length);
          }
          copy.used.push_back(std::move(bytes));
        }
      }
      out->push_back(std::move(copy));
    }
    ASSERT_FALSE(out->empty());
  }

  static void expect_same_copies(const std::vector<RegionCopy>& before,
                                 const std::vector<RegionCopy>& after, const std::string& when) {
    ASSERT_EQ(before.size(), after.size()) << when;
    uint64_t compared = 0;
    for (size_t r = 0; r < before.size(); ++r) {
      const RegionCopy& a = before[r];
      const RegionCopy& b = after[r];
      const std::string& name = a.layout.name;
      EXPECT_EQ(a.layout, b.layout) << when << ": " << name;
      EXPECT_EQ(a.place, b.place) << when << ": " << name;
      EXPECT_EQ(a.host, b.host) << when << ": " << name;
      EXPECT_EQ(a.device, b.device) << when << ": " << name;
      EXPECT_EQ(a.range_start, b.range_start) << when << ": " << name;
      ASSERT_EQ(a.used.size(), b.used.size()) << when << ": " << name;
      for (size_t e = 0; e < a.used.size(); ++e) {
        ASSERT_EQ(a.used[e].size(), b.used[e].size()) << when << ": " << name;
        const auto mismatch = std::mismatch(a.used[e].begin(), a.used[e].end(), b.used[e].begin());
        EXPECT_TRUE(mismatch.first == a.used[e].end())
            << when << ": " << name << " extent " << e << " differs at byte "
            << (mismatch.first - a.used[e].begin()) << " of " << a.used[e].size();
        compared += a.used[e].size();
      }
    }
    EXPECT_GT(compared, 0u) << when;
  }
};

TEST_P(CudaSessionOffloadTest, TwentyCyclesRestoreEveryByteAtTheSameAddresses) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(start_and_prompt(rig));
  test_util::DeviceProbe probe;
  for (int cycle = 0; cycle < 20; ++cycle) {
    const std::string when = "cycle " + std::to_string(cycle);
    // A command that only looks: copy every used byte, the addresses and range starts.
    std::vector<RegionCopy> before;
    std::vector<DeviceRange> memory_before;
    {
      Result<Offloader::Lease> admitted = rig.offloader->acquire();
      ASSERT_TRUE(admitted.ok()) << when << ": " << admitted.status().to_string();
      EXPECT_FALSE(admitted->admission().restored) << when;  // resident since the last command
      take_copy(rig, probe, &before);
      memory_before = rig.session->device_memory();
      expect_same_logits(rig, when + ", before the save");
      admitted->release();
      ASSERT_FALSE(HasFatalFailure()) << when;
    }
    ASSERT_NO_FATAL_FAILURE(save(rig, probe, when));

    // Restore, then compare.
    Result<Offloader::Lease> admitted = rig.offloader->acquire();
    ASSERT_TRUE(admitted.ok()) << when << ": " << admitted.status().to_string();
    ASSERT_TRUE(admitted->admission().restored) << when;
    std::vector<RegionCopy> after;
    take_copy(rig, probe, &after);
    EXPECT_EQ(rig.session->device_memory(), memory_before) << when;
    // Scratch (the logits) is kDiscard: not brought back by a restore.
    EXPECT_EQ(rig.session->next_logits().status().code(), StatusCode::kFailedPrecondition) << when;
    admitted->release();
    ASSERT_FALSE(HasFatalFailure()) << when;
    ASSERT_NO_FATAL_FAILURE(expect_same_copies(before, after, when));

    // One more token: the same logits as the session that never slept.
    ASSERT_NO_FATAL_FAILURE(feed_one(rig, false, when + ", token after the restore"));
  }
  const OffloadStatus status = rig.offloader->status();
  EXPECT_EQ(status.counters.saves, 20u);
  EXPECT_EQ(status.counters.restore_hits, 20u);
  EXPECT_TRUE(rig.fatal.empty()) << rig.fatal.front().to_string();
}

TEST_P(CudaSessionOffloadTest, OutOfMemoryOnRestoreThenSuccess) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(start_and_prompt(rig));
  test_util::DeviceProbe probe;
  std::vector<RegionCopy> before;
  {
    Result<Offloader::Lease> admitted = rig.offloader->acquire();
    ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
    take_copy(rig, probe, &before);
    admitted->release();
    ASSERT_FALSE(HasFatalFailure());
  }
  const uint64_t session_bytes = rig.session_device_bytes();
  ASSERT_NO_FATAL_FAILURE(save(rig, probe, "save"));

  // Another backend takes the device's free memory, leaving less than the session needs.
  CudaVmmOptions hog_options;
  hog_options.staging_buffer_bytes = 2 * kMiB;
  hog_options.staging_buffer_count = 1;
  Result<std::unique_ptr<CudaVmmBackend>> hog = CudaVmmBackend::create(hog_options);
  ASSERT_TRUE(hog.ok()) << hog.status().to_string();
  const uint64_t granule = (*hog)->granularity();
  ASSERT_GT(granule, 0u);
  const uint64_t margin = std::max<uint64_t>(granule, session_bytes / 2 / granule * granule);
  ASSERT_LT(margin + granule, session_bytes + 1)
      << "session " << session_bytes << " B, granularity " << granule << " B";
  std::vector<DeviceRange> taken;
  uint64_t taken_bytes = 0;
  for (uint64_t step = kGiB; step >= granule; step /= 2) {
    const uint64_t size = step / granule * granule;
    if (size == 0) break;
    while (probe.free_bytes() >= margin + size) {
      Result<DeviceRange> range = (*hog)->reserve(size);
      ASSERT_TRUE(range.ok()) << range.status().to_string();
      Status committed = (*hog)->commit(*range);
      if (!committed.ok()) {
        (*hog)->unreserve(*range);
        ASSERT_EQ(committed.code(), StatusCode::kOutOfMemory) << committed.to_string();
        break;  // the device is fuller than it said: try smaller steps
      }
      taken.push_back(*range);
      taken_bytes += size;
    }
  }
  const uint64_t free_while_full = probe.free_bytes();
  std::printf("other backend holds %llu MiB; device free %llu KiB; session needs %llu KiB\n",
              static_cast<unsigned long long>(taken_bytes / kMiB),
              static_cast<unsigned long long>(free_while_full >> 10),
              static_cast<unsigned long long>(session_bytes >> 10));
  ASSERT_LT(free_while_full, session_bytes) << "could not fill the device";

  Result<Offloader::Lease> refused = rig.offloader->acquire();
  ASSERT_FALSE(refused.ok()) << "restore succeeded with " << free_while_full << " B free";
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory) << refused.status().to_string();
  const OffloadStatus after_refusal = rig.offloader->status();
  EXPECT_EQ(after_refusal.state, OffloadState::kDisk) << after_refusal.last_error;
  EXPECT_EQ(after_refusal.counters.out_of_memory_retries, 1u);
  EXPECT_TRUE(rig.snapshot_exists()) << rig.snapshot_path();
  EXPECT_TRUE(rig.fatal.empty()) << rig.fatal.front().to_string();

  // Give the memory back; the next command restores every byte.
  for (const DeviceRange& range : taken) (*hog)->unreserve(range);
  hog->reset();
  Result<Offloader::Lease> admitted = rig.offloader->acquire();
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->admission().restored);
  std::vector<RegionCopy> after;
  take_copy(rig, probe, &after);
  admitted->release();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NO_FATAL_FAILURE(expect_same_copies(before, after, "after the refused restore"));
  ASSERT_NO_FATAL_FAILURE(feed_one(rig, false, "token after the restore"));
  EXPECT_EQ(rig.offloader->status().counters.restore_hits, 1u);
  EXPECT_TRUE(rig.fatal.empty()) << rig.fatal.front().to_string();
}

TEST_P(CudaSessionOffloadTest, DeviceHealthyAfterManyCycles) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(start_and_prompt(rig));
  test_util::DeviceProbe probe;
  const uint64_t free_at_start = probe.free_bytes();
  for (int cycle = 0; cycle < 100; ++cycle) {
    const std::string when = "cycle " + std::to_string(cycle);
    ASSERT_NO_FATAL_FAILURE(save(rig, probe, when));
    ASSERT_NO_FATAL_FAILURE(feed_one(rig, true, when));
  }
  const OffloadStatus status = rig.offloader->status();
  EXPECT_EQ(status.counters.saves, 100u);
  EXPECT_EQ(status.counters.restore_hits, 100u);
  EXPECT_TRUE(rig.fatal.empty()) << rig.fatal.front().to_string();

  // Free memory is back where it was (the session resident, as at the start).
  const uint64_t free_at_end = probe.free_bytes();
  const uint64_t drift =
      free_at_end > free_at_start ? free_at_end - free_at_start : free_at_start - free_at_end;
  EXPECT_LE(drift, kSlack) << "free " << free_at_start << " -> " << free_at_end;

  // The device still computes: a matmul round trip in fresh memory (small integers, so the
  // result is exact whatever the summation order).
  constexpr uint32_t kRows = 4;
  constexpr uint32_t kCols = 8;
  std::vector<float> w(kRows * kCols);
  std::vector<float> x(kCols);
  for (uint32_t c = 0; c < kCols; ++c) x[c] = static_cast<float>(static_cast<int>(c % 5) - 2);
  for (uint32_t i = 0; i < kRows * kCols; ++i)
    w[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  std::vector<float> want(kRows, 0.0f);
  for (uint32_t r = 0; r < kRows; ++r) {
    for (uint32_t c = 0; c < kCols; ++c) want[r] += w[r * kCols + c] * x[c];
  }
  Result<DeviceRange> range = rig.backend().reserve(rig.backend().granularity());
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  Status committed = rig.backend().commit(*range);
  ASSERT_TRUE(committed.ok()) << committed.to_string();
  const DeviceAddress w_at = range->base;
  const DeviceAddress x_at = range->base + 4096;
  const DeviceAddress out_at = range->base + 8192;
  std::vector<float> got(kRows, -1.0f);
  Status up_w = rig.kernels().upload(std::as_bytes(std::span<const float>(w)), w_at);
  Status up_x = rig.kernels().upload(std::as_bytes(std::span<const float>(x)), x_at);
  Status mm = rig.kernels().matmul(w_at, x_at, kRows, kCols, out_at);
  Status down = rig.kernels().download(out_at, std::as_writable_bytes(std::span<float>(got)));
  rig.backend().unreserve(*range);
  ASSERT_TRUE(up_w.ok()) << up_w.to_string();
  ASSERT_TRUE(up_x.ok()) << up_x.to_string();
  ASSERT_TRUE(mm.ok()) << mm.to_string();
  ASSERT_TRUE(down.ok()) << down.to_string();
  EXPECT_EQ(got, want);

  // And the session itself: one more cycle still gives the reference's logits.
  ASSERT_NO_FATAL_FAILURE(save(rig, probe, "final"));
  ASSERT_NO_FATAL_FAILURE(feed_one(rig, true, "final"));
}

INSTANTIATE_TEST_SUITE_P(EachKvType, CudaSessionOffloadTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& test_info) {
                           return std::string(kv_type_name(test_info.param));
                         });

}  // namespace
}  // namespace siesta::engine
