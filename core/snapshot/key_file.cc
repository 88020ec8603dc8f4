// The key file (key_file.h): made under a temporary name and linked into place, read only
// after its descriptor has been judged.
#include "core/snapshot/key_file.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <span>
#include <utility>

#include "core/base/hex.h"
#include "core/base/log_text.h"
#include "core/base/os_error.h"
#include "core/base/unique_fd.h"

namespace siesta {
namespace {

// Names here carry a key_file_ prefix: unity builds put this file in one batch with others.
constexpr mode_t kKeyFileMode = 0600;
constexpr size_t kKeyFileBytes = sizeof(ProcessKey::KeyBytes);

// Retries a system call interrupted by a signal.
template <class Call>
auto key_file_retry(Call call) {
  decltype(call()) result;
  do {
    result = call();
  } while (result < 0 && errno == EINTR);
  return result;
}

// Wipes key bytes when they leave scope, on every return path.
class KeyFileWipe {
 public:
  explicit KeyFileWipe(std::span<uint8_t> bytes) : bytes_(bytes) {}
  KeyFileWipe(const KeyFileWipe&) = delete;
  KeyFileWipe& operator=(const KeyFileWipe&) = delete;
  ~KeyFileWipe() { OPENSSL_cleanse(bytes_.data(), bytes_.size()); }

 private:
  std::span<uint8_t> bytes_;
};

// "0644": permission bits as chmod takes them.
std::string key_file_octal(mode_t mode) {
  char digits[8];
  const auto end = std::to_chars(digits, digits + sizeof digits, mode & 07777, 8).ptr;
  std::string text(digits, end);
  return std::string(text.size() < 4 ? 4 - text.size() : 0, '0') + text;
}

// What a non-regular file is, for messages.
const char* key_file_kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// The directory holding `path` ("." for a bare name), whose sync makes the new name durable.
std::string key_file_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The rule's judgement of the opened file (key_file.h).
Status key_file_judge(const struct stat& st, const std::string& what) {
  if (!S_ISREG(st.st_mode)) {
    return FailedPrecondition(what + " is " + key_file_kind_of(st.st_mode) +
                              ", not a regular file; give the path of a key file");
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return FailedPrecondition(what + " is owned by uid " + std::to_string(st.st_uid) +
                              ", not by this user (uid " + std::to_string(me) +
                              "); use a key file of this user's own");
  }
  if ((st.st_mode & 077) != 0) {
    return FailedPrecondition(what + " is open to group or others (mode " +
                              key_file_octal(st.st_mode) + "); chmod 600 it");
  }
  if (st.st_size != static_cast<off_t>(kKeyFileBytes)) {
    return Corrupt(what + " holds " + std::to_string(st.st_size) + " bytes, not the " +
                   std::to_string(kKeyFileBytes) +
                   " of a key; remove it to make a new key (snapshots sealed under the old one"
                   " are then dropped) or give the right file");
  }
  return Status::Ok();
}

// Reads the existing key file into `key`. NotFound only when `path` does not exist.
Status key_file_read(const std::string& path, const std::string& what, ProcessKey::KeyBytes& key) {
  // O_NONBLOCK: a FIFO under the name must not block open() until a writer comes; it is
  // refused below, and a regular file's reads ignore the flag.
  const int fd = key_file_retry([&] {
    return ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  });
  if (fd < 0) {
    if (errno == ELOOP) return FailedPrecondition(what + " is a symlink; give the file itself");
    if (errno == ENOENT) return NotFound(what + " does not exist");
    return status_from_errno(errno, "open " + what);
  }
  const UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return status_from_errno(errno, "fstat " + what);
  SIESTA_RETURN_IF_ERROR(key_file_judge(st, what));
  // One byte more than a key: a file that grew after the fstat is caught, not cut short.
  std::array<uint8_t, kKeyFileBytes + 1> buffer{};
  const KeyFileWipe wipe(buffer);
  size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t n = key_file_retry([&] {
      return ::pread(fd, buffer.data() + done, buffer.size() - done, static_cast<off_t>(done));
    });
    if (n < 0) return status_from_errno(errno, "read " + what);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done != kKeyFileBytes) {
    return Corrupt(what + " changed size while it was read; make sure nothing else writes it");
  }
  std::memcpy(key.data(), buffer.data(), kKeyFileBytes);
  return Status::Ok();
}

// Writes `key` to the new file `fd` (named `temp_name` in messages), mode 0600, and syncs it.
Status key_file_write(int fd, const std::string& temp_name, const ProcessKey::KeyBytes& key) {
  // The umask may have cleared bits of the mode asked for; the owner must read the file back.
  if (::fchmod(fd, kKeyFileMode) != 0) return status_from_errno(errno, "fchmod " + temp_name);
  size_t done = 0;
  while (done < key.size()) {
    const ssize_t n =
        key_file_retry([&] { return ::write(fd, key.data() + done, key.size() - done); });
    if (n < 0) return status_from_errno(errno, "write " + temp_name);
    if (n == 0) return IoError("write " + temp_name + ": wrote nothing");
    done += static_cast<size_t>(n);
  }
  if (key_file_retry([&] { return ::fsync(fd); }) != 0) {
    return status_from_errno(errno, "fsync " + temp_name);
  }
  return Status::Ok();
}

Status key_file_sync_directory(const std::string& directory) {
  const int fd = key_file_retry(
      [&] { return ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK); });
  if (fd < 0) return status_from_errno(errno, "open directory " + quote_for_log(directory));
  const UniqueFd owned(fd);
  if (key_file_retry([&] { return ::fsync(fd); }) != 0) {
    return status_from_errno(errno, "fsync directory " + quote_for_log(directory));
  }
  return Status::Ok();
}

// Makes the key file with a fresh key in `key`. Success: true when this call made it, false
// when another process linked its own first (`key` is then wiped; the caller reads theirs).
// Every failure before the link leaves nothing behind.
Result<bool> key_file_create(const std::string& path, const std::string& what,
                             ProcessKey::KeyBytes& key) {
  std::array<uint8_t, 8> suffix{};
  SIESTA_RETURN_IF_ERROR(random_bytes(suffix));
  SIESTA_RETURN_IF_ERROR(random_bytes(key));
  const std::string directory = key_file_directory(path);
  const std::string temp = path + ".tmp-" + to_hex(suffix);
  const std::string temp_name = quote_for_log(temp);
  const int fd = key_file_retry([&] {
    return ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kKeyFileMode);
  });
  if (fd < 0) {
    if (errno == ENOENT) {
      return NotFound(what + " cannot be made: its directory " + quote_for_log(directory) +
                      " does not exist; create it (mode 700) or give another path");
    }
    return status_from_errno(errno, "create " + what + " (as " + temp_name + ")");
  }
  UniqueFd owned(fd);
  Status made = key_file_write(fd, temp_name, key);
  if (made.ok() && owned.reset() != 0) made = status_from_errno(errno, "close " + temp_name);
  bool lost = false;
  if (made.ok() && ::link(temp.c_str(), path.c_str()) != 0) {
    lost = errno == EEXIST;
    if (!lost) made = status_from_errno(errno, "link " + what);
  }
  // The temporary name goes whatever happened: on success `path` names the file now.
  (void)::unlink(temp.c_str());
  if (!made.ok()) return made.with_context("cannot make " + what);
  if (lost) {
    OPENSSL_cleanse(key.data(), key.size());
    return false;
  }
  // One sync makes both the new name and the removal of the temporary one durable.
  const Status synced = key_file_sync_directory(directory);
  if (!synced.ok()) return synced.with_context(what + " was made but may not survive a crash");
  return true;
}

}  // namespace

Result<LoadedKey> load_or_create_key_file(const std::string& path) {
  if (path.empty()) return InvalidArgument("key file path must not be empty");
  const std::string what = "key file " + quote_for_log(path);
  if (path.back() == '/') return InvalidArgument(what + " ends in '/'; give the path of a file");
  ProcessKey::KeyBytes bytes{};
  const KeyFileWipe wipe(bytes);
  bool created = false;
  Status read = key_file_read(path, what, bytes);
  if (read.code() == StatusCode::kNotFound) {
    SIESTA_ASSIGN_OR_RETURN(created, key_file_create(path, what, bytes));
    // Lost the race: the file another process linked is judged like any other.
    read = created ? Status::Ok() : key_file_read(path, what, bytes);
  }
  SIESTA_RETURN_IF_ERROR(read);
  SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::with_key(bytes));
  return LoadedKey{std::move(key), created};
}

}  // namespace siesta
