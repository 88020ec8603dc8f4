// The snapshot key file: the AES-256 key that snapshots are sealed under, kept in a file so
// that a server restarted with the same file can open the snapshots of the one before it.
//
// The file holds exactly 32 raw bytes, nothing else. Whoever can read it can read every
// snapshot sealed under it, and whoever can replace it can make this user's server accept
// files of their making, so the rule is strict:
//   - missing: it is made with 32 bytes from RAND_bytes, mode 0600 (whatever the umask),
//     synced with its directory. It is written under a temporary name in the same directory
//     and link()ed to `path`: link() never replaces a name, so the file appears whole or not
//     at all, and of several processes making it at once one wins and the others read its key;
//   - present: refused when it is a symlink (even to a good key file), not a regular file,
//     owned by another user than geteuid(), open to group or others (mode & 077), or not 32
//     bytes long. The judgement is made on the opened descriptor (O_NOFOLLOW, then fstat), so
//     a file swapped in after a first look is judged too. A refused file is left as it is.
// The key's bytes never appear in a message, and the copies made here are wiped
// (OPENSSL_cleanse).
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/snapshot/chunk_sealer.h"

namespace siesta {

// What load_or_create_key_file gives: the file's key with this process's own nonce.
struct LoadedKey {
  ProcessKey key;
  bool created = false;  // this call made the file (the server logs "created key file")
};

// Reads the key file at `path`, making it first when it does not exist, and returns its key
// as a ProcessKey (ProcessKey::with_key: the nonce is fresh on every call, so two processes
// sharing the file still name their snapshot files apart).
// Success: the key the file holds, the same for every call on the same file, whichever
// process made it.
// Failure, one line naming the key file (quote_for_log), what is wrong and what to do:
//   InvalidArgument     `path` is empty or ends in '/';
//   FailedPrecondition  a symlink, not a regular file, another user's, open to group or
//                       others, or not accessible to this user;
//   Corrupt             not 32 bytes long (or changed while it was read);
//   NotFound            its directory does not exist;
//   Internal            the random generator failed;
//   other codes         the file system refused (creating, writing, syncing, linking).
// A failure after the file was linked (the directory's sync, the nonce) leaves the file in
// place: a later call reads it.
// Thread rule: any thread; concurrent calls on one path, from threads or processes, all give
// the same key (exactly one of them reports `created`).
Result<LoadedKey> load_or_create_key_file(const std::string& path);

}  // namespace siesta
