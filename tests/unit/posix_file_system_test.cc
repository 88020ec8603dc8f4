#include "core/base/posix_file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/unique_fd.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/page_cache.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string read_all(FileSystem& fs, const std::string& path) {
  auto file = fs.open_readable(path);
  if (!file.ok()) return "<" + file.status().to_string() + ">";
  std::string out(static_cast<size_t>(*(*file)->size()), '\0');
  auto n = (*file)->read_at(0, std::as_writable_bytes(std::span(out.data(), out.size())));
  out.resize(n.ok() ? *n : 0);
  return out;
}

class PosixFileSystemTest : public ::testing::Test {
 protected:
  PosixFileSystem fs_;
  testing::TempDir dir_;
};

TEST_F(PosixFileSystemTest, WritesAtOffsetsSyncsAndReadsBack) {
  std::string path = dir_.file("a.snap");
  auto file = fs_.create_exclusive(path, 0600);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ASSERT_TRUE((*file)->write_at(5, as_bytes("world")).ok());
  ASSERT_TRUE((*file)->write_at(0, as_bytes("hello")).ok());
  ASSERT_TRUE((*file)->sync().ok());
  ASSERT_TRUE((*file)->close().ok());
  EXPECT_EQ(read_all(fs_, path), "helloworld");

  auto reader = fs_.open_readable(path);
  ASSERT_TRUE(reader.ok());
  std::vector<std::byte> tail(8);
  auto n = (*reader)->read_at(7, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3u) << "a read past the end returns only what exists";
}

TEST_F(PosixFileSystemTest, CreateIsExclusiveAndHasTheModeAskedForWhateverTheUmask) {
  std::string path = dir_.file("b");
  mode_t old_umask = ::umask(0);
  auto file = fs_.create_exclusive(path, 0600);
  ::umask(old_umask);
  ASSERT_TRUE(file.ok());
  auto info = fs_.stat_no_follow(path);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->mode, 0600u);
  EXPECT_EQ(info->type, PathInfo::Type::kRegular);
  EXPECT_EQ(info->owner_uid, ::getuid());

  auto again = fs_.create_exclusive(path, 0600);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(PosixFileSystemTest, RefusesToFollowSymlinks) {
  std::string target = dir_.file("target");
  std::string link = dir_.file("link");
  ASSERT_TRUE(fs_.create_exclusive(target, 0600).ok());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);

  EXPECT_FALSE(fs_.open_readable(link).ok());
  EXPECT_FALSE(fs_.create_exclusive(link, 0600).ok());
  auto info = fs_.stat_no_follow(link);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, PathInfo::Type::kSymlink);
}

TEST_F(PosixFileSystemTest, StatDirectoryDescribesTheOpenedDirectoryAndNothingElse) {
  const std::string dir = dir_.file("d");
  ASSERT_TRUE(fs_.make_directory(dir, 0710).ok());
  auto info = fs_.stat_directory(dir);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->type, PathInfo::Type::kDirectory);
  EXPECT_EQ(info->mode, 0710u);
  EXPECT_EQ(info->owner_uid, static_cast<uint32_t>(::geteuid()));

  const std::string link = dir_.file("link");
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  EXPECT_EQ(fs_.stat_directory(link).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(fs_.create_exclusive(dir_.file("file"), 0600).ok());
  EXPECT_EQ(fs_.stat_directory(dir_.file("file")).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fs_.stat_directory(dir_.file("none")).status().code(), StatusCode::kNotFound);
}

// Opening a FIFO for reading blocks until a writer comes: a FIFO planted where a snapshot or
// a slot file should be would stall whoever opens it. It is refused at once instead, and so
// is anything else that is not a regular file; the message says what it is.
TEST_F(PosixFileSystemTest, OpenReadableRefusesAFifoWithoutBlockingAndAnythingButAFile) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::unique_ptr<ReadableFile>> opened = Internal("not run");
  EXPECT_TRUE(test_util::finishes_without_blocking(fifo, [&] { opened = fs_.open_readable(fifo); }))
      << "open_readable blocked on a FIFO";
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("a FIFO, not a regular file"), std::string::npos)
      << opened.status().to_string();

  const std::string dir = dir_.file("d");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  auto directory = fs_.open_readable(dir);
  EXPECT_EQ(directory.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(directory.status().message().find("a directory"), std::string::npos);
  auto device = fs_.open_readable("/dev/null");
  EXPECT_EQ(device.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(device.status().message().find("a device"), std::string::npos);

  // A regular file reads as before: blocking mode is back once it is known to be one.
  const std::string file = dir_.file("f");
  ASSERT_TRUE(fs_.create_exclusive(file, 0600).ok());
  EXPECT_TRUE(fs_.open_readable(file).ok());
}

TEST_F(PosixFileSystemTest, LockFileRefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_.file("owner.lock");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::unique_ptr<FileLock>> lock = Internal("not run");
  EXPECT_TRUE(
      test_util::finishes_without_blocking(fifo, [&] { lock = fs_.lock_file(fifo, false); }));
  EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition);
}

// Removing a name removes what is there, as remove(3) does: a file, or an empty directory
// planted under a file's name. A directory with something in it stays (and says why).
TEST_F(PosixFileSystemTest, RemoveTakesAFileOrAnEmptyDirectory) {
  const std::string empty = dir_.file("empty");
  ASSERT_EQ(::mkdir(empty.c_str(), 0700), 0);
  EXPECT_TRUE(fs_.remove(empty).ok());
  EXPECT_EQ(fs_.stat_no_follow(empty).status().code(), StatusCode::kNotFound);
  const std::string full = dir_.file("full");
  ASSERT_EQ(::mkdir(full.c_str(), 0700), 0);
  ASSERT_TRUE(fs_.create_exclusive(full + "/x", 0600).ok());
  Status removed = fs_.remove(full);
  EXPECT_FALSE(removed.ok());
  EXPECT_TRUE(fs_.stat_no_follow(full + "/x").ok()) << "nothing inside is touched";
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(fs_.remove(fifo).ok());
}

TEST_F(PosixFileSystemTest, MissingFilesAreNotFound) {
  EXPECT_EQ(fs_.open_readable(dir_.file("none")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_.remove(dir_.file("none")).code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_.stat_no_follow(dir_.file("none")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_.list_directory(dir_.file("none")).status().code(), StatusCode::kNotFound);
}

TEST_F(PosixFileSystemTest, RenameReplacesAtomicallyAndDirectoriesSync) {
  std::string temp = dir_.file("s.tmp");
  std::string final_path = dir_.file("s.snap");
  {
    auto old_file = fs_.create_exclusive(final_path, 0600);
    ASSERT_TRUE(old_file.ok());
    ASSERT_TRUE((*old_file)->write_at(0, as_bytes("old")).ok());
  }
  {
    auto new_file = fs_.create_exclusive(temp, 0600);
    ASSERT_TRUE(new_file.ok());
    ASSERT_TRUE((*new_file)->write_at(0, as_bytes("new")).ok());
    ASSERT_TRUE((*new_file)->sync().ok());
  }
  ASSERT_TRUE(fs_.rename(temp, final_path).ok());
  ASSERT_TRUE(fs_.sync_directory(dir_.path()).ok());
  EXPECT_EQ(read_all(fs_, final_path), "new");
  auto names = fs_.list_directory(dir_.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"s.snap"});
}

TEST_F(PosixFileSystemTest, MakesDirectoriesWithExactModeAndListsThem) {
  std::string sub = dir_.file("cache");
  mode_t old_umask = ::umask(077);
  Status made = fs_.make_directory(sub, 0700);
  ::umask(old_umask);
  ASSERT_TRUE(made.ok()) << made.to_string();
  auto info = fs_.stat_no_follow(sub);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, PathInfo::Type::kDirectory);
  EXPECT_EQ(info->mode, 0700u);
  EXPECT_EQ(fs_.make_directory(sub, 0700).code(), StatusCode::kFailedPrecondition);

  for (const char* name : {"x", "y", "z"}) {
    ASSERT_TRUE(fs_.create_exclusive(sub + "/" + name, 0600).ok());
  }
  auto names = fs_.list_directory(sub);
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"x", "y", "z"}));
}

TEST_F(PosixFileSystemTest, ReportsAvailableSpace) {
  auto available = fs_.available_bytes(dir_.path());
  ASSERT_TRUE(available.ok()) << available.status().to_string();
  EXPECT_GT(*available, 0u);
}

TEST_F(PosixFileSystemTest, LockIsExclusiveUntilReleased) {
  std::string path = dir_.file("owner.lock");
  auto first = fs_.lock_file(path, /*wait=*/false);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  // flock locks belong to open file descriptions, so a second open in this process conflicts
  // exactly as another process would.
  auto second = fs_.lock_file(path, /*wait=*/false);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  first->reset();
  auto third = fs_.lock_file(path, /*wait=*/false);
  EXPECT_TRUE(third.ok()) << third.status().to_string();
}

// A file of `bytes` bytes (byte i is i * 7 mod 251), written and synced.
std::vector<std::byte> write_patterned(FileSystem& fs, const std::string& path, size_t bytes) {
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>(i * 7 % 251);
  auto file = fs.create_exclusive(path, 0600);
  EXPECT_TRUE(file.ok());
  EXPECT_TRUE((*file)->write_at(0, data).ok());
  EXPECT_TRUE((*file)->sync().ok());
  EXPECT_TRUE((*file)->close().ok());
  return data;
}

TEST_F(PosixFileSystemTest, SaysHowMuchOfARangeThePageCacheHolds) {
  const std::string path = dir_.file("cached");
  const size_t size = 256 * 1024 + 100;
  write_patterned(fs_, path, size);
  auto file = fs_.open_readable(path);
  ASSERT_TRUE(file.ok());
  // Just written: every byte is in the cache, counted exactly however the range is cut.
  EXPECT_EQ(*(*file)->cached_bytes(0, size), size);
  EXPECT_EQ(*(*file)->cached_bytes(100, 1000), 1000u);
  EXPECT_EQ(*(*file)->cached_bytes(size - 10, 50), 50u) << "bytes past the end count as held";
  EXPECT_EQ(*(*file)->cached_bytes(size + 4096, 10), 10u);

  // Dropped (synced above), then the second 64 KiB read back: the second is in the cache, and
  // the first is out of it where the file system drops pages (a disk's) and in it where it
  // does not (tmpfs, whose pages are the file), as the kernel says asked directly.
  const double left = siesta::testing::drop_cached_pages(path, size);
  ASSERT_GE(left, 0);
  std::vector<std::byte> middle(64 * 1024);
  ASSERT_EQ(*(*file)->read_at(64 * 1024, middle), middle.size());
  EXPECT_EQ(*(*file)->cached_bytes(64 * 1024, 64 * 1024), 64u * 1024);
  const double first = siesta::testing::cached_fraction(path, 0, 64 * 1024);
  ASSERT_TRUE(first == 0 || first == 1) << first;
  EXPECT_EQ(*(*file)->cached_bytes(0, 64 * 1024), first == 1 ? 64u * 1024 : 0u)
      << (left < 0.5 ? "pages dropped" : "pages kept");
}

TEST_F(PosixFileSystemTest, ReadsAroundThePageCacheWhereTheFileSystemCan) {
  const std::string path = dir_.file("direct");
  const std::vector<std::byte> data = write_patterned(fs_, path, 3 * 4096 + 10);
  auto file = fs_.open_readable(path);
  ASSERT_TRUE(file.ok());
  auto direct = (*file)->open_direct();
  // What the file system says of O_DIRECT, asked without siesta.
  UniqueFd probe(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!probe.valid()) {
    ASSERT_FALSE(direct.ok());
    EXPECT_EQ(direct.status().code(), StatusCode::kUnsupported) << direct.status().to_string();
    return;
  }
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  void* aligned = nullptr;
  ASSERT_EQ(::posix_memalign(&aligned, kDirectReadAlignment, 4 * 4096), 0);
  std::unique_ptr<void, decltype(&std::free)> buffer(aligned, &std::free);
  const std::span<std::byte> into(static_cast<std::byte*>(aligned), 4 * 4096);
  // From the second block to the end: the file ends 10 bytes into the fourth.
  auto got = (*direct)->read_at(4096, into.first(3 * 4096));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(*got, 2u * 4096 + 10);
  EXPECT_TRUE(
      std::equal(into.begin(), into.begin() + static_cast<long>(*got), data.begin() + 4096));
  // A read the alignment rule refuses fails (most file systems), or is served another way
  // (btrfs); it never returns other bytes.
  auto unaligned = (*direct)->read_at(100, into.first(4096));
  if (unaligned.ok()) {
    EXPECT_TRUE(
        std::equal(into.begin(), into.begin() + static_cast<long>(*unaligned), data.begin() + 100));
  }
  // The handle reads the file it was opened from, not what the name points to now.
  ASSERT_TRUE(fs_.rename(path, dir_.file("moved")).ok());
  write_patterned(fs_, path, 10);
  auto again = (*file)->open_direct();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->size(), data.size());
}

}  // namespace
}  // namespace siesta
