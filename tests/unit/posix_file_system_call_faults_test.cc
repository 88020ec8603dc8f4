// PosixFileSystem when a system call fails that no real condition in a test makes fail (an
// fstat, fcntl, pread, pwrite, fdatasync, close, fchmod, chmod, fsync, fdopendir, readdir or
// flock that the kernel refuses on a working file system), or is interrupted by a signal
// (EINTR: retried). The libc functions the file system calls are interposed here: this file
// defines them (extern "C"), the static library's calls bind to these definitions, and each
// forwards to the real function unless the armed CallFault (tests/support/call_faults.h) says
// this call fails. Each test names the call and errno it injects, and checks the typed code,
// the message (the call and the path) and what is left: no descriptor leaked, the retried call
// done.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "tests/support/call_faults.h"
#include "tests/support/temp_dir.h"

namespace {

using siesta::test_util::armed_fault;
using siesta::test_util::fails;
using siesta::test_util::real_function;

// Sets errno and returns what the armed plan says a failing call returns.
template <class T>
T failed_call() {
  const siesta::test_util::CallFault fault = armed_fault();
  errno = fault.error;
  return static_cast<T>(fault.result);
}

}  // namespace

// ---- the interposed libc functions ----

extern "C" int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  // The mode is passed only with O_CREAT or O_TMPFILE. (The analyzer's model of open(2)
  // does not see the va_start above: a false positive.)
  const mode_t mode = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE
                          ? va_arg(args, mode_t)  // NOLINT(clang-analyzer-valist.Uninitialized)
                          : 0;
  va_end(args);
  static auto* real = real_function<int(const char*, int, ...)>("open");
  if (fails("open")) return failed_call<int>();
  return real(path, flags, mode);
}

extern "C" int fstat(int fd, struct stat* st) noexcept {
  static auto* real = real_function<int(int, struct stat*)>("fstat");
  if (fails("fstat")) return failed_call<int>();
  const int result = real(fd, st);
  // "fstat:type": the call succeeds and reports the file type in the plan's result instead.
  if (result == 0 && fails("fstat:type")) {
    st->st_mode = static_cast<mode_t>((st->st_mode & 07777) | armed_fault().result);
  }
  return result;
}

extern "C" int fcntl(int fd, int command, ...) {
  // As glibc reads it: one pointer-sized argument, whatever the command.
  va_list args;
  va_start(args, command);
  void* argument = va_arg(args, void*);
  va_end(args);
  static auto* real = real_function<int(int, int, ...)>("fcntl");
  if (fails("fcntl")) return failed_call<int>();
  return real(fd, command, argument);
}

extern "C" ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) {
  static auto* real = real_function<ssize_t(int, const void*, size_t, off_t)>("pwrite");
  if (fails("pwrite")) return failed_call<ssize_t>();
  return real(fd, data, size, offset);
}

extern "C" ssize_t pread(int fd, void* data, size_t size, off_t offset) {
  static auto* real = real_function<ssize_t(int, void*, size_t, off_t)>("pread");
  if (fails("pread")) return failed_call<ssize_t>();
  return real(fd, data, size, offset);
}

extern "C" int fdatasync(int fd) {
  static auto* real = real_function<int(int)>("fdatasync");
  if (fails("fdatasync")) return failed_call<int>();
  return real(fd);
}

extern "C" int fsync(int fd) {
  static auto* real = real_function<int(int)>("fsync");
  if (fails("fsync")) return failed_call<int>();
  return real(fd);
}

// As Linux does on EIO: the descriptor is released all the same, and the error reported.
extern "C" int close(int fd) {
  static auto* real = real_function<int(int)>("close");
  const int result = real(fd);
  if (result == 0 && fails("close")) return failed_call<int>();
  return result;
}

extern "C" int fchmod(int fd, mode_t mode) noexcept {
  static auto* real = real_function<int(int, mode_t)>("fchmod");
  if (fails("fchmod")) return failed_call<int>();
  return real(fd, mode);
}

extern "C" int chmod(const char* path, mode_t mode) noexcept {
  static auto* real = real_function<int(const char*, mode_t)>("chmod");
  if (fails("chmod")) return failed_call<int>();
  return real(path, mode);
}

extern "C" DIR* fdopendir(int fd) {
  static auto* real = real_function<DIR*(int)>("fdopendir");
  if (fails("fdopendir")) {
    errno = armed_fault().error;
    return nullptr;
  }
  return real(fd);
}

extern "C" struct dirent* readdir(DIR* dir) {
  static auto* real = real_function<struct dirent*(DIR*)>("readdir");
  if (fails("readdir")) {
    errno = armed_fault().error;
    return nullptr;
  }
  return real(dir);
}

extern "C" int flock(int fd, int operation) noexcept {
  static auto* real = real_function<int(int, int)>("flock");
  if (fails("flock")) return failed_call<int>();
  return real(fd, operation);
}

// ---- the tests ----

namespace siesta {
namespace {

using test_util::CallFault;
using test_util::ScopedCallFault;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// The process's open descriptors, to show that a failure released what it had opened.
size_t open_descriptors() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class PosixFileSystemCallFaultTest : public ::testing::Test {
 protected:
  std::string make_file(const std::string& name, const std::string& text) {
    std::ofstream(dir_.file(name)) << text;
    return dir_.file(name);
  }
  std::unique_ptr<WritableFile> create(const std::string& name) {
    Result<std::unique_ptr<WritableFile>> file = fs_.create_exclusive(dir_.file(name), 0600);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    return file.ok() ? std::move(file).value() : nullptr;
  }

  testing::TempDir dir_;
  PosixFileSystem fs_;
};

// Guards: a call interrupted by a signal reported as a failure instead of being made again
// (each call the file system retries on EINTR: the opens, pwrite, pread, fdatasync, fsync and
// flock).
TEST_F(PosixFileSystemCallFaultTest, ACallInterruptedBySignalIsMadeAgain) {
  const std::string path = make_file("existing", "hello");
  {
    const CallFault fault{.function = "open", .error = EINTR};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    EXPECT_TRUE(fs_.open_readable(path).ok());
    EXPECT_TRUE(fs_.stat_directory(dir_.path()).ok());
    EXPECT_EQ(armed.fired(), 1u);
  }
  std::unique_ptr<WritableFile> file = create("written");
  ASSERT_NE(file, nullptr);
  {
    const CallFault fault{.function = "pwrite", .error = EINTR};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    EXPECT_TRUE(file->write_at(0, as_bytes("abc")).ok());
    EXPECT_EQ(armed.fired(), 1u);
  }
  for (const char* function : {"fdatasync", "fsync", "flock"}) {
    const CallFault fault{.function = function, .error = EINTR};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    EXPECT_TRUE(file->sync().ok());
    EXPECT_TRUE(fs_.sync_directory(dir_.path()).ok());
    EXPECT_TRUE(fs_.lock_file(dir_.file("lock"), /*wait=*/false).ok());
    EXPECT_EQ(armed.fired(), 1u);
  }
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(contents(dir_.file("written")), "abc");

  Result<std::unique_ptr<ReadableFile>> reader = fs_.open_readable(path);
  ASSERT_TRUE(reader.ok());
  std::string out(5, '\0');
  {
    const CallFault fault{.function = "pread", .error = EINTR};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    Result<size_t> read = (*reader)->read_at(0, std::as_writable_bytes(std::span(out)));
    ASSERT_TRUE(read.ok());
    EXPECT_EQ(*read, 5u);
    EXPECT_EQ(armed.fired(), 1u);
  }
  EXPECT_EQ(out, "hello");
}

// Guards: a file whose fstat fails after the open taken for a regular file, or its descriptor
// kept open.
TEST_F(PosixFileSystemCallFaultTest, AnFstatThatFailsAfterTheOpenIsTheErrorAndClosesTheFile) {
  const std::string path = make_file("file", "x");
  const size_t before = open_descriptors();
  const CallFault fault{.function = "fstat", .sticky = true, .error = EIO};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<std::unique_ptr<ReadableFile>> opened = fs_.open_readable(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kIoError);
  EXPECT_THAT(opened.status().message(), AllOf(HasSubstr("fstat"), HasSubstr(path)));
  const Result<std::unique_ptr<FileLock>> locked = fs_.lock_file(path, /*wait=*/true);
  EXPECT_EQ(locked.status().code(), StatusCode::kIoError);
  const Result<PathInfo> info = fs_.stat_directory(dir_.path());
  EXPECT_EQ(info.status().code(), StatusCode::kIoError);
  EXPECT_THAT(info.status().message(), AllOf(HasSubstr("fstat"), HasSubstr(dir_.path())));
  EXPECT_EQ(armed.fired(), 3u);
  EXPECT_EQ(open_descriptors(), before);
}

TEST_F(PosixFileSystemCallFaultTest, AReadableFilesSizeIsTheErrorOfItsFstat) {
  const std::string path = make_file("file", "four");
  Result<std::unique_ptr<ReadableFile>> file = fs_.open_readable(path);
  ASSERT_TRUE(file.ok());
  const CallFault fault{.function = "fstat", .error = EIO};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<uint64_t> size = (*file)->size();
  EXPECT_EQ(size.status().code(), StatusCode::kIoError);
  EXPECT_THAT(size.status().message(), AllOf(HasSubstr("fstat"), HasSubstr(path)));
}

// What the opened descriptor turned out to be, in the refusal's message: the kinds no test
// can put under a name and still open (a socket's open fails with ENXIO, O_NOFOLLOW refuses a
// symlink, a block device needs one), reported here by an fstat that says so.
TEST_F(PosixFileSystemCallFaultTest, ARefusalNamesWhatTheOpenedFileIs) {
  const std::string path = make_file("file", "x");
  const struct {
    mode_t type;
    const char* named;
  } cases[] = {{S_IFSOCK, "a socket"},
               {S_IFBLK, "a device"},
               {S_IFLNK, "a symlink"},
               {S_IFMT, "not a regular file"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string("injected: fstat reports ") + c.named);
    ScopedCallFault armed({.function = "fstat:type", .error = 0, .result = c.type});
    const Result<std::unique_ptr<ReadableFile>> opened = fs_.open_readable(path);
    EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(opened.status().message(),
                AllOf(HasSubstr(path), HasSubstr(std::string(c.named) + ", not a regular file")));
    EXPECT_EQ(armed.fired(), 1u);
  }
}

// Guards: O_NONBLOCK left on (or the file used) when reading or clearing the flags fails.
TEST_F(PosixFileSystemCallFaultTest, AnFcntlThatFailsIsTheErrorOfTheOpen) {
  const std::string path = make_file("file", "x");
  const size_t before = open_descriptors();
  for (uint64_t nth : {1u, 2u}) {  // F_GETFL, then F_SETFL
    const CallFault fault{.function = "fcntl", .nth_call = nth, .error = EIO};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    const Result<std::unique_ptr<ReadableFile>> opened = fs_.open_readable(path);
    EXPECT_EQ(opened.status().code(), StatusCode::kIoError);
    EXPECT_THAT(opened.status().message(), AllOf(HasSubstr("fcntl"), HasSubstr(path)));
    EXPECT_EQ(armed.fired(), 1u);
  }
  EXPECT_EQ(open_descriptors(), before);
}

// Guards: a failed or empty pwrite taken for a written chunk (the loop would spin forever on
// a pwrite that writes nothing), and ENOSPC losing its code.
TEST_F(PosixFileSystemCallFaultTest, APwriteThatFailsOrWritesNothingIsTheError) {
  std::unique_ptr<WritableFile> file = create("file");
  ASSERT_NE(file, nullptr);
  const struct {
    CallFault fault;
    StatusCode code = StatusCode::kOk;
    const char* says = "";
  } cases[] = {
      {{.function = "pwrite", .error = EIO}, StatusCode::kIoError, "pwrite"},
      {{.function = "pwrite", .error = ENOSPC}, StatusCode::kNoSpace, "pwrite"},
      {{.function = "pwrite", .error = 0, .result = 0}, StatusCode::kIoError, "wrote nothing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    ScopedCallFault armed(c.fault);
    const Status written = file->write_at(0, as_bytes("data"));
    EXPECT_EQ(written.code(), c.code);
    EXPECT_THAT(written.message(), AllOf(HasSubstr(c.says), HasSubstr(dir_.file("file"))));
  }
}

TEST_F(PosixFileSystemCallFaultTest, APreadThatFailsIsTheError) {
  const std::string path = make_file("file", "data");
  Result<std::unique_ptr<ReadableFile>> file = fs_.open_readable(path);
  ASSERT_TRUE(file.ok());
  std::string out(4, '\0');
  const CallFault fault{.function = "pread", .error = EIO};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<size_t> read = (*file)->read_at(0, std::as_writable_bytes(std::span(out)));
  EXPECT_EQ(read.status().code(), StatusCode::kIoError);
  EXPECT_THAT(read.status().message(), AllOf(HasSubstr("pread"), HasSubstr(path)));
}

// Guards: a failed fdatasync reported as durable (the snapshot would be renamed into place
// with bytes that may not survive a crash).
TEST_F(PosixFileSystemCallFaultTest, AnFdatasyncThatFailsIsTheError) {
  std::unique_ptr<WritableFile> file = create("file");
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->write_at(0, as_bytes("data")).ok());
  const CallFault fault{.function = "fdatasync", .error = EIO};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Status synced = file->sync();
  EXPECT_EQ(synced.code(), StatusCode::kIoError);
  EXPECT_THAT(synced.message(), AllOf(HasSubstr("fdatasync"), HasSubstr(dir_.file("file"))));
}

// Guards: a close that reports EIO (data lost in write-back on some file systems) taken for
// success, or the descriptor closed twice afterwards.
TEST_F(PosixFileSystemCallFaultTest, ACloseThatFailsIsTheErrorAndTheDescriptorIsGone) {
  const size_t before = open_descriptors();
  std::unique_ptr<WritableFile> file = create("file");
  ASSERT_NE(file, nullptr);
  {
    const CallFault fault{.function = "close", .error = EIO};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    const Status closed = file->close();
    EXPECT_EQ(closed.code(), StatusCode::kIoError);
    EXPECT_THAT(closed.message(), AllOf(HasSubstr("close"), HasSubstr(dir_.file("file"))));
    EXPECT_EQ(armed.fired(), 1u);
  }
  EXPECT_EQ(open_descriptors(), before);
  EXPECT_TRUE(file->close().ok()) << "nothing left to close";
}

// Guards: a file created with the umask's mode instead of the one asked for, when fchmod fails;
// and a failed creation that leaves the file behind (its caller has nothing to remove).
TEST_F(PosixFileSystemCallFaultTest, AnFchmodThatFailsIsTheErrorOfTheCreation) {
  const size_t before = open_descriptors();
  const std::string path = dir_.file("file");
  const CallFault fault{.function = "fchmod", .error = EPERM};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<std::unique_ptr<WritableFile>> created = fs_.create_exclusive(path, 0600);
  EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), AllOf(HasSubstr("fchmod"), HasSubstr(path)));
  EXPECT_EQ(open_descriptors(), before);
  EXPECT_FALSE(std::filesystem::exists(path)) << "the failed creation left its file";
}

TEST_F(PosixFileSystemCallFaultTest, AChmodThatFailsIsTheErrorOfMakingTheDirectory) {
  const std::string path = dir_.file("sub");
  const CallFault fault{.function = "chmod", .error = EPERM};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Status made = fs_.make_directory(path, 0700);
  EXPECT_EQ(made.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(made.message(), AllOf(HasSubstr("chmod"), HasSubstr(path)));
  EXPECT_FALSE(std::filesystem::exists(path)) << "the failed creation left its directory";
}

// Guards: a directory sync that fails reported as durable (a rename that may not survive).
TEST_F(PosixFileSystemCallFaultTest, AnFsyncOfTheDirectoryThatFailsIsTheError) {
  const size_t before = open_descriptors();
  const CallFault fault{.function = "fsync", .error = EIO};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Status synced = fs_.sync_directory(dir_.path());
  EXPECT_EQ(synced.code(), StatusCode::kIoError);
  EXPECT_THAT(synced.message(), AllOf(HasSubstr("fsync directory"), HasSubstr(dir_.path())));
  EXPECT_EQ(open_descriptors(), before);
}

// Guards: a listing that fails half way returned as complete (the store's clean-up would miss
// files), and the directory's descriptor leaked on either failure.
TEST_F(PosixFileSystemCallFaultTest, AListingThatFailsIsTheErrorAndClosesTheDirectory) {
  make_file("a", "x");
  const size_t before = open_descriptors();
  const struct {
    CallFault fault;
    StatusCode code = StatusCode::kOk;
    const char* says = "";
  } cases[] = {
      {{.function = "fdopendir", .error = ENOMEM}, StatusCode::kOutOfMemory, "fdopendir"},
      {{.function = "readdir", .nth_call = 2, .error = EIO}, StatusCode::kIoError, "readdir"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    ScopedCallFault armed(c.fault);
    const Result<std::vector<std::string>> listed = fs_.list_directory(dir_.path());
    EXPECT_EQ(listed.status().code(), c.code);
    EXPECT_THAT(listed.status().message(), AllOf(HasSubstr(c.says), HasSubstr(dir_.path())));
    EXPECT_EQ(armed.fired(), 1u);
    EXPECT_EQ(open_descriptors(), before);
  }
}

// Guards: any flock failure taken for "held by another owner" (the store would take a
// broken lock for a live owner's), and the lock file's descriptor leaked.
TEST_F(PosixFileSystemCallFaultTest, AnFlockThatFailsOtherwiseIsNotALiveOwner) {
  const std::string path = dir_.file("lock");
  const size_t before = open_descriptors();
  const CallFault fault{.function = "flock", .error = ENOLCK};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<std::unique_ptr<FileLock>> locked = fs_.lock_file(path, /*wait=*/true);
  EXPECT_EQ(locked.status().code(), StatusCode::kIoError);
  EXPECT_THAT(locked.status().message(), AllOf(HasSubstr("flock"), HasSubstr(path)));
  EXPECT_THAT(locked.status().message(), ::testing::Not(HasSubstr("another owner")));
  EXPECT_EQ(open_descriptors(), before);
}

}  // namespace
}  // namespace siesta
