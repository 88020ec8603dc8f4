// PrivateDirectory: the one rule for a directory that session memory is written into (the
// snapshot store's, the exporter's; the server's --cache-disk-dir and --slot-save-path are
// these): it must belong to this user alone, because whoever can write to it can replace the
// files a restore trusts.
//
// The rule, as open() applies it:
//   - missing: the last component is created with mode 0700 (whatever the umask); the parent
//     must exist;
//   - refused when the path is a symlink (even to a good directory), not a directory, owned
//     by another user, writable by group or others, or not readable, writable and searchable
//     by its owner; and when this user cannot open it at all (another user's 0700 directory);
//   - the final judgement is made on the opened directory (FileSystem::stat_directory:
//     O_DIRECTORY|O_NOFOLLOW, then fstat), not on its name, so a symlink or another directory
//     swapped in between the first look and the check is refused too.
// An existing directory is never changed (a refused one is left exactly as it was).
//
// Messages are core's own words, naming the directory by its noun and its path:
//   snapshot directory "/var/cache/x" is writable by group or others (mode 0770); chmod 700 it
// A caller that knows where the path came from (a command-line flag) adds that as context.
//
// Thread rule: a value; open() may be called from any thread. The file system is shared with
// every other process, which is why the checks end on a descriptor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/base/file_system.h"
#include "core/base/status.h"

namespace siesta {

class PrivateDirectory {
 public:
  struct Options {
    // The user the directory must belong to; unset: the effective user (geteuid()).
    std::optional<uint32_t> owner_uid;
    // How messages name the directory ("snapshot directory", "export directory").
    std::string noun = "directory";
  };

  // Makes sure `path` is a private directory under the rule above.
  // Success: the directory, its path without trailing slashes; created() says whether this
  // call made it.
  // Failure, the message naming the noun, the path (quote_for_log) and what is wrong:
  //   InvalidArgument     `path` is empty;
  //   FailedPrecondition  a symlink, not a directory, another user's, writable by group or
  //                       others, not usable by its owner, not accessible to this user, or
  //                       changed while it was checked;
  //   NotFound            the parent does not exist;
  //   other codes         the file system refused (creating it, looking at it).
  static Result<PrivateDirectory> open(FileSystem& fs, const std::string& path,
                                       const Options& options);

  // Without trailing slashes ("/" stays "/").
  const std::string& path() const { return path_; }
  bool created() const { return created_; }

  // "<path>/<name>" ("/<name>" for the root). REQUIRES: `name` is one path component (the
  // caller has validated it: no '/', not "." or "..").
  std::string file(std::string_view name) const;

 private:
  PrivateDirectory(std::string path, bool created) : path_(std::move(path)), created_(created) {}

  std::string path_;
  bool created_ = false;
};

}  // namespace siesta
