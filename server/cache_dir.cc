#include "server/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>

#include "core/log_text.h"
#include "core/os_error.h"

namespace siesta::server {
namespace {

constexpr mode_t kPrivateMode = 0700;

// "0755": permission bits as chmod takes them.
std::string octal(mode_t mode) {
  char digits[8];
  const auto end = std::to_chars(digits, digits + sizeof digits, mode & 07777, 8).ptr;
  std::string text(digits, end);
  return std::string(text.size() < 4 ? 4 - text.size() : 0, '0') + text;
}

// "dir/" would make lstat() and O_NOFOLLOW follow a symlink named "dir".
std::string without_trailing_slashes(const std::string& path) {
  const size_t last = path.find_last_not_of('/');
  if (last == std::string::npos) return path.empty() ? path : "/";
  return path.substr(0, last + 1);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Status prepare_cache_dir(const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  const std::string flag = "--cache-disk-dir " + quote_for_log(path);
  if (path.empty()) return InvalidArgument("--cache-disk-dir must not be empty");
  const std::string name = without_trailing_slashes(path);

  struct stat info {};
  bool made = false;
  if (::lstat(name.c_str(), &info) != 0) {
    if (errno != ENOENT) return status_from_errno(errno, flag);
    if (::mkdir(name.c_str(), kPrivateMode) != 0) {
      if (errno == ENOENT) return NotFound(flag + ": its parent directory does not exist");
      // EEXIST: another process made it meanwhile; it is judged below like any other.
      if (errno != EEXIST) return status_from_errno(errno, flag + ": cannot create it");
    } else {
      made = true;
    }
    if (::lstat(name.c_str(), &info) != 0) return status_from_errno(errno, flag);
  }
  if (S_ISLNK(info.st_mode)) {
    return FailedPrecondition(flag + " is a symlink; give the directory itself");
  }
  if (!S_ISDIR(info.st_mode)) return FailedPrecondition(flag + " is not a directory");

  // From here on the descriptor, not the name, is judged: a rename or a symlink swapped in
  // after lstat() cannot slip past (O_NOFOLLOW refuses a symlink, O_DIRECTORY anything else).
  Fd dir(::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) {
    if (errno == ELOOP) {
      return FailedPrecondition(flag + " is a symlink; give the directory itself");
    }
    if (errno == ENOTDIR) return FailedPrecondition(flag + " is not a directory");
    return status_from_errno(errno, flag);
  }
  if (made && ::fchmod(dir.get(), kPrivateMode) != 0) {
    // The umask may have taken owner bits away from mkdir's mode; we own it, so set it.
    return status_from_errno(errno, flag + ": cannot set mode 0700");
  }
  if (::fstat(dir.get(), &info) != 0) return status_from_errno(errno, flag);
  if (!S_ISDIR(info.st_mode)) return FailedPrecondition(flag + " is not a directory");
  const uid_t me = ::geteuid();
  if (info.st_uid != me) {
    return FailedPrecondition(flag + " is owned by uid " + std::to_string(info.st_uid) +
                              ", not by this user (uid " + std::to_string(me) + ")");
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return FailedPrecondition(flag + " is writable by group or others (mode " +
                              octal(info.st_mode) + "); chmod 700 it");
  }
  if ((info.st_mode & S_IRWXU) != S_IRWXU) {
    return FailedPrecondition(flag + " must be readable, writable and searchable by its owner" +
                              " (mode " + octal(info.st_mode) + ")");
  }
  if (created != nullptr) *created = made;
  return Status::Ok();
}

}  // namespace siesta::server
