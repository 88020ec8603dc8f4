// The snapshot directory rules (core/base/private_directory.h) as the server applies them to
// --cache-disk-dir: created 0700, refused when it is a symlink, not a directory, writable by
// group or others, not usable by its owner or not accessible to this user; every message
// names the flag (the server's context) and says what is wrong (core's words).
#include "server/cache_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "tests/support/temp_dir.h"

namespace siesta::server {
namespace {

using siesta::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

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
    EXPECT_THAT(status.message(), StartsWith("--cache-disk-dir: "));
    EXPECT_THAT(status.message(), HasSubstr("\"" + dir + "\""));
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

// Runs `check` in a child process whose user and group are `uid` (root may become anyone) and
// returns what it returned; "<...>" when the child could not run it.
std::string as_user(uid_t uid, const std::function<std::string()>& check) {
  int fds[2];
  if (::pipe(fds) != 0) return "<pipe failed>";
  const pid_t pid = ::fork();
  if (pid < 0) return "<fork failed>";
  if (pid == 0) {
    ::close(fds[0]);
    std::string out = ::setgid(uid) == 0 && ::setuid(uid) == 0 ? check() : "<setuid failed>";
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

// Another user's 0700 directory: this user can see it (lstat) but not open it. It was refused
// as "changed while it was checked ... Permission denied"; what is wrong is that it is not
// this user's to use.
TEST(CacheDirTest, AnotherUsersPrivateDirectoryIsNotAccessibleToThisUser) {
  TempDir temp;
  std::string message;
  if (::geteuid() != 0) {
    struct stat info {};
    if (::lstat("/root", &info) != 0 || info.st_uid != 0 || (info.st_mode & 07777) != 0700 ||
        ::access("/root", R_OK | X_OK) == 0) {
      GTEST_SKIP() << "needs root, or a root-owned 0700 /root this user cannot open";
    }
    message = prepare_cache_dir("/root", nullptr).to_string();
  } else {
    // Root's own 0700 directory, seen by "nobody" (uid 65534) in a child process; its parent
    // is made searchable so that only the directory itself is out of reach.
    ASSERT_EQ(::chmod(temp.path().c_str(), 0755), 0);
    const std::string dir = temp.file("roots");
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    message = as_user(65534, [&] { return prepare_cache_dir(dir, nullptr).to_string(); });
  }
  EXPECT_THAT(message, StartsWith("failed_precondition: --cache-disk-dir: "));
  EXPECT_THAT(message, HasSubstr("is not accessible to this user"));
  EXPECT_THAT(message, HasSubstr("owned by uid 0, mode 0700"));
  EXPECT_THAT(message, Not(HasSubstr("changed while it was checked")));
}

TEST(CacheDirTest, EmptyPathIsInvalid) {
  EXPECT_EQ(prepare_cache_dir("", nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta::server
