// Helpers for the snapshot tests: a fixed process key, host regions with patterned bytes,
// whole-file byte access, and a FileSystem wrapper that reports a chosen free space.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/file_system.h"
#include "core/base/file_system_wrapper.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_region.h"
#include "tests/support/backend_test_util.h"

namespace siesta::snapshot_test {

inline ProcessKey fixed_key(uint8_t seed) {
  ProcessKey::KeyBytes key{};
  snapshot::ProcessNonce nonce{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(seed * 31 + i);
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(seed * 7 + i + 1);
  return ProcessKey::from_bytes(key, nonce);
}

inline snapshot::Fingerprint fingerprint(uint8_t seed) {
  snapshot::Fingerprint f{};
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(seed + 3 * i);
  return f;
}

// A host region backed by a vector the test owns.
struct HostRegion {
  std::vector<std::byte> bytes;
  SnapshotRegion region;
};

inline HostRegion host_region(std::string name, size_t size, std::vector<snapshot::Extent> extents,
                              uint64_t pattern_seed,
                              snapshot::PersistKind persist = snapshot::PersistKind::kContents) {
  HostRegion out;
  out.bytes = test_util::make_pattern(size, pattern_seed);
  out.region.layout = {std::move(name), persist, size, std::move(extents)};
  out.region.place = SnapshotRegion::Place::kHost;
  out.region.host = out.bytes.data();
  return out;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline size_t count_files(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Forwards everything to a PosixFileSystem except available_bytes, which says `available`,
// and, when `skip_syncs`, file and directory syncs, which do nothing: property tests write
// thousands of files whose durability they do not test, and fsync on a busy disk costs more
// than everything else they do.
class TestFileSystem final : public FileSystemWrapper {
 public:
  explicit TestFileSystem(uint64_t available = UINT64_MAX, bool skip_syncs = false)
      : FileSystemWrapper(posix()), available_(available), skip_syncs_(skip_syncs) {}
  Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                         uint32_t mode) override {
    ++creates;
    auto file = target().create_exclusive(path, mode);
    if (!file.ok()) return file;
    return std::unique_ptr<WritableFile>(std::make_unique<WrappedFile>(
        std::move(file).value(), skip_syncs_, after_write, syncs, writeback));
  }
  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override {
    auto file = target().open_readable(path);
    if (!file.ok()) return file;
    if (shrink_after_size_at) {
      return std::unique_ptr<ReadableFile>(
          std::make_unique<ShrinkingReads>(std::move(file).value(), *shrink_after_size_at));
    }
    if (!fail_reads_from) return file;
    return std::unique_ptr<ReadableFile>(
        std::make_unique<FailingReads>(std::move(file).value(), *fail_reads_from));
  }
  Status sync_directory(const std::string& path) override {
    return skip_syncs_ ? Status::Ok() : target().sync_directory(path);
  }
  Result<uint64_t> available_bytes(const std::string&) override { return available_; }
  int creates = 0;
  int syncs = 0;  // WritableFile::sync calls on files created here
  // What the write-back hints of files created here covered.
  struct Writeback {
    uint64_t written_end = 0;      // end of the furthest write
    uint64_t started_end = 0;      // end of the furthest start_writeback
    uint64_t waited_end = 0;       // end of the furthest wait_writeback
    uint64_t max_unwaited = 0;     // largest written_end - waited_end seen after a write
    bool started_in_order = true;  // each start_writeback began where the previous ended
  } writeback;
  // Called after every successful write_at of a file created from now on (tests cancel a write
  // midway with it).
  std::function<void()> after_write;
  // When set, every read_at of a file opened from now on that reaches this offset fails with
  // IoError "injected": a failing read at a place in the file, whichever thread reads it when.
  std::optional<uint64_t> fail_reads_from;
  // When set, files opened from now on read as if cut at this offset after size() was taken
  // (as when another process truncates the file during a read): size() still says the whole
  // length, read_at returns only the bytes before the cut.
  std::optional<uint64_t> shrink_after_size_at;

 private:
  // A stateless POSIX file system every TestFileSystem forwards to.
  static PosixFileSystem& posix() {
    static PosixFileSystem instance;
    return instance;
  }

  class FailingReads final : public ReadableFileWrapper {
   public:
    FailingReads(std::unique_ptr<ReadableFile> inner, uint64_t from)
        : ReadableFileWrapper(std::move(inner)), from_(from) {}
    Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
      if (offset + data.size() > from_) {
        return IoError("injected: read of bytes " + std::to_string(offset) + ".." +
                       std::to_string(offset + data.size()) + " fails from " +
                       std::to_string(from_));
      }
      return target().read_at(offset, data);
    }

   private:
    uint64_t from_;
  };

  class ShrinkingReads final : public ReadableFileWrapper {
   public:
    ShrinkingReads(std::unique_ptr<ReadableFile> inner, uint64_t cut)
        : ReadableFileWrapper(std::move(inner)), cut_(cut) {}
    Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
      if (offset >= cut_) return size_t{0};
      return target().read_at(offset, data.first(std::min<uint64_t>(data.size(), cut_ - offset)));
    }

   private:
    uint64_t cut_;
  };

  class WrappedFile final : public WritableFileWrapper {
   public:
    WrappedFile(std::unique_ptr<WritableFile> inner, bool skip_syncs,
                std::function<void()> after_write, int& syncs, Writeback& writeback)
        : WritableFileWrapper(std::move(inner)),
          skip_syncs_(skip_syncs),
          after_write_(std::move(after_write)),
          syncs_(syncs),
          writeback_(writeback) {}
    Status write_at(uint64_t offset, std::span<const std::byte> data) override {
      Status s = target().write_at(offset, data);
      if (s.ok()) {
        writeback_.written_end = std::max<uint64_t>(writeback_.written_end, offset + data.size());
        writeback_.max_unwaited =
            std::max(writeback_.max_unwaited, writeback_.written_end - writeback_.waited_end);
      }
      if (s.ok() && after_write_) after_write_();
      return s;
    }
    Status sync() override {
      ++syncs_;
      return skip_syncs_ ? Status::Ok() : target().sync();
    }
    void start_writeback(uint64_t offset, uint64_t length) override {
      if (offset != writeback_.started_end) writeback_.started_in_order = false;
      writeback_.started_end = std::max(writeback_.started_end, offset + length);
      if (!skip_syncs_) target().start_writeback(offset, length);
    }
    void wait_writeback(uint64_t offset, uint64_t length) override {
      writeback_.waited_end = std::max(writeback_.waited_end, offset + length);
      if (!skip_syncs_) target().wait_writeback(offset, length);
    }

   private:
    bool skip_syncs_;
    std::function<void()> after_write_;
    int& syncs_;
    Writeback& writeback_;
  };

  uint64_t available_;
  bool skip_syncs_;
};

}  // namespace siesta::snapshot_test
