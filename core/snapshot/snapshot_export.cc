#include "core/snapshot/snapshot_export.h"

#include "core/base/log_text.h"

namespace siesta {
namespace {

bool allowed_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

Status bad_name(std::string_view name, std::string_view why) {
  return InvalidArgument("export name " + quote_for_log(name) + " " + std::string(why));
}

}  // namespace

Status validate_export_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxExportNameBytes) {
    return bad_name(name, "must have 1.." + std::to_string(kMaxExportNameBytes) + " bytes");
  }
  for (char c : name) {
    if (!allowed_char(c)) return bad_name(name, "may hold only A-Z a-z 0-9 . _ -");
  }
  // A leading '.' covers ".", ".." and hidden files; ".." anywhere is refused too so that no
  // later joining or normalising can ever turn a name into a parent reference.
  if (name.front() == '.') return bad_name(name, "must not start with '.'");
  if (name.find("..") != std::string_view::npos) return bad_name(name, "must not contain \"..\"");
  if (name.find(kTemporarySuffix) != std::string_view::npos) {
    return bad_name(name, "must not contain \".tmp-\" (reserved for files being written)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<SnapshotExporter>> SnapshotExporter::open(FileSystem& fs, const Clock& clock,
                                                                 MemoryBackend* backend,
                                                                 const std::string& dir,
                                                                 Options options) {
  SIESTA_ASSIGN_OR_RETURN(PrivateDirectory directory,
                          PrivateDirectory::open(fs, dir, {options.owner_uid, "export directory"}));
  SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::generate());
  return std::unique_ptr<SnapshotExporter>(
      new SnapshotExporter(fs, clock, backend, std::move(directory), options, std::move(key)));
}

Result<std::string> SnapshotExporter::path_of(std::string_view name) const {
  SIESTA_RETURN_IF_ERROR(validate_export_name(name));
  return dir_.file(name);
}

Result<SnapshotWriteResult> SnapshotExporter::export_session(
    std::string_view name, const snapshot::Fingerprint& fingerprint,
    std::span<const SnapshotRegion> regions, const std::atomic<bool>* cancel) {
  SIESTA_ASSIGN_OR_RETURN(std::string path, path_of(name));
  SnapshotWriteOptions write;
  write.path = std::move(path);
  write.mode = snapshot::SnapshotMode::kDurableExport;
  write.fingerprint = fingerprint;
  write.expiry_unix = snapshot::kNeverExpires;
  write.generation = 0;             // an export has none: it may be imported any number of times
  write.owner = std::string(name);  // imported under this name only
  write.chunk_bytes = options_.chunk_bytes;
  write.cancel = cancel;
  SnapshotWriter writer(fs_, clock_, key_, backend_);
  return writer.write(write, regions);
}

Result<SnapshotReadResult> SnapshotExporter::import_session(
    std::string_view name, const snapshot::Fingerprint& expected_fingerprint,
    std::span<const SnapshotRegion> regions) {
  SIESTA_ASSIGN_OR_RETURN(std::string path, path_of(name));
  SnapshotReader reader(fs_, clock_, key_, backend_);
  // The expected mode is always durable export: a session file (encrypted or digest) put under
  // an export's name is refused as Foreign before its seal is even looked at.
  SnapshotReadOptions read;
  read.path = std::move(path);
  read.mode = snapshot::SnapshotMode::kDurableExport;
  read.fingerprint = expected_fingerprint;
  read.owner = std::string(name);  // an export renamed (or copied) under this name is Foreign
  return reader.read(read, regions);
}

Status SnapshotExporter::erase(std::string_view name) {
  SIESTA_ASSIGN_OR_RETURN(const std::string path, path_of(name));
  SIESTA_RETURN_IF_ERROR(fs_.remove(path));
  return fs_.sync_directory(dir_.path());
}

}  // namespace siesta
