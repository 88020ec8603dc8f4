// AlignedReadsFile: a stand-in for a handle that reads around the page cache, on any file
// system (tmpfs has no O_DIRECT). It refuses, as O_DIRECT does, any read whose offset, size or
// buffer is not a multiple of kDirectReadAlignment, and reads through the handle it wraps.
// `fail_from`, when set, fails every read that reaches that offset with IoError "injected",
// and the counters say how many reads came, how many were refused for their alignment and how
// many failed as planned.
//
// Thread rule: read_at from several threads at once, as any ReadableFile.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/base/file_system_wrapper.h"

namespace siesta::testing {

class AlignedReadsFile final : public ReadableFileWrapper {
 public:
  struct Counters {
    std::atomic<uint64_t> reads{0};
    std::atomic<uint64_t> misaligned{0};
    std::atomic<uint64_t> failed{0};  // reads failed as planned (fail_from)
  };

  AlignedReadsFile(std::unique_ptr<ReadableFile> target, std::shared_ptr<Counters> counters,
                   std::optional<uint64_t> fail_from = std::nullopt)
      : ReadableFileWrapper(std::move(target)),
        counters_(std::move(counters)),
        fail_from_(fail_from) {}

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
    counters_->reads.fetch_add(1);
    const auto address = reinterpret_cast<uintptr_t>(data.data());
    if (offset % kDirectReadAlignment != 0 || data.size() % kDirectReadAlignment != 0 ||
        address % kDirectReadAlignment != 0) {
      counters_->misaligned.fetch_add(1);
      return InvalidArgument("a read around the cache at " + std::to_string(offset) + " of " +
                             std::to_string(data.size()) + " bytes is not aligned");
    }
    if (fail_from_ && offset + data.size() > *fail_from_) {
      counters_->failed.fetch_add(1);
      return IoError("injected: a read around the cache at " + std::to_string(offset));
    }
    return target().read_at(offset, data);
  }

 private:
  const std::shared_ptr<Counters> counters_;
  const std::optional<uint64_t> fail_from_;
};

}  // namespace siesta::testing
