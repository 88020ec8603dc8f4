// A conversation whose snapshot file left the page cache while it was idle: restored with
// every byte, read around the cache where the file system can, and counted and logged so.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/base/unique_fd.h"
#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/page_cache.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

TEST(OffloaderColdRestoreTest, AFileOutOfThePageCacheIsRestoredReadAroundItAndCounted) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(37).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  // The kernel drops the file's pages (it was synced by the save): what a long idle time or
  // memory pressure does.
  const std::string path = f.snapshot_path();
  // What this file system does, asked without siesta: tmpfs keeps its pages (they are the
  // file), so do some network file systems, and not every file system reads around the cache.
  const double left = siesta::testing::drop_cached_pages(path, std::filesystem::file_size(path));
  ASSERT_GE(left, 0) << "mincore on " << path;
  const bool drops = left < 0.5;
  const bool direct = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT)).valid();

  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->admission().restored);
  EXPECT_EQ(f.target_->length(), 37u);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.cold_restores, drops ? 1u : 0u);
  EXPECT_EQ(status.counters.cold_restores_around_cache, drops && direct ? 1u : 0u);
  bool logged = false;
  for (const std::string& line : f.log_) {
    logged |= line.find("restored 37 tokens") != std::string::npos &&
              line.find(drops && direct ? "out of the page cache, read around it"
                        : drops         ? "out of the page cache)"
                                        : "retire") != std::string::npos;
  }
  EXPECT_TRUE(logged) << "the restore's log line says how its file was read";
}

}  // namespace
}  // namespace siesta
