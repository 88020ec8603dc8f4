#include "core/base/private_directory.h"

#include <unistd.h>

#include <charconv>
#include <utility>

#include "core/base/log_text.h"

namespace siesta {
namespace {

constexpr uint32_t kPrivateMode = 0700;

// "0755": permission bits as chmod takes them.
std::string octal(uint32_t mode) {
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

// The rule's judgement of what a look at the directory saw (the name's lstat, or the opened
// descriptor's fstat): the same checks, so the first look gives the same message the final
// one would.
Status judge(const PathInfo& info, const std::string& what, uint32_t me) {
  if (info.type == PathInfo::Type::kSymlink) {
    return FailedPrecondition(what + " is a symlink; give the directory itself");
  }
  if (info.type != PathInfo::Type::kDirectory) {
    return FailedPrecondition(what + " is not a directory");
  }
  if (info.owner_uid != me) {
    return FailedPrecondition(what + " is owned by uid " + std::to_string(info.owner_uid) +
                              ", not by this user (uid " + std::to_string(me) + ")");
  }
  if ((info.mode & 022) != 0) {
    return FailedPrecondition(what + " is writable by group or others (mode " + octal(info.mode) +
                              "); chmod 700 it");
  }
  if ((info.mode & 0700) != 0700) {
    return FailedPrecondition(what + " must be readable, writable and searchable by its owner" +
                              " (mode " + octal(info.mode) + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<PrivateDirectory> PrivateDirectory::open(FileSystem& fs, const std::string& path,
                                                const Options& options) {
  if (path.empty()) return InvalidArgument(options.noun + " must not be empty");
  const std::string what = options.noun + " " + quote_for_log(path);
  const std::string name = without_trailing_slashes(path);
  const uint32_t me = options.owner_uid.value_or(static_cast<uint32_t>(::geteuid()));

  bool made = false;
  Result<PathInfo> info = fs.stat_no_follow(name);
  if (!info.ok()) {
    if (info.status().code() != StatusCode::kNotFound) return info.status().with_context(what);
    Status mkdir = fs.make_directory(name, kPrivateMode);
    if (mkdir.code() == StatusCode::kNotFound) {
      return NotFound(what + ": its parent directory does not exist");
    }
    made = mkdir.ok();
    // FailedPrecondition may be EEXIST: another process made it meanwhile; it is judged below
    // like any other. Anything else (or a refusal to create) shows in the second look.
    if (!made && mkdir.code() != StatusCode::kFailedPrecondition) {
      return mkdir.with_context(what + ": cannot create it");
    }
    info = fs.stat_no_follow(name);
    if (!info.ok()) {
      return (made ? info.status() : mkdir).with_context(what + ": cannot create it");
    }
  }
  // Only the type, on the name: ownership and mode are judged on the opened directory below,
  // once, so that the message says what the descriptor saw.
  if (info->type != PathInfo::Type::kDirectory) return judge(*info, what, me);

  // From here on the opened directory, not the name, is judged: a rename or a symlink swapped
  // in after the first look cannot slip past.
  const PathInfo named = *info;
  info = fs.stat_directory(name);
  if (!info.ok()) {
    if (info.status().code() != StatusCode::kFailedPrecondition) {
      return info.status().with_context(what);
    }
    // Refused to open: either the name is no longer a directory (swapped), or it still is one
    // this user may not open (another user's 0700 directory): say which.
    Result<PathInfo> again = fs.stat_no_follow(name);
    if (again.ok() && again->type == PathInfo::Type::kDirectory) {
      return FailedPrecondition(what + " is not accessible to this user (uid " +
                                std::to_string(me) + "; it is owned by uid " +
                                std::to_string(named.owner_uid) + ", mode " + octal(named.mode) +
                                "): " + info.status().message());
    }
    return FailedPrecondition(what + " changed while it was checked: " + info.status().message());
  }
  SIESTA_RETURN_IF_ERROR(judge(*info, what, me));
  return PrivateDirectory(name, made);
}

std::string PrivateDirectory::file(std::string_view name) const {
  return (path_ == "/" ? path_ : path_ + "/") + std::string(name);
}

}  // namespace siesta
