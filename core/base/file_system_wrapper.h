// Forwarding bases for the FileSystem seam (core/base/file_system.h), as LevelDB's EnvWrapper:
// every call goes to the wrapped object, so a wrapper that injects faults, counts calls or
// skips syncs overrides only the calls it changes and stays correct when the seam grows.
//
// Ownership: FileSystemWrapper borrows its target, which must outlive it; the file wrappers
// own the handle they wrap.
// Thread rule: as the wrapped object's (a FileSystem from any thread, a file by one at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/base/file_system.h"

namespace siesta {

class WritableFileWrapper : public WritableFile {
 public:
  // REQUIRES: target != nullptr.
  explicit WritableFileWrapper(std::unique_ptr<WritableFile> target) : target_(std::move(target)) {}

  Status write_at(uint64_t offset, std::span<const std::byte> data) override {
    return target_->write_at(offset, data);
  }
  Status sync() override { return target_->sync(); }
  void start_writeback(uint64_t offset, uint64_t length) override {
    target_->start_writeback(offset, length);
  }
  void wait_writeback(uint64_t offset, uint64_t length) override {
    target_->wait_writeback(offset, length);
  }
  Status close() override { return target_->close(); }

 protected:
  WritableFile& target() const { return *target_; }

 private:
  std::unique_ptr<WritableFile> target_;
};

class ReadableFileWrapper : public ReadableFile {
 public:
  // REQUIRES: target != nullptr.
  explicit ReadableFileWrapper(std::unique_ptr<ReadableFile> target) : target_(std::move(target)) {}

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
    return target_->read_at(offset, data);
  }
  Result<uint64_t> size() override { return target_->size(); }

 protected:
  ReadableFile& target() const { return *target_; }

 private:
  std::unique_ptr<ReadableFile> target_;
};

class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem& target) : target_(&target) {}

  // The wrapped file system.
  FileSystem& target() const { return *target_; }

  Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                         uint32_t mode) override {
    return target_->create_exclusive(path, mode);
  }
  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override {
    return target_->open_readable(path);
  }
  Status rename(const std::string& from, const std::string& to) override {
    return target_->rename(from, to);
  }
  Status remove(const std::string& path) override { return target_->remove(path); }
  Status sync_directory(const std::string& path) override { return target_->sync_directory(path); }
  Status make_directory(const std::string& path, uint32_t mode) override {
    return target_->make_directory(path, mode);
  }
  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    return target_->list_directory(path);
  }
  Result<PathInfo> stat_no_follow(const std::string& path) override {
    return target_->stat_no_follow(path);
  }
  Result<PathInfo> stat_directory(const std::string& path) override {
    return target_->stat_directory(path);
  }
  Result<uint64_t> available_bytes(const std::string& path) override {
    return target_->available_bytes(path);
  }
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path, bool wait) override {
    return target_->lock_file(path, wait);
  }

 private:
  FileSystem* target_;
};

}  // namespace siesta
