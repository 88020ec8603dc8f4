// SnapshotStore: owns the snapshot directory and the life of every file in it: makes sure the
// directory is private (PrivateDirectory), names this process's files and their temporaries,
// holds the lock that says this process is alive, retires a used snapshot (renamed to a
// temporary name at once, removed later), removes what dead processes and time left behind
// (reading an expiry itself, through the format module), and removes this process's files at
// a normal shutdown. It writes and reads no snapshot contents (the writer and reader do).
//
// Naming, in one flat directory:
//   siesta-<nonce>.lock                 the owner lock, flock'ed for the store's life
//   siesta-<nonce>-<session>.snap       a session's snapshot (segment 0: a whole one)
//   siesta-<nonce>-<session>.<k>.snap   segment k of it, k in 1..kMaxSnapshotSegment without
//                                       leading zeros: a delta restored over segments 0..k-1
//   <either>.tmp-*                      a snapshot being written (renamed when complete), or a
//                                       retired one waiting for its removal
// <nonce> is 32 lower-case hex digits: the process key's nonce (ProcessKey::nonce(), the one
// SnapshotWriter puts in every header), passed as Options::nonce = nonce_hex(key.nonce()),
// so that a file's name and its header name the same process. <session> matches
// [A-Za-z0-9_-]{1,64}. Files not matching these patterns are never touched.
//
// Thread rule: open(), the adoption calls (adoption_candidates(), adopt(), finish_adoption())
// and the destructor run on one thread, the adoption calls before any other use; the other
// methods may be called from any thread (the store keeps no mutable state after adoption).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/base/status.h"
#include "core/snapshot/snapshot_format.h"

namespace siesta {

class SnapshotStore {
 public:
  struct Options {
    // Reads the expiry (Unix seconds) of the snapshot at `path`. Unset: read_snapshot_expiry
    // (core/snapshot/snapshot_reader.h) over the store's FileSystem, which is what every
    // real store uses; tests replace it. A snapshot is expired when its expiry <=
    // clock.unix_seconds() (at, not after, its deadline). A snapshot whose expiry cannot be
    // read (damaged, half-written, unreadable, not a regular file) is removed only when its
    // owner is dead: a live owner may be writing it right now.
    std::function<Result<int64_t>(const std::string& path)> read_expiry;
    // The destructor leaves this process's files (a test, or a caller that already removed
    // them); by default it calls remove_own_files().
    bool keep_files_on_close = false;
    // The user the directory must belong to; unset: the effective user (geteuid()).
    std::optional<uint32_t> owner_uid;
    // This process's nonce, 32 lower-case hex digits: nonce_hex(process_key.nonce()). Every
    // store whose files a SnapshotWriter writes sets it, so that names and headers agree.
    // Unset: 16 fresh bytes from RAND_bytes, only for a store used without snapshot files of
    // its own (tests of the store alone); its names then match no header.
    std::optional<std::string> nonce;
    // Conversations kept across a restart: the snapshots of a dead owner (its lock free) are
    // not removed at start but offered (adoption_candidates()), under that owner's lock, until
    // finish_adoption(); only its temporaries go at once. Expired ones of live owners go as
    // always. Off: a dead owner's files are removed at start.
    bool keep_dead_owners_snapshots = false;
  };

  // A dead owner's snapshot offered for adoption: its segments 0..k, none missing.
  struct AdoptionCandidate {
    std::string owner_nonce;                 // the writer's nonce, 32 hex digits
    std::string session;                     // its name in the writer's store
    std::vector<std::string> segment_paths;  // segment 0 (whole) first
  };

  // What start-up cleanup did. Failures do not stop open(): a file that could not be
  // removed now is tried again at the next start.
  struct CleanupReport {
    uint64_t removed_dead_owner_files = 0;  // snapshots, temporaries and locks
    uint64_t removed_expired_files = 0;
    uint64_t failures = 0;
    std::vector<std::string> failure_messages;  // one line each (Status::to_string())
  };

  // Makes `dir` a private directory (PrivateDirectory, noun "snapshot directory": created
  // 0700 when missing; refused when it is a symlink, not a directory, another user's,
  // writable by group or others, not usable or accessible), then takes the owner lock and
  // cleans up (see CleanupReport).
  // Failure: PrivateDirectory::open()'s errors; FailedPrecondition if the nonce option is
  // malformed or its lock is held by someone else; the file system's error if the lock
  // cannot be taken or the directory cannot be listed.
  // `fs` and `clock` must outlive the store.
  static Result<std::unique_ptr<SnapshotStore>> open(FileSystem& fs, const Clock& clock,
                                                     std::string dir, Options options);

  // Unless keep_files_on_close: remove_own_files(), then the lock file (removed while still
  // held), errors ignored (nothing sensible to do with them at this point). Releases the lock.
  // With keep_files_on_close the lock file stays too, as a crashed process leaves it.
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  const std::string& directory() const { return dir_; }
  const std::string& nonce() const { return nonce_; }
  const CleanupReport& startup_cleanup() const { return cleanup_; }

  // ---- Adoption (Options::keep_dead_owners_snapshots; open()'s thread, before any save) ----
  // The snapshots offered, in no particular order. The caller authenticates each (its header
  // under the key: SnapshotReader::read_header with the owner's nonce) and adopts or leaves it.
  const std::vector<AdoptionCandidate>& adoption_candidates() const { return candidates_; }
  // Renames the candidate's segments to `session`'s names in this store (newest first), then
  // syncs the directory; the candidate is no longer offered either way.
  // Failure: InvalidArgument (not offered, a bad session name); FailedPrecondition when
  // `session` has a file here already (nothing renamed); a rename's error (what was renamed is
  // removed: a chain without its base restores nothing); the directory sync's error (renamed).
  Status adopt(const AdoptionCandidate& candidate, std::string_view session);
  // Removes every dead owner's snapshot not adopted and its lock file, then releases the
  // locks. Failure: the first removal's error (every file is tried; the rest wait for the
  // next start).
  Status finish_adoption();

  // The highest segment number a session's snapshot may have (the Offloader's delta saves
  // stay far below it).
  static constexpr uint32_t kMaxSnapshotSegment = 255;

  // "<dir>/siesta-<nonce>-<session>.snap" for segment 0, "<dir>/siesta-<nonce>-<session>.<k>.snap"
  // for segment k. Failure: InvalidArgument unless session matches [A-Za-z0-9_-]{1,64} (so no
  // '/', no "..", no empty name) and segment <= kMaxSnapshotSegment.
  Result<std::string> snapshot_path(std::string_view session, uint32_t segment = 0) const;
  // A fresh temporary name for that segment: "<snapshot_path>.tmp-<counter>". Same failures
  // as snapshot_path().
  Result<std::string> temp_path(std::string_view session, uint32_t segment = 0) const;

  // Retires the session's snapshot once it no longer describes the session (restored, or
  // refused): renames it to a fresh temporary name, which frees the snapshot's name at once
  // (cheap, unlike unlinking a large cached file), and returns that name for
  // remove_retired(), to be called when the time is free (or never: shutdown and the next
  // start remove temporaries too).
  // Failure, nothing renamed: InvalidArgument for a bad session name; NotFound when there is
  // no snapshot; FailedPrecondition when the name holds anything but a regular file (a
  // directory, FIFO or symlink someone planted): it is not carried along under a temporary
  // name, and remove() takes it where it is; the rename's error.
  Result<std::string> retire(std::string_view session, uint32_t segment = 0);

  // Removes a file that retire() returned. No directory sync: the name was already gone from
  // the snapshot's place. Failure: InvalidArgument for a path that is not one of this
  // store's temporaries; NotFound when it is gone already; the file system's error.
  Status remove_retired(const std::string& retired);

  // Removes the session's snapshot, every segment of it and their temporaries (an empty
  // directory planted under one of their names included); then syncs the directory. Success
  // also when nothing existed. Failure: the first file system error (the other files are
  // still tried).
  Status remove(std::string_view session);
  // The same for one segment and its temporaries alone (a delta that must not stay).
  Status remove_segment(std::string_view session, uint32_t segment);
  // The same for every segment but 0 (the deltas a new whole snapshot replaced).
  Status remove_deltas(std::string_view session);

  // Removes every snapshot and temporary file of this process (not the lock: the store still
  // owns the directory), then syncs the directory. Failure: the first error; all files are
  // tried.
  Status remove_own_files();

  // Total size in bytes of this process's snapshot files (temporaries included).
  // Failure: the directory cannot be listed.
  Result<uint64_t> disk_bytes() const;

  // True when `session` is a valid session name.
  static bool valid_session_name(std::string_view session);

  // The 32 lower-case hex digits of a process nonce, for Options::nonce.
  static std::string nonce_hex(const snapshot::ProcessNonce& nonce);

 private:
  SnapshotStore(FileSystem& fs, const Clock& clock, std::string dir, std::string nonce,
                Options options);

  void cleanup_at_start();
  Result<int64_t> read_expiry(const std::string& path) const;
  // Names in the directory that belong to this process's snapshots (not its lock).
  Result<std::vector<std::string>> own_file_names() const;
  // "siesta-<nonce>-<session>", the start of every name of the session's files.
  // Failure: InvalidArgument for a bad session name.
  Result<std::string> session_stem(std::string_view session) const;
  // Removes this process's files whose names `selected` accepts (every one is tried), then
  // syncs the directory if any went. Failure: the first error.
  Status remove_own_files_where(const std::function<bool(const std::string& name)>& selected);
  std::string path_of(const std::string& name) const { return dir_ + "/" + name; }

  FileSystem& fs_;
  const Clock& clock_;
  const std::string dir_;
  const std::string nonce_;
  const Options options_;
  bool keep_files_;  // set also when open() failed before the lock was held
  std::string lock_path_;
  std::unique_ptr<FileLock> lock_;
  CleanupReport cleanup_;
  mutable std::atomic<uint64_t> next_temp_{0};
  // Dead owners whose snapshots are offered, each under its lock until finish_adoption().
  struct DeadOwner {
    std::unique_ptr<FileLock> lock;
    std::string lock_path;
    std::vector<std::string> files;  // its snapshots' paths, adopted ones included
  };
  std::vector<DeadOwner> dead_owners_;
  std::vector<AdoptionCandidate> candidates_;
};

}  // namespace siesta
