// Many snapshots read and written at once on the process's shared sealing threads
// (snapshot_thread_pool()): eight readers, each on its own thread and file, all get their bytes
// back, except the one whose file fails to read from its middle (injected, printed), which alone
// fails with that IoError.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot_test::HostRegion;

TEST(SnapshotSharedPoolTest, EightRestoresAtOnceShareTheThreadsAndAFailingReadFailsItsOwnAlone) {
  constexpr int kFiles = 8;
  constexpr int kFailing = 5;
  constexpr size_t kBytes = 600000;  // 150 chunks of 4000 bytes
  testing::TempDir dir;
  ManualClock clock;
  const ProcessKey key = snapshot_test::fixed_key(3);
  snapshot_test::TestFileSystem fs;
  snapshot_test::TestFileSystem failing_fs;
  failing_fs.fail_reads_from = kBytes / 2;
  std::printf("fault: every read of file %d from byte %zu fails with EIO\n", kFailing, kBytes / 2);
  std::vector<std::string> paths;
  std::vector<HostRegion> sources;
  paths.reserve(kFiles);
  sources.reserve(kFiles);
  for (int i = 0; i < kFiles; ++i) {
    paths.push_back(dir.file("s" + std::to_string(i) + ".snap"));
    sources.push_back(snapshot_test::host_region("kv", kBytes, {{0, kBytes}}, 100 + i));
    SnapshotWriteOptions w;
    w.path = paths.back();
    w.mode = snapshot::SnapshotMode::kSessionEncrypted;
    w.fingerprint = snapshot_test::fingerprint(1);
    w.expiry_unix = clock.unix_seconds() + 100;
    w.chunk_bytes = 4000;
    SnapshotWriter writer(fs, clock, key, nullptr);
    ASSERT_TRUE(writer.write(w, std::span(&sources.back().region, 1)).ok());
  }
  std::vector<Status> outcomes(kFiles);
  std::vector<HostRegion> targets;
  targets.reserve(kFiles);
  for (int i = 0; i < kFiles; ++i) {
    targets.push_back(snapshot_test::host_region("kv", kBytes, {{0, kBytes}}, 0));
  }
  std::vector<std::thread> readers;
  readers.reserve(kFiles);
  for (int i = 0; i < kFiles; ++i) {
    readers.emplace_back([&, i] {
      SnapshotReader reader(i == kFailing ? failing_fs : fs, clock, key, nullptr);
      SnapshotReadOptions r{paths[i], snapshot::SnapshotMode::kSessionEncrypted,
                            snapshot_test::fingerprint(1)};
      outcomes[i] = reader.read(r, std::span(&targets[i].region, 1)).status();
    });
  }
  for (std::thread& reader : readers) reader.join();
  for (int i = 0; i < kFiles; ++i) {
    SCOPED_TRACE("file " + std::to_string(i));
    if (i == kFailing) {
      EXPECT_EQ(outcomes[i].code(), StatusCode::kIoError) << outcomes[i].to_string();
      EXPECT_NE(outcomes[i].message().find("injected"), std::string::npos);
    } else {
      EXPECT_TRUE(outcomes[i].ok()) << outcomes[i].to_string();
      EXPECT_EQ(targets[i].bytes, sources[i].bytes);
    }
  }
}

}  // namespace
}  // namespace siesta
