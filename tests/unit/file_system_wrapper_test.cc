// FileSystemWrapper and the file wrappers override nothing: each call reaches the wrapped
// object with its arguments and returns its result, so a fault-injecting wrapper that changes
// one call leaves every other exactly as the real file system does. And a WritableFile that
// keeps the default write-back hints may be given them (they do nothing).
#include "core/base/file_system_wrapper.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

TEST(FileSystemWrapperTest, EveryCallReachesTheWrappedFileSystem) {
  siesta::testing::TempDir dir;
  PosixFileSystem posix;
  FileSystemWrapper fs(posix);
  EXPECT_EQ(&fs.target(), &posix);
  const std::string sub = dir.file("sub"), temp = dir.file("sub/t"), name = dir.file("sub/f");
  ASSERT_TRUE(fs.make_directory(sub, 0700).ok());
  EXPECT_EQ(fs.stat_directory(sub)->type, PathInfo::Type::kDirectory);

  Result<std::unique_ptr<WritableFile>> created = fs.create_exclusive(temp, 0600);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  WritableFileWrapper file(std::move(created).value());
  ASSERT_TRUE(file.write_at(0, bytes_of("hello")).ok());
  file.start_writeback(0, 5);
  file.wait_writeback(0, 5);
  ASSERT_TRUE(file.sync().ok());
  ASSERT_TRUE(file.close().ok());
  ASSERT_TRUE(fs.rename(temp, name).ok());
  ASSERT_TRUE(fs.sync_directory(sub).ok());

  EXPECT_EQ(fs.list_directory(sub).value(), std::vector<std::string>{"f"});
  EXPECT_EQ(fs.stat_no_follow(name)->size, 5u);
  EXPECT_GT(fs.available_bytes(sub).value(), 0u);
  Result<std::unique_ptr<ReadableFile>> opened = fs.open_readable(name);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ReadableFileWrapper readable(std::move(opened).value());
  EXPECT_EQ(readable.size().value(), 5u);
  std::vector<std::byte> back(5);
  EXPECT_EQ(readable.read_at(0, back).value(), 5u);
  EXPECT_EQ(back, bytes_of("hello"));

  Result<std::unique_ptr<FileLock>> lock = fs.lock_file(dir.file("lock"), /*wait=*/false);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_EQ(fs.lock_file(dir.file("lock"), false).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(fs.remove(name).ok());
  EXPECT_EQ(fs.remove(name).code(), StatusCode::kNotFound) << "errors come back unchanged";
}

TEST(FileSystemWrapperTest, AReadableWrapperNeverHandsOutReadsThatWouldBypassIt) {
  // A wrapper that changes reads (faults, a shrinking file) would be bypassed by a handle around
  // the cache that it did not wrap: the base passes neither question on.
  testing::TempDir dir;
  PosixFileSystem posix;
  const std::string name = dir.file("f");
  {
    auto file = posix.create_exclusive(name, 0600).value();
    ASSERT_TRUE(file->write_at(0, bytes_of("hello")).ok());
    ASSERT_TRUE(file->close().ok());
  }
  ReadableFileWrapper readable(posix.open_readable(name).value());
  EXPECT_EQ(readable.open_direct().status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(readable.cached_bytes(0, 12345).value(), 12345u) << "the default: all of it";
}

// A file that implements only what it must: the write-back hints are the interface's no-ops.
class MinimalFile final : public WritableFile {
 public:
  Status write_at(uint64_t, std::span<const std::byte>) override { return Status::Ok(); }
  Status sync() override { return Status::Ok(); }
  Status close() override { return Status::Ok(); }
};

TEST(FileSystemWrapperTest, TheDefaultWritebackHintsDoNothing) {
  MinimalFile file;
  WritableFile& base = file;
  base.start_writeback(0, 4096);
  base.wait_writeback(0, 4096);
  EXPECT_TRUE(base.sync().ok());
}

}  // namespace
}  // namespace siesta
