// The snapshot directory (--cache-disk-dir): created private, or refused when it is not
// safe to write a session's memory into (DESIGN.md, "Snapshot files").
#pragma once

#include <string>

#include "core/base/status.h"

namespace siesta::server {

// Makes sure `path` is a private directory of this user, creating it (the last component
// only; the parent must exist) with mode 0700 when missing.
// Success: `path` is a directory, not a symlink, owned by the effective user, with owner
// read/write/search and no group/other write permission. *created (when not null) says
// whether this call made it.
// Failure (an existing directory is left as it was), with a message naming the flag, the
// path and the rule:
//   FailedPrecondition  it is a symlink, not a directory, another user's, writable by group
//                       or others, or not usable by its owner;
//   NotFound            the parent does not exist;
//   other codes         the OS refused (status_from_errno).
// Thread rule: any thread; the file system is shared with every other process, so the
// checks are made on an opened descriptor of the directory, not on the name.
// This is SnapshotStore::prepare_directory() (core/snapshot/snapshot_store.h) on the POSIX file
// system, with messages naming the flag: the rule lives in one place.
Status prepare_cache_dir(const std::string& path, bool* created);

}  // namespace siesta::server
