// PosixFileSystem's failures, each with the typed code the callers branch on and a message
// that names the path: a rename, a directory sync, a listing, a free-space query or a creation
// that the kernel refuses, a socket under a file's name, a symlink loop, and the errno mapping
// (status_from_errno) for the codes the other tests do not reach.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "core/base/os_error.h"
#include "core/base/posix_file_system.h"
#include "core/base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class PosixFileSystemErrorTest : public ::testing::Test {
 protected:
  void write_file(const std::string& path) { std::ofstream(path) << "x"; }

  siesta::testing::TempDir dir_;
  PosixFileSystem fs_;
};

TEST_F(PosixFileSystemErrorTest, ARenameOfAMissingFileIsNotFoundNamingBothPaths) {
  const std::string from = dir_.file("none"), to = dir_.file("to");
  const Status renamed = fs_.rename(from, to);
  EXPECT_EQ(renamed.code(), StatusCode::kNotFound);
  EXPECT_THAT(renamed.message(), AllOf(HasSubstr(from), HasSubstr(to)));
}

TEST_F(PosixFileSystemErrorTest, SyncingWhatIsNotADirectoryFails) {
  EXPECT_EQ(fs_.sync_directory(dir_.file("none")).code(), StatusCode::kNotFound);
  write_file(dir_.file("file"));
  const Status synced = fs_.sync_directory(dir_.file("file"));
  EXPECT_FALSE(synced.ok());
  EXPECT_THAT(synced.message(), HasSubstr(dir_.file("file")));
}

// Not followed: a symlink's target is never listed in its place.
TEST_F(PosixFileSystemErrorTest, ListingASymlinkIsRefused) {
  ASSERT_EQ(::symlink(dir_.path().c_str(), dir_.file("link").c_str()), 0);
  const Result<std::vector<std::string>> listed = fs_.list_directory(dir_.file("link"));
  EXPECT_FALSE(listed.ok());
  EXPECT_THAT(listed.status().message(), HasSubstr(dir_.file("link")));
}

TEST_F(PosixFileSystemErrorTest, FreeSpaceOfAMissingPathIsNotFound) {
  const Result<uint64_t> available = fs_.available_bytes(dir_.file("none"));
  EXPECT_EQ(available.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(available.status().message(), HasSubstr(dir_.file("none")));
}

TEST_F(PosixFileSystemErrorTest, CreatingInAMissingDirectoryIsNotFound) {
  EXPECT_EQ(fs_.create_exclusive(dir_.file("none/file"), 0600).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(fs_.make_directory(dir_.file("none/sub"), 0700).code(), StatusCode::kNotFound);
}

// A socket is one more thing that is not a regular file: refused (the kernel will not open
// one: ENXIO), without blocking.
TEST_F(PosixFileSystemErrorTest, ASocketUnderAFilesNameIsRefused) {
  const std::string path = dir_.file("sock");
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_TRUE(fd.valid());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  const auto opened = fs_.open_readable(path);
  EXPECT_FALSE(opened.ok());
  EXPECT_THAT(opened.status().message(), HasSubstr(path));
  EXPECT_FALSE(fs_.lock_file(path, /*wait=*/false).ok());
}

// A path through a symlink that points at itself: the kernel gives up resolving it (ELOOP),
// which is refused as a symlink, not taken for a missing directory.
TEST_F(PosixFileSystemErrorTest, ADirectoryBehindASymlinkLoopIsRefusedAsASymlink) {
  ASSERT_EQ(::symlink("loop", dir_.file("loop").c_str()), 0);
  const std::string path = dir_.file("loop/sub");
  const Result<PathInfo> info = fs_.stat_directory(path);
  EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(), AllOf(HasSubstr(path), HasSubstr("a symlink")));
}

// A name longer than the file system allows is the caller's mistake (InvalidArgument), not a
// missing file.
TEST_F(PosixFileSystemErrorTest, ANameTooLongIsInvalid) {
  const std::string path = dir_.file(std::string(300, 'n'));
  EXPECT_EQ(fs_.stat_no_follow(path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs_.create_exclusive(path, 0600).status().code(), StatusCode::kInvalidArgument);
}

// Guards: an errno mapped to the wrong code (callers branch on NotFound, NoSpace, OutOfMemory
// and FailedPrecondition; anything unknown is IoError), or the message losing what failed.
TEST_F(PosixFileSystemErrorTest, ErrnoValuesMapToTheirCodes) {
  const struct {
    int err;
    StatusCode code;
  } cases[] = {
      {ENOENT, StatusCode::kNotFound},
      {ENOSPC, StatusCode::kNoSpace},
      {EDQUOT, StatusCode::kNoSpace},
      {ENOMEM, StatusCode::kOutOfMemory},
      {EINVAL, StatusCode::kInvalidArgument},
      {ENAMETOOLONG, StatusCode::kInvalidArgument},
      {EEXIST, StatusCode::kFailedPrecondition},
      {ELOOP, StatusCode::kFailedPrecondition},
      {EACCES, StatusCode::kFailedPrecondition},
      {EPERM, StatusCode::kFailedPrecondition},
      {EIO, StatusCode::kIoError},
      {EBADF, StatusCode::kIoError},
  };
  for (const auto& c : cases) {
    const Status status = status_from_errno(c.err, "open /x");
    EXPECT_EQ(status.code(), c.code) << std::strerror(c.err);
    EXPECT_EQ(status.message(), std::string("open /x: ") + std::strerror(c.err));
  }
}

}  // namespace
}  // namespace siesta
