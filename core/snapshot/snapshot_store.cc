#include "core/snapshot/snapshot_store.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "core/base/hex.h"
#include "core/base/log_text.h"
#include "core/base/private_directory.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {
namespace {

constexpr std::string_view kPrefix = "siesta-";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kSnapSuffix = ".snap";
// A temporary's name: the snapshot's, then the writer's temporary suffix.
constexpr std::string_view kTempMarker = ".snap.tmp-";
static_assert(kTempMarker.substr(0, kSnapSuffix.size()) == kSnapSuffix &&
              kTempMarker.substr(kSnapSuffix.size()) == kTemporarySuffix);
constexpr size_t kNonceHexDigits = 32;
constexpr size_t kMaxSessionName = 64;
constexpr size_t kMaxSegmentDigits = 3;  // kMaxSnapshotSegment has three digits
static_assert(SnapshotStore::kMaxSnapshotSegment < 1000);

// "<session>" or "<session>.<segment>" with segment in 1..kMaxSnapshotSegment, written
// without leading zeros (so every file has one name).
bool valid_stem(std::string_view stem) {
  const size_t dot = stem.find('.');
  if (dot == std::string_view::npos) return SnapshotStore::valid_session_name(stem);
  const std::string_view digits = stem.substr(dot + 1);
  if (digits.empty() || digits.size() > kMaxSegmentDigits || digits[0] == '0') return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return SnapshotStore::valid_session_name(stem.substr(0, dot));
}

bool is_nonce(std::string_view text) {
  if (text.size() != kNonceHexDigits) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A directory entry that follows the store's naming; anything else is not ours to touch.
struct ParsedName {
  enum class Kind { kLock, kSnapshot, kTemporary } kind;
  std::string nonce;
  std::string session;   // empty for a lock
  uint32_t segment = 0;  // a snapshot's or temporary's segment number
};

std::optional<ParsedName> parse_name(std::string_view name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  if (name.size() < kNonceHexDigits || !is_nonce(name.substr(0, kNonceHexDigits))) {
    return std::nullopt;
  }
  std::string nonce(name.substr(0, kNonceHexDigits));
  name.remove_prefix(kNonceHexDigits);
  if (name == kLockSuffix) return ParsedName{ParsedName::Kind::kLock, std::move(nonce), {}};
  if (!name.starts_with('-')) return std::nullopt;
  name.remove_prefix(1);
  ParsedName::Kind kind = ParsedName::Kind::kSnapshot;
  std::string_view stem;
  if (const size_t temp = name.find(kTempMarker); temp != std::string_view::npos) {
    kind = ParsedName::Kind::kTemporary;
    stem = name.substr(0, temp);
  } else if (name.ends_with(kSnapSuffix)) {
    stem = name.substr(0, name.size() - kSnapSuffix.size());
  } else {
    return std::nullopt;
  }
  if (!valid_stem(stem)) return std::nullopt;
  const size_t dot = stem.find('.');
  uint32_t segment = 0;
  if (dot != std::string_view::npos) {
    for (const char c : stem.substr(dot + 1))
      segment = segment * 10 + static_cast<uint32_t>(c - '0');
  }
  return ParsedName{kind, std::move(nonce), std::string(stem.substr(0, dot)), segment};
}

Result<std::string> random_nonce() {
  std::array<unsigned char, kNonceHexDigits / 2> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return Internal("RAND_bytes could not make a process nonce");
  }
  snapshot::ProcessNonce nonce{};
  static_assert(sizeof(nonce) == sizeof(bytes));
  std::copy(bytes.begin(), bytes.end(), nonce.begin());
  return SnapshotStore::nonce_hex(nonce);
}

void record_failure(SnapshotStore::CleanupReport& report, const Status& status) {
  ++report.failures;
  report.failure_messages.push_back(status.to_string());
}

}  // namespace

std::string SnapshotStore::nonce_hex(const snapshot::ProcessNonce& nonce) { return to_hex(nonce); }

bool SnapshotStore::valid_session_name(std::string_view session) {
  if (session.empty() || session.size() > kMaxSessionName) return false;
  for (char c : session) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::open(FileSystem& fs, const Clock& clock,
                                                           std::string dir, Options options) {
  SIESTA_ASSIGN_OR_RETURN(
      const PrivateDirectory directory,
      PrivateDirectory::open(fs, dir, {options.owner_uid, "snapshot directory"}));
  dir = directory.path();
  std::string nonce;
  if (options.nonce) {
    if (!is_nonce(*options.nonce)) {
      return FailedPrecondition("snapshot store nonce " + quote_for_log(*options.nonce) +
                                " is not 32 lower-case hex digits");
    }
    nonce = *options.nonce;
  } else {
    SIESTA_ASSIGN_OR_RETURN(nonce, random_nonce());
  }
  std::unique_ptr<SnapshotStore> store(
      new SnapshotStore(fs, clock, std::move(dir), std::move(nonce), std::move(options)));
  const std::string lock_path =
      store->path_of(std::string(kPrefix) + store->nonce_ + std::string(kLockSuffix));
  Result<std::unique_ptr<FileLock>> lock = fs.lock_file(lock_path, /*wait=*/false);
  if (!lock.ok()) {
    // Without the lock the destructor must not remove files that may be another owner's.
    store->keep_files_ = true;
    return lock.status().with_context("snapshot store owner lock " + quote_for_log(lock_path));
  }
  store->lock_ = std::move(lock).value();
  store->lock_path_ = lock_path;
  store->cleanup_at_start();
  return store;
}

SnapshotStore::SnapshotStore(FileSystem& fs, const Clock& clock, std::string dir, std::string nonce,
                             Options options)
    : fs_(fs),
      clock_(clock),
      dir_(std::move(dir)),
      nonce_(std::move(nonce)),
      options_(std::move(options)),
      keep_files_(options_.keep_files_on_close) {}

SnapshotStore::~SnapshotStore() {
  if (keep_files_ || lock_ == nullptr) return;
  remove_own_files().ignore();
  // The lock file goes while still held, so nobody can take it for a live owner meanwhile.
  fs_.remove(lock_path_).ignore();
  fs_.sync_directory(dir_).ignore();
  lock_.reset();
}

Result<std::string> SnapshotStore::session_stem(std::string_view session) const {
  if (!valid_session_name(session)) {
    return InvalidArgument("session name " + quote_for_log(session) +
                           " must be 1 to 64 characters from [A-Za-z0-9_-]");
  }
  return std::string(kPrefix) + nonce_ + "-" + std::string(session);
}

Result<std::string> SnapshotStore::snapshot_path(std::string_view session, uint32_t segment) const {
  SIESTA_ASSIGN_OR_RETURN(std::string stem, session_stem(session));
  if (segment > kMaxSnapshotSegment) {
    return InvalidArgument("snapshot segment " + std::to_string(segment) + " exceeds " +
                           std::to_string(kMaxSnapshotSegment));
  }
  // Appended piece by piece: `"." + std::to_string(segment)` makes g++ 12 at -O2 warn
  // (-Wrestrict, a false positive inside std::string's insert).
  if (segment > 0) stem.append(".").append(std::to_string(segment));
  stem.append(kSnapSuffix);
  return path_of(stem);
}

Result<std::string> SnapshotStore::temp_path(std::string_view session, uint32_t segment) const {
  SIESTA_ASSIGN_OR_RETURN(std::string path, snapshot_path(session, segment));
  return path + std::string(kTemporarySuffix) + std::to_string(next_temp_.fetch_add(1));
}

Result<std::string> SnapshotStore::retire(std::string_view session, uint32_t segment) {
  SIESTA_ASSIGN_OR_RETURN(const std::string path, snapshot_path(session, segment));
  SIESTA_ASSIGN_OR_RETURN(const PathInfo info, fs_.stat_no_follow(path));
  if (info.type != PathInfo::Type::kRegular) {
    // Renamed away it would only live on under a temporary name: a directory survives the
    // unlink that removes a retired file.
    return FailedPrecondition("snapshot " + quote_for_log(path) +
                              " is not a regular file; it is removed where it is");
  }
  SIESTA_ASSIGN_OR_RETURN(std::string retired, temp_path(session, segment));
  SIESTA_RETURN_IF_ERROR(fs_.rename(path, retired));
  return retired;
}

Status SnapshotStore::remove_retired(const std::string& retired) {
  const bool in_directory = retired.size() > dir_.size() + 1 && retired.starts_with(dir_ + "/");
  const std::string name = in_directory ? retired.substr(dir_.size() + 1) : std::string();
  std::optional<ParsedName> parsed = parse_name(name);
  if (!parsed || parsed->nonce != nonce_ || parsed->kind != ParsedName::Kind::kTemporary) {
    return InvalidArgument(quote_for_log(retired) + " is not a temporary of this snapshot store");
  }
  return fs_.remove(retired);
}

Result<int64_t> SnapshotStore::read_expiry(const std::string& path) const {
  if (options_.read_expiry) return options_.read_expiry(path);
  return read_snapshot_expiry(fs_, path);
}

void SnapshotStore::cleanup_at_start() {
  Result<std::vector<std::string>> names = fs_.list_directory(dir_);
  if (!names.ok()) {
    record_failure(cleanup_, names.status());
    return;
  }
  // Group the files of other owners by nonce; files with this store's nonce (its process
  // key's, unique to the process) are this store's own.
  struct OwnerFile {
    std::string name;
    ParsedName::Kind kind;
    std::string session;
    uint32_t segment;
  };
  std::map<std::string, std::vector<OwnerFile>> by_owner;
  for (const std::string& name : *names) {
    std::optional<ParsedName> parsed = parse_name(name);
    if (!parsed || parsed->nonce == nonce_) continue;
    by_owner[parsed->nonce].push_back(
        {name, parsed->kind, std::move(parsed->session), parsed->segment});
  }
  bool removed_any = false;
  // Removes one file, counting it under `counter`; a file already gone is no failure.
  const auto remove_counted = [&](const std::string& path, uint64_t& counter) {
    Status removed = fs_.remove(path);
    if (removed.ok()) {
      ++counter;
      removed_any = true;
    } else if (removed.code() != StatusCode::kNotFound) {
      record_failure(cleanup_, removed);
    }
  };
  const int64_t now = clock_.unix_seconds();
  for (const auto& [owner, files] : by_owner) {
    const std::string lock_path = path_of(std::string(kPrefix) + owner + std::string(kLockSuffix));
    // A live owner holds its lock; taking it means the owner is gone. (A missing lock file is
    // created by the attempt, and removed below with the rest.)
    Result<std::unique_ptr<FileLock>> lock = fs_.lock_file(lock_path, /*wait=*/false);
    if (lock.ok() && options_.keep_dead_owners_snapshots) {
      // Offered for adoption (AdoptionCandidates), under the dead owner's lock until
      // finish_adoption(); its temporaries go now (never a snapshot).
      DeadOwner dead{std::move(lock).value(), lock_path, {}};
      std::map<std::string, std::map<uint32_t, std::string>> chains;
      for (const OwnerFile& file : files) {
        if (file.kind == ParsedName::Kind::kSnapshot) {
          chains[file.session][file.segment] = path_of(file.name);
          dead.files.push_back(path_of(file.name));
        } else if (file.kind == ParsedName::Kind::kTemporary) {
          remove_counted(path_of(file.name), cleanup_.removed_dead_owner_files);
        }
      }
      for (auto& [session, segments] : chains) {
        AdoptionCandidate candidate{owner, session, {}};
        // Segments 0..k with none missing; a chain with a gap restores nothing and is left
        // to finish_adoption(), which removes it.
        for (auto& [segment, path] : segments) {
          if (segment != candidate.segment_paths.size()) break;
          candidate.segment_paths.push_back(path);
        }
        if (candidate.segment_paths.size() == segments.size()) {
          candidates_.push_back(std::move(candidate));
        }
      }
      dead_owners_.push_back(std::move(dead));
      continue;
    }
    if (lock.ok()) {
      for (const OwnerFile& file : files) {
        if (file.kind == ParsedName::Kind::kLock) continue;  // last, while still held
        remove_counted(path_of(file.name), cleanup_.removed_dead_owner_files);
      }
      remove_counted(lock_path, cleanup_.removed_dead_owner_files);
      continue;
    }
    if (lock.status().code() != StatusCode::kFailedPrecondition) {
      // Cannot tell whether the owner lives: leave its files for a later start.
      record_failure(cleanup_, lock.status());
      continue;
    }
    // A live owner: only snapshots past their expiry go, a session's segments together and
    // by the newest one's expiry (a delta chain lives as long as its last save: its base may
    // be older). A segment whose expiry cannot be read keeps its whole chain. Temporaries are
    // being written.
    std::map<std::string, std::vector<std::string>> chains;
    for (const OwnerFile& file : files) {
      if (file.kind == ParsedName::Kind::kSnapshot) chains[file.session].push_back(file.name);
    }
    for (const auto& [session, segment_names] : chains) {
      int64_t newest = 0;
      bool known = true;
      for (const std::string& name : segment_names) {
        Result<int64_t> expiry = read_expiry(path_of(name));
        known = known && expiry.ok();
        if (expiry.ok()) newest = std::max(newest, *expiry);
      }
      if (!known || newest > now) continue;
      for (const std::string& name : segment_names) {
        remove_counted(path_of(name), cleanup_.removed_expired_files);
      }
    }
  }
  if (removed_any) {
    Status synced = fs_.sync_directory(dir_);
    if (!synced.ok()) record_failure(cleanup_, synced);
  }
}

Result<std::vector<std::string>> SnapshotStore::own_file_names() const {
  SIESTA_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.list_directory(dir_));
  std::vector<std::string> own;
  for (std::string& name : names) {
    std::optional<ParsedName> parsed = parse_name(name);
    if (parsed && parsed->nonce == nonce_ && parsed->kind != ParsedName::Kind::kLock) {
      own.push_back(std::move(name));
    }
  }
  return own;
}

Status SnapshotStore::adopt(const AdoptionCandidate& candidate, std::string_view session) {
  const auto offered = std::find_if(candidates_.begin(), candidates_.end(), [&](const auto& c) {
    return c.owner_nonce == candidate.owner_nonce && c.session == candidate.session;
  });
  if (offered == candidates_.end()) {
    return InvalidArgument("snapshot " + quote_for_log(candidate.session) + " of owner " +
                           candidate.owner_nonce.substr(0, 8) + "... is not offered for adoption");
  }
  std::vector<std::string> targets;
  targets.reserve(offered->segment_paths.size());
  for (uint32_t segment = 0; segment < offered->segment_paths.size(); ++segment) {
    SIESTA_ASSIGN_OR_RETURN(std::string target, snapshot_path(session, segment));
    Result<PathInfo> there = fs_.stat_no_follow(target);
    if (there.ok() || there.status().code() != StatusCode::kNotFound) {
      return FailedPrecondition("session " + quote_for_log(session) +
                                " already has a snapshot here: nothing is adopted over it");
    }
    targets.push_back(std::move(target));
  }
  // Newest segment first: a chain interrupted part-way leaves this store a tail without its
  // base (removed below), never a base that a later delta of the old name could extend.
  Status moved = Status::Ok();
  for (size_t i = targets.size(); i-- > 0 && moved.ok();) {
    moved = fs_.rename(offered->segment_paths[i], targets[i]);
  }
  if (!moved.ok()) {
    (void)remove(session);
  } else {
    moved = fs_.sync_directory(dir_);
  }
  candidates_.erase(offered);  // adopted, or given up (finish_adoption removes what is left)
  return moved;
}

Status SnapshotStore::finish_adoption() {
  Status first = Status::Ok();
  for (DeadOwner& dead : dead_owners_) {
    for (const std::string& path : dead.files) {
      Status removed = fs_.remove(path);  // NotFound: adopted (renamed away)
      if (!removed.ok() && removed.code() != StatusCode::kNotFound && first.ok()) first = removed;
    }
    Status removed = fs_.remove(dead.lock_path);  // while still held
    if (!removed.ok() && removed.code() != StatusCode::kNotFound && first.ok()) first = removed;
  }
  if (!dead_owners_.empty()) {
    Status synced = fs_.sync_directory(dir_);
    if (first.ok()) first = synced;
  }
  dead_owners_.clear();  // the locks go with them
  candidates_.clear();
  return first;
}

Status SnapshotStore::remove(std::string_view session) {
  // Every segment's name and its temporaries' start "siesta-<nonce>-<session>." (".snap" or
  // ".<segment>.snap"); another session's name goes on with another character, since no
  // session name holds a '.'.
  SIESTA_ASSIGN_OR_RETURN(std::string stem, session_stem(session));
  stem += ".";
  return remove_own_files_where([&](const std::string& name) { return name.starts_with(stem); });
}

Status SnapshotStore::remove_deltas(std::string_view session) {
  // "siesta-<nonce>-<session>." then a digit: a delta's name or its temporary's.
  SIESTA_ASSIGN_OR_RETURN(std::string stem, session_stem(session));
  stem += ".";
  return remove_own_files_where([&](const std::string& name) {
    return name.size() > stem.size() && name.starts_with(stem) && name[stem.size()] >= '1' &&
           name[stem.size()] <= '9';
  });
}

Status SnapshotStore::remove_segment(std::string_view session, uint32_t segment) {
  SIESTA_ASSIGN_OR_RETURN(const std::string path, snapshot_path(session, segment));
  const std::string final_name = path.substr(dir_.size() + 1);
  return remove_own_files_where([&](const std::string& name) {
    return name == final_name || name.starts_with(final_name + std::string(kTemporarySuffix));
  });
}

Status SnapshotStore::remove_own_files() {
  return remove_own_files_where([](const std::string&) { return true; });
}

Status SnapshotStore::remove_own_files_where(
    const std::function<bool(const std::string& name)>& selected) {
  SIESTA_ASSIGN_OR_RETURN(std::vector<std::string> names, own_file_names());
  Status first = Status::Ok();
  bool removed_any = false;
  for (const std::string& name : names) {
    if (!selected(name)) continue;
    Status removed = fs_.remove(path_of(name));
    if (removed.ok()) {
      removed_any = true;
    } else if (removed.code() != StatusCode::kNotFound && first.ok()) {
      first = removed;
    }
  }
  if (removed_any) {
    Status synced = fs_.sync_directory(dir_);
    if (first.ok()) first = synced;
  }
  return first;
}

Result<uint64_t> SnapshotStore::disk_bytes() const {
  SIESTA_ASSIGN_OR_RETURN(std::vector<std::string> names, own_file_names());
  uint64_t total = 0;
  for (const std::string& name : names) {
    // A file removed between the listing and the stat simply holds no bytes any more.
    Result<PathInfo> info = fs_.stat_no_follow(path_of(name));
    if (info.ok() && info->type == PathInfo::Type::kRegular) total += info->size;
  }
  return total;
}

}  // namespace siesta
