// The snapshot directory rules (DESIGN.md, "Snapshot files"): created 0700, refused when it
// is a symlink, not a directory, writable by group or others, or not usable by its owner.
#include "server/cache_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace siesta::server {
namespace {

using siesta::testing::TempDir;
using ::testing::HasSubstr;

mode_t mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(CacheDirTest, CreatesAMissingDirectoryPrivate) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const mode_t old_umask = ::umask(0);  // mkdir's mode alone must not leak wider rights
  bool created = false;
  Status status = prepare_cache_dir(dir, &created);
  ::umask(old_umask);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_TRUE(created);
  EXPECT_EQ(mode_of(dir), 0700u);
}

TEST(CacheDirTest, CreatesItEvenUnderAUmaskThatRemovesOwnerBits) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const mode_t old_umask = ::umask(0700);
  Status status = prepare_cache_dir(dir, nullptr);
  ::umask(old_umask);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(mode_of(dir), 0700u);
}

TEST(CacheDirTest, AcceptsAnExistingPrivateDirectoryAsItIs) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  ASSERT_EQ(::mkdir(dir.c_str(), 0750), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  bool created = true;
  ASSERT_TRUE(prepare_cache_dir(dir, &created).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(mode_of(dir), 0750u);  // group may read; only writing is refused
}

TEST(CacheDirTest, TrailingSlashIsTheSameDirectory) {
  TempDir temp;
  ASSERT_TRUE(prepare_cache_dir(temp.file("cache") + "//", nullptr).ok());
  EXPECT_EQ(mode_of(temp.file("cache")), 0700u);
}

TEST(CacheDirTest, RefusesWritableByOthersOrGroup) {
  TempDir temp;
  for (mode_t mode : {0777u, 0707u, 0770u, 0720u}) {
    const std::string dir = temp.file("cache" + std::to_string(mode));
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    Status status = prepare_cache_dir(dir, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << mode;
    EXPECT_THAT(status.message(), HasSubstr("--cache-disk-dir \"" + dir + "\""));
    EXPECT_THAT(status.message(), HasSubstr("writable by group or others"));
    EXPECT_EQ(mode_of(dir), mode) << "a refused directory is left as it was";
  }
}

TEST(CacheDirTest, RefusesASymlinkEvenToAGoodDirectory) {
  TempDir temp;
  const std::string real = temp.file("real");
  const std::string link = temp.file("link");
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& path : {link, link + "/"}) {
    Status status = prepare_cache_dir(path, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_THAT(status.message(), HasSubstr("is a symlink")) << path;
  }
}

TEST(CacheDirTest, RefusesADanglingSymlink) {
  TempDir temp;
  const std::string link = temp.file("link");
  ASSERT_EQ(::symlink(temp.file("nowhere").c_str(), link.c_str()), 0);
  EXPECT_THAT(prepare_cache_dir(link, nullptr).message(), HasSubstr("is a symlink"));
  struct stat info {};
  EXPECT_NE(::stat(temp.file("nowhere").c_str(), &info), 0) << "nothing created through it";
}

TEST(CacheDirTest, RefusesAFile) {
  TempDir temp;
  const std::string file = temp.file("file");
  std::ofstream(file) << "x";
  Status status = prepare_cache_dir(file, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is not a directory"));
}

TEST(CacheDirTest, RefusesADirectoryItsOwnerCannotWrite) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  ASSERT_EQ(::mkdir(dir.c_str(), 0500), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);
  EXPECT_THAT(prepare_cache_dir(dir, nullptr).message(),
              HasSubstr("must be readable, writable and searchable by its owner (mode 0500)"));
}

TEST(CacheDirTest, MissingParentIsNotFound) {
  TempDir temp;
  Status status = prepare_cache_dir(temp.file("a/b"), nullptr);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("parent directory does not exist"));
}

TEST(CacheDirTest, RefusesAnotherUsersDirectory) {
  // Root can give a directory away; anyone else can point at one of root's.
  TempDir temp;
  std::string dir = "/";
  uid_t owner = 0;
  if (::geteuid() == 0) {
    dir = temp.file("theirs");
    owner = 65534;  // nobody
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), owner, owner), 0);
  }
  Status status = prepare_cache_dir(dir, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("is owned by uid " + std::to_string(owner) + ", not by this user"));
}

TEST(CacheDirTest, EmptyPathIsInvalid) {
  EXPECT_EQ(prepare_cache_dir("", nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta::server
