#include "core/offload/ram_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "core/base/os_error.h"
#include "core/base/round_up.h"
#include "core/memory/host_address_space.h"

namespace siesta {
namespace {

uint64_t round_to_pages(uint64_t bytes) { return round_up(bytes, host_address_space::page_size()); }

}  // namespace

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  return pages > 0 ? static_cast<uint64_t>(pages) * host_address_space::page_size() : 0;
}

uint64_t default_ram_tier_bytes(uint64_t machine_bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return std::min(kDefaultRamTierCapBytes, machine_bytes / 4) / kMiB * kMiB;
}

Result<std::byte*> AnonymousRamPages::map(size_t bytes) {
  void* pages = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) {
    const Status failed =
        status_from_errno(errno, "RAM tier: mmap of " + std::to_string(bytes) + " bytes");
    return OutOfMemory(failed.message());
  }
  return static_cast<std::byte*>(pages);
}

void AnonymousRamPages::unmap(std::byte* pages, size_t bytes) { (void)::munmap(pages, bytes); }

RegisteredRamPages::RegisteredRamPages(MemoryBackend& backend, std::unique_ptr<RamPages> inner)
    : backend_(backend), inner_(std::move(inner)) {}

Result<std::byte*> RegisteredRamPages::map(size_t bytes) {
  SIESTA_ASSIGN_OR_RETURN(std::byte * pages, inner_->map(bytes));
  Status registered = backend_.register_host({pages, bytes});
  if (!registered.ok()) {
    inner_->unmap(pages, bytes);
    return Status(registered.code(), "RAM tier: " + registered.message());
  }
  return pages;
}

void RegisteredRamPages::unmap(std::byte* pages, size_t bytes) {
  backend_.unregister_host(pages);
  inner_->unmap(pages, bytes);
}

bool RamBlock::device_copies() const { return tier_ != nullptr && tier_->device_copies(); }

uint64_t RamBlock::contiguous_bytes(uint64_t offset) const {
  return tier_ == nullptr ? 0 : tier_->pages_->contiguous_bytes(data_ + offset);
}

RamBlock& RamBlock::operator=(RamBlock&& other) noexcept {
  if (this != &other) {
    reset();
    tier_ = std::exchange(other.tier_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void RamBlock::reset() {
  if (tier_ == nullptr) return;
  std::exchange(tier_, nullptr)->give_back(data_, mapped_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
}

RamTier::RamTier(uint64_t budget_bytes, std::unique_ptr<RamPages> pages)
    : budget_(budget_bytes),
      pages_(pages ? std::move(pages) : std::make_unique<AnonymousRamPages>()) {}

Result<RamBlock> RamTier::allocate(uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("RAM tier: a block of 0 bytes");
  const uint64_t mapped = round_to_pages(bytes);
  {
    // Charged before the mapping, so two threads never both take the last room.
    MutexLock lock(mu_);
    if (mapped > budget_ || used_ > budget_ - mapped) {
      ++refused_full_;
      return OutOfMemory("RAM tier: " + std::to_string(mapped) + " bytes do not fit (" +
                         std::to_string(budget_ - used_) + " of " + std::to_string(budget_) +
                         " left)");
    }
    used_ += mapped;
    ++blocks_;
  }
  Result<std::byte*> pages = pages_->map(mapped);
  if (!pages.ok()) {
    MutexLock lock(mu_);
    used_ -= mapped;
    --blocks_;
    ++allocation_failures_;
    return pages.status();
  }
  return RamBlock(this, *pages, bytes, mapped);
}

bool RamTier::fits(uint64_t bytes) const {
  const uint64_t mapped = round_to_pages(bytes);
  MutexLock lock(mu_);
  return mapped <= budget_ && used_ <= budget_ - mapped;
}

void RamTier::expect(uint64_t bytes) {
  const uint64_t mapped = round_to_pages(bytes);
  if (mapped == 0 || mapped > budget_) return;
  pages_->expect(mapped);
}

RamTierStats RamTier::stats() const {
  MutexLock lock(mu_);
  return {budget_,
          used_,
          blocks_,
          refused_full_,
          allocation_failures_,
          device_copies(),
          std::min(budget_, pages_->ready_bytes()),
          spills_,
          spill_failures_,
          bases_dropped_};
}

bool RamTier::make_room(uint64_t bytes, const std::atomic<bool>* cancel) {
  if (round_to_pages(bytes) > budget_) return false;  // no spill would make it fit
  RoomMade made;
  const bool fit = holders_.make_room([&] { return fits(bytes); }, cancel, made);
  MutexLock lock(mu_);
  spills_ += made.moved;
  bases_dropped_ += made.bases_dropped;
  spill_failures_ += made.failures;
  return fit;
}

void RamTier::give_back(std::byte* data, uint64_t mapped) {
  pages_->unmap(data, mapped);
  MutexLock lock(mu_);
  used_ -= mapped;
  --blocks_;
}

}  // namespace siesta
