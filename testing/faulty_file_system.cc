#include "testing/faulty_file_system.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace siesta {
namespace {

// The directory whose sync makes a name durable: everything before the last '/'.
std::string directory_of(const std::string& path) {
  const size_t last = path.find_last_not_of('/');
  if (last == std::string::npos) return "/";
  const size_t slash = path.rfind('/', last);
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// "dir/" and "dir" name the same directory.
std::string without_trailing_slashes(const std::string& path) {
  const size_t last = path.find_last_not_of('/');
  if (last == std::string::npos) return path.empty() ? path : "/";
  return path.substr(0, last + 1);
}

bool may_run_out_of_space(FsOp op) {
  return op == FsOp::kCreate || op == FsOp::kWrite || op == FsOp::kSync || op == FsOp::kRename ||
         op == FsOp::kSyncDirectory;
}

}  // namespace

std::string_view fs_op_name(FsOp op) {
  switch (op) {
    case FsOp::kCreate: return "create";
    case FsOp::kWrite: return "write";
    case FsOp::kSync: return "sync";
    case FsOp::kRename: return "rename";
    case FsOp::kSyncDirectory: return "sync_directory";
    case FsOp::kRemove: return "remove";
    case FsOp::kOpen: return "open";
    case FsOp::kRead: return "read";
    case FsOp::kLock: return "lock";
  }
  return "unknown";
}

std::string_view fs_fault_kind_name(FsFaultKind kind) {
  switch (kind) {
    case FsFaultKind::kIoError: return "io_error";
    case FsFaultKind::kNoSpace: return "no_space";
    case FsFaultKind::kShortWrite: return "short_write";
  }
  return "unknown";
}

FsFaultPlan FsFaultPlan::from_seed(uint64_t seed, uint64_t max_nth_call) {
  SeededDraws draws(seed);
  FsFaultPlan plan;
  plan.op = static_cast<FsOp>(draws.below(kFsOpCount));
  std::vector<FsFaultKind> kinds = {FsFaultKind::kIoError};
  if (may_run_out_of_space(plan.op)) kinds.push_back(FsFaultKind::kNoSpace);
  if (plan.op == FsOp::kWrite) kinds.push_back(FsFaultKind::kShortWrite);
  plan.kind = kinds[draws.below(kinds.size())];
  plan.when = FaultSchedule::draw(draws, max_nth_call);
  return plan;
}

std::string FsFaultPlan::describe() const {
  if (when.never()) return "no fault";
  return std::string(fs_fault_kind_name(kind)) + " " + when.describe(fs_op_name(op));
}

// ---------------------------------------------------------------------------------------------
// Wrapped handles.

// The write-back hints are forwarded (WritableFileWrapper): they change no durability, so there
// is nothing to mirror or inject.
class FaultyFileSystem::Writable final : public WritableFileWrapper {
 public:
  Writable(FaultyFileSystem& fs, std::unique_ptr<WritableFile> inner, uint64_t node,
           std::string path)
      : WritableFileWrapper(std::move(inner)),
        fs_(fs),
        node_(node),
        generation_(fs.generation()),
        path_(std::move(path)) {
    fs_.open_files_.fetch_add(1);
  }
  ~Writable() override {
    if (!closed_) fs_.open_files_.fetch_sub(1);
  }

  Status write_at(uint64_t offset, std::span<const std::byte> data) override {
    const uint64_t call = fs_.count(FsOp::kWrite);
    if (fs_.halted(FsOp::kWrite, call)) return fs_.halted_error(FsOp::kWrite, call, path_);
    SIESTA_RETURN_IF_ERROR(check_alive("write"));
    if (fs_.fires(FsOp::kWrite, call)) {
      if (fs_.plan_.kind != FsFaultKind::kShortWrite) {
        return fs_.injected(FsOp::kWrite, call, path_);
      }
      const std::span<const std::byte> prefix = data.first(data.size() / 2);
      if (!prefix.empty()) {
        SIESTA_RETURN_IF_ERROR(target().write_at(offset, prefix));
        mirror(offset, prefix);
      }
      return fs_.injected(FsOp::kWrite, call, path_,
                          ": wrote " + std::to_string(prefix.size()) + " of " +
                              std::to_string(data.size()) + " bytes");
    }
    SIESTA_RETURN_IF_ERROR(target().write_at(offset, data));
    mirror(offset, data);
    return Status::Ok();
  }

  Status sync() override {
    const uint64_t call = fs_.count(FsOp::kSync);
    if (fs_.halted(FsOp::kSync, call)) return fs_.halted_error(FsOp::kSync, call, path_);
    SIESTA_RETURN_IF_ERROR(check_alive("sync"));
    if (fs_.fires(FsOp::kSync, call)) return fs_.injected(FsOp::kSync, call, path_);
    SIESTA_RETURN_IF_ERROR(target().sync());
    MutexLock lock(fs_.mutex_);
    auto node = fs_.nodes_.find(node_);
    if (node != fs_.nodes_.end()) node->second.synced = node->second.live;
    return Status::Ok();
  }

  Status close() override {
    if (closed_) return Status::Ok();
    closed_ = true;
    fs_.open_files_.fetch_sub(1);
    return target().close();
  }

 private:
  Status check_alive(const char* what) const {
    if (generation_ == fs_.generation() && !closed_) return Status::Ok();
    return FailedPrecondition(std::string(what) + " " + path_ +
                              (closed_ ? ": file is closed" : ": handle opened before a crash"));
  }

  // A write that reached the inner file is mirrored, so a later sync knows what it made
  // durable. (A failed inner write mirrors nothing: its prefix is unknown.)
  void mirror(uint64_t offset, std::span<const std::byte> data) {
    MutexLock lock(fs_.mutex_);
    auto node = fs_.nodes_.find(node_);
    if (node == fs_.nodes_.end()) return;
    std::vector<std::byte>& live = node->second.live;
    if (live.size() < offset + data.size()) live.resize(offset + data.size());
    std::copy(data.begin(), data.end(), live.begin() + static_cast<ptrdiff_t>(offset));
  }

  FaultyFileSystem& fs_;
  const uint64_t node_;
  const uint64_t generation_;
  const std::string path_;
  bool closed_ = false;
};

class FaultyFileSystem::Readable final : public ReadableFileWrapper {
 public:
  Readable(FaultyFileSystem& fs, std::unique_ptr<ReadableFile> inner, std::string path)
      : ReadableFileWrapper(std::move(inner)),
        fs_(fs),
        generation_(fs.generation()),
        path_(std::move(path)) {
    fs_.open_files_.fetch_add(1);
  }
  ~Readable() override { fs_.open_files_.fetch_sub(1); }

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
    const uint64_t call = fs_.count(FsOp::kRead);
    if (fs_.halted(FsOp::kRead, call)) return fs_.halted_error(FsOp::kRead, call, path_);
    if (generation_ != fs_.generation()) {
      return FailedPrecondition("read " + path_ + ": handle opened before a crash");
    }
    if (fs_.fires(FsOp::kRead, call)) return fs_.injected(FsOp::kRead, call, path_);
    return target().read_at(offset, data);
  }
  Result<uint64_t> cached_bytes(uint64_t offset, uint64_t length) override {
    return target().cached_bytes(offset, length);
  }
  // The handle around the cache is wrapped too: its reads are reads of this file system, each
  // counted and faulted as any other.
  Result<std::unique_ptr<ReadableFile>> open_direct() override {
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> direct, target().open_direct());
    return std::unique_ptr<ReadableFile>(new Readable(fs_, std::move(direct), path_));
  }

 private:
  FaultyFileSystem& fs_;
  const uint64_t generation_;
  const std::string path_;
};

class FaultyFileSystem::Lock final : public FileLock {
 public:
  Lock(FaultyFileSystem& fs, std::unique_ptr<FileLock> inner) : fs_(fs), inner_(std::move(inner)) {
    fs_.held_locks_.fetch_add(1);
  }
  ~Lock() override { fs_.held_locks_.fetch_sub(1); }

 private:
  FaultyFileSystem& fs_;
  std::unique_ptr<FileLock> inner_;
};

// ---------------------------------------------------------------------------------------------
// The file system.

FaultyFileSystem::FaultyFileSystem(FileSystem& inner, FsFaultPlan plan)
    : FileSystemWrapper(inner), plan_(plan) {}

FaultyFileSystem::~FaultyFileSystem() = default;

void FaultyFileSystem::set_plan(FsFaultPlan plan) {
  plan_ = plan;
  for (auto& calls : calls_) calls.store(0);
}

FsCounters FaultyFileSystem::counters() const {
  FsCounters counters;
  for (size_t i = 0; i < calls_.size(); ++i) counters.calls[i] = calls_[i].load();
  counters.faults_fired = faults_fired_.load();
  counters.open_files = open_files_.load();
  counters.held_locks = held_locks_.load();
  return counters;
}

uint64_t FaultyFileSystem::generation() const {
  MutexLock lock(mutex_);
  return generation_;
}

Status FaultyFileSystem::injected(FsOp op, uint64_t call, const std::string& path,
                                  const std::string& detail) {
  faults_fired_.fetch_add(1);
  const FsFaultKind kind = op == FsOp::kWrite || plan_.kind != FsFaultKind::kShortWrite
                               ? plan_.kind
                               : FsFaultKind::kIoError;
  const std::string message = "injected " + std::string(fs_fault_kind_name(kind)) + " on " +
                              std::string(fs_op_name(op)) + " call " + std::to_string(call) +
                              " of " + path + detail + " (fault plan: " + plan_.describe() + ")";
  return kind == FsFaultKind::kNoSpace ? NoSpace(message) : IoError(message);
}

Result<std::unique_ptr<WritableFile>> FaultyFileSystem::create_exclusive(const std::string& path,
                                                                         uint32_t mode) {
  const uint64_t call = count(FsOp::kCreate);
  if (halted(FsOp::kCreate, call)) return halted_error(FsOp::kCreate, call, path);
  if (fires(FsOp::kCreate, call)) return injected(FsOp::kCreate, call, path);
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                          target().create_exclusive(path, mode));
  uint64_t node = 0;
  {
    MutexLock lock(mutex_);
    node = next_node_++;
    nodes_[node].mode = mode;
    names_[path] = node;
    pending_.push_back({PendingOp::Type::kCreate, directory_of(path), path, "", node, {}});
  }
  return std::unique_ptr<WritableFile>(new Writable(*this, std::move(file), node, path));
}

Result<std::unique_ptr<ReadableFile>> FaultyFileSystem::open_readable(const std::string& path) {
  const uint64_t call = count(FsOp::kOpen);
  if (halted(FsOp::kOpen, call)) return halted_error(FsOp::kOpen, call, path);
  if (fires(FsOp::kOpen, call)) return injected(FsOp::kOpen, call, path);
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, target().open_readable(path));
  return std::unique_ptr<ReadableFile>(new Readable(*this, std::move(file), path));
}

Status FaultyFileSystem::rename(const std::string& from, const std::string& to) {
  const uint64_t call = count(FsOp::kRename);
  if (halted(FsOp::kRename, call)) return halted_error(FsOp::kRename, call, from + " -> " + to);
  if (fires(FsOp::kRename, call)) return injected(FsOp::kRename, call, from + " -> " + to);
  MutexLock lock(mutex_);
  // Both names are known before the rename, so that a crash can put back what it replaced.
  const std::optional<uint64_t> moved = node_for_locked(from);
  const std::optional<uint64_t> replaced = node_for_locked(to);
  SIESTA_RETURN_IF_ERROR(target().rename(from, to));
  names_.erase(from);
  names_.erase(to);
  if (moved) names_[to] = *moved;
  pending_.push_back(
      {PendingOp::Type::kRename, directory_of(to), to, from, moved.value_or(0), replaced});
  return Status::Ok();
}

Status FaultyFileSystem::remove(const std::string& path) {
  const uint64_t call = count(FsOp::kRemove);
  if (halted(FsOp::kRemove, call)) return halted_error(FsOp::kRemove, call, path);
  if (fires(FsOp::kRemove, call)) return injected(FsOp::kRemove, call, path);
  MutexLock lock(mutex_);
  const std::optional<uint64_t> node = node_for_locked(path);
  SIESTA_RETURN_IF_ERROR(target().remove(path));
  names_.erase(path);
  pending_.push_back(
      {PendingOp::Type::kRemove, directory_of(path), path, "", node.value_or(0), {}});
  return Status::Ok();
}

Status FaultyFileSystem::sync_directory(const std::string& path) {
  const uint64_t call = count(FsOp::kSyncDirectory);
  if (halted(FsOp::kSyncDirectory, call)) return halted_error(FsOp::kSyncDirectory, call, path);
  if (fires(FsOp::kSyncDirectory, call)) return injected(FsOp::kSyncDirectory, call, path);
  SIESTA_RETURN_IF_ERROR(target().sync_directory(path));
  const std::string directory = without_trailing_slashes(path);
  MutexLock lock(mutex_);
  std::erase_if(pending_, [&](const PendingOp& op) { return op.directory == directory; });
  return Status::Ok();
}

Result<std::unique_ptr<FileLock>> FaultyFileSystem::lock_file(const std::string& path, bool wait) {
  const uint64_t call = count(FsOp::kLock);
  if (halted(FsOp::kLock, call)) return halted_error(FsOp::kLock, call, path);
  if (fires(FsOp::kLock, call)) return injected(FsOp::kLock, call, path);
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> held, target().lock_file(path, wait));
  return std::unique_ptr<FileLock>(new Lock(*this, std::move(held)));
}

std::optional<uint64_t> FaultyFileSystem::node_for_locked(const std::string& path) {
  if (auto known = names_.find(path); known != names_.end()) return known->second;
  // A file from outside the wrapper: durable as it is now, so read it once to be able to
  // recreate it. Anything unreadable (a directory, a vanished name) is not modelled.
  Result<PathInfo> info = target().stat_no_follow(path);
  if (!info.ok() || info->type != PathInfo::Type::kRegular) return std::nullopt;
  Result<std::unique_ptr<ReadableFile>> file = target().open_readable(path);
  if (!file.ok()) return std::nullopt;
  Node node;
  node.mode = info->mode;
  node.live.resize(info->size);
  Result<size_t> read = (*file)->read_at(0, node.live);
  if (!read.ok()) return std::nullopt;
  node.live.resize(*read);
  node.synced = node.live;
  const uint64_t id = next_node_++;
  nodes_[id] = std::move(node);
  names_[path] = id;
  return id;
}

Status FaultyFileSystem::restore_locked(const std::string& path, const Node& node) {
  Status removed = target().remove(path);
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) return removed;
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                          target().create_exclusive(path, node.mode));
  if (!node.synced.empty()) SIESTA_RETURN_IF_ERROR(file->write_at(0, node.synced));
  SIESTA_RETURN_IF_ERROR(file->sync());
  return file->close();
}

void FaultyFileSystem::halt_after(FsOp op, uint64_t nth_call) {
  halt_op_.store(op);
  halt_nth_.store(nth_call);
}

bool FaultyFileSystem::halted(FsOp op, uint64_t call) const {
  const uint64_t nth = halt_nth_.load();
  if (nth == 0) return false;
  const FsOp halt_op = halt_op_.load();
  const uint64_t done = calls_[static_cast<size_t>(halt_op)].load();
  if (done != nth) return done > nth;
  return !(op == halt_op && call == nth);  // the halting call itself still runs
}

Status FaultyFileSystem::halted_error(FsOp op, uint64_t call, const std::string& path) const {
  return IoError("halted: " + std::string(fs_op_name(op)) + " call " + std::to_string(call) +
                 " of " + path + " comes after " + std::string(fs_op_name(halt_op_.load())) +
                 " call " + std::to_string(halt_nth_.load()) + ", where the process died");
}

Status FaultyFileSystem::crash() {
  halt_nth_.store(0);
  MutexLock lock(mutex_);
  ++generation_;
  // Directory operations that never became durable, newest first.
  for (auto op = pending_.rbegin(); op != pending_.rend(); ++op) {
    switch (op->type) {
      case PendingOp::Type::kCreate: {
        Status removed = target().remove(op->path);
        if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
          return removed.with_context("crash: undo create");
        }
        names_.erase(op->path);
        break;
      }
      case PendingOp::Type::kRename: {
        SIESTA_RETURN_IF_ERROR(
            target().rename(op->path, op->from).with_context("crash: undo rename"));
        names_.erase(op->path);
        if (op->node != 0) names_[op->from] = op->node;
        if (op->replaced) {
          SIESTA_RETURN_IF_ERROR(restore_locked(op->path, nodes_.at(*op->replaced))
                                     .with_context("crash: restore replaced file"));
          names_[op->path] = *op->replaced;
        }
        break;
      }
      case PendingOp::Type::kRemove:
        if (op->node != 0) {
          SIESTA_RETURN_IF_ERROR(
              restore_locked(op->path, nodes_.at(op->node)).with_context("crash: undo remove"));
          names_[op->path] = op->node;
        }
        break;
    }
  }
  pending_.clear();
  // Bytes written since the last sync are lost.
  for (const auto& [path, id] : names_) {
    Node& node = nodes_.at(id);
    if (node.live != node.synced) {
      SIESTA_RETURN_IF_ERROR(restore_locked(path, node).with_context("crash: drop unsynced bytes"));
    }
  }
  for (auto& [id, node] : nodes_) node.live = node.synced;
  return Status::Ok();
}

}  // namespace siesta
