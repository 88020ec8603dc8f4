// The snapshot directory (--cache-disk-dir): created private, or refused when it is not
// safe to write a session's memory into.
#pragma once

#include <string>

#include "core/base/status.h"

namespace siesta::server {

// Makes sure `path` is a private directory of this user, creating it (the last component
// only; the parent must exist) with mode 0700 when missing.
// Success: `path` is a directory, not a symlink, owned by the effective user, with owner
// read/write/search and no group/other write permission. *created (when not null) says
// whether this call made it.
// Failure (an existing directory is left as it was): PrivateDirectory::open()'s status with
// the flag as context ("--cache-disk-dir: snapshot directory "/x" is writable by group or
// others (mode 0770); chmod 700 it"):
//   InvalidArgument     the path is empty;
//   FailedPrecondition  it is a symlink, not a directory, another user's, writable by group
//                       or others, not usable by its owner or not accessible to this user;
//   NotFound            the parent does not exist;
//   other codes         the OS refused (status_from_errno).
// Thread rule: any thread; the file system is shared with every other process, so the
// checks end on an opened descriptor of the directory, not on the name.
// The rule lives in one place, core/base/private_directory.h; this adds the flag's name.
Status prepare_cache_dir(const std::string& path, bool* created);

// The directory's budget when --cache-disk-max-mib is not given: half of the free space of
// `path`'s filesystem now (core/offload/disk_budget.h's default_disk_budget_bytes).
// Failure: the OS's, when the free space cannot be read.
Result<uint64_t> default_cache_dir_budget(const std::string& path);

}  // namespace siesta::server
