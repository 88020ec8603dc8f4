// PrivateDirectory when the file system fails or changes under it: a look at the name that
// fails, a mkdir that fails or finds the directory made meanwhile, a look after creating it
// that fails, and the opened directory refused (another user's 0700 directory, or a name
// swapped between the looks). The answers come from a ScriptedFileSystem over the real one;
// each test says what it injects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "core/base/posix_file_system.h"
#include "core/base/private_directory.h"
#include "tests/support/scripted_file_system.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using test_util::ScriptedFileSystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

using Info = Result<PathInfo>;

PrivateDirectory::Options options() {
  PrivateDirectory::Options o;
  o.noun = "cache directory";
  return o;
}

PathInfo directory_info(uint32_t mode) {
  PathInfo info;
  info.type = PathInfo::Type::kDirectory;
  info.owner_uid = static_cast<uint32_t>(::geteuid());
  info.mode = mode;
  return info;
}

class PrivateDirectoryFaultTest : public ::testing::Test {
 protected:
  siesta::testing::TempDir temp_;
  const std::string dir_ = temp_.file("cache");
  PosixFileSystem posix_;
  ScriptedFileSystem fs_{posix_};
};

// Guards: a failed look at the name taken for "missing" (and a directory made over whatever
// is there), or the error losing the directory's name.
TEST_F(PrivateDirectoryFaultTest, ALookThatFailsIsTheError) {
  // Injected: lstat fails with EIO.
  fs_.stat_no_follow_answer = [](const std::string& path) -> std::optional<Info> {
    return IoError("injected lstat failure of " + path);
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kIoError);
  EXPECT_THAT(opened.status().message(), AllOf(HasSubstr("cache directory"), HasSubstr(dir_),
                                               HasSubstr("injected lstat failure")));
  EXPECT_EQ(posix_.stat_no_follow(dir_).status().code(), StatusCode::kNotFound) << "not made";
}

// Guards: a mkdir refused for another reason than "exists" going on to judge nothing.
TEST_F(PrivateDirectoryFaultTest, AMkdirThatFailsCannotCreateIt) {
  // Injected: mkdir fails with ENOSPC.
  fs_.make_directory_answer = [](const std::string&) -> std::optional<Status> {
    return NoSpace("injected mkdir failure");
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kNoSpace);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr("cannot create it"), HasSubstr("injected mkdir failure")));
}

// Guards: EEXIST from mkdir (another process made the directory between the look and the
// mkdir) refused instead of judged like any existing directory.
TEST_F(PrivateDirectoryFaultTest, ADirectoryMadeMeanwhileIsJudgedAndNotCreatedByThisCall) {
  // Injected: mkdir finds the directory another process has just made (0700).
  fs_.make_directory_answer = [this](const std::string& path) -> std::optional<Status> {
    EXPECT_TRUE(posix_.make_directory(path, 0700).ok());
    return FailedPrecondition("injected: mkdir " + path + ": File exists");
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_FALSE(opened->created());
  EXPECT_EQ(opened->path(), dir_);
}

// Guards: a failed look after the mkdir passed over (the directory then judged from nothing),
// or the wrong error given: the look's own after a mkdir that worked, the mkdir's after one
// that found the name taken.
TEST_F(PrivateDirectoryFaultTest, ALookAfterCreatingThatFailsCannotCreateIt) {
  int looks = 0;
  // Injected: the second lstat (after the mkdir) fails with EIO.
  fs_.stat_no_follow_answer = [&](const std::string& path) -> std::optional<Info> {
    if (++looks == 1) return std::nullopt;
    return IoError("injected lstat failure of " + path);
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kIoError);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr("cannot create it"), HasSubstr("injected lstat failure")));

  looks = 0;
  // Injected as well: mkdir says the name exists (yet nothing is there to look at).
  fs_.make_directory_answer = [](const std::string&) -> std::optional<Status> {
    return FailedPrecondition("injected: mkdir: File exists");
  };
  opened = PrivateDirectory::open(fs_, temp_.file("other"), options());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr("cannot create it"), HasSubstr("injected: mkdir: File exists")));
}

// Guards: an opened directory that cannot be looked at for another reason than a refusal
// reported as a refusal (or not at all).
TEST_F(PrivateDirectoryFaultTest, AnOpenedDirectoryThatFailsIsTheError) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  // Injected: opening the directory fails with EIO.
  fs_.stat_directory_answer = [](const std::string& path) -> std::optional<Info> {
    return IoError("injected open failure of " + path);
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kIoError);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr(dir_), HasSubstr("injected open failure")));
}

// Guards: a directory this user may not open (another user's 0700 directory) described as
// "changed while it was checked", or without its owner and mode.
TEST_F(PrivateDirectoryFaultTest, ADirectoryThatCannotBeOpenedIsNotAccessible) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  // Injected: opening the directory is refused (EACCES), the name is still a directory.
  fs_.stat_directory_answer = [](const std::string&) -> std::optional<Info> {
    return FailedPrecondition("injected: Permission denied");
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr("is not accessible to this user"), HasSubstr("mode 0700"),
                    HasSubstr("owned by uid " + std::to_string(::geteuid())),
                    HasSubstr("injected: Permission denied")));
}

// Guards: a name swapped for something else between the two looks described as "not
// accessible" (a directory it no longer is).
TEST_F(PrivateDirectoryFaultTest, ANameSwappedBetweenTheLooksChangedWhileItWasChecked) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  int looks = 0;
  // Injected: the first lstat sees a directory, then the name is a file: opening it as a
  // directory is refused, and the second lstat sees the file.
  fs_.stat_no_follow_answer = [&](const std::string&) -> std::optional<Info> {
    if (++looks == 1) return Info(directory_info(0700));
    PathInfo file;
    file.type = PathInfo::Type::kRegular;
    return Info(file);
  };
  fs_.stat_directory_answer = [](const std::string&) -> std::optional<Info> {
    return FailedPrecondition("injected: not a directory");
  };
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_, options());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("changed while it was checked"));
  EXPECT_EQ(looks, 2);
}

// Guards: trailing slashes kept (lstat and O_NOFOLLOW would then follow a symlink named like
// the directory), or the root directory's files named "//x".
TEST_F(PrivateDirectoryFaultTest, TrailingSlashesGoAndTheRootStaysTheRoot) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  Result<PrivateDirectory> opened = PrivateDirectory::open(fs_, dir_ + "///", options());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ(opened->path(), dir_);
  EXPECT_EQ(opened->file("x"), dir_ + "/x");

  // The root, as this user's private directory (answered: no test owns the real one).
  std::string looked_at;
  fs_.stat_no_follow_answer = [&](const std::string& path) -> std::optional<Info> {
    looked_at = path;
    return Info(directory_info(0700));
  };
  fs_.stat_directory_answer = [](const std::string&) -> std::optional<Info> {
    return Info(directory_info(0700));
  };
  opened = PrivateDirectory::open(fs_, "///", options());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ(looked_at, "/");
  EXPECT_EQ(opened->path(), "/");
  EXPECT_EQ(opened->file("x"), "/x");
}

}  // namespace
}  // namespace siesta
