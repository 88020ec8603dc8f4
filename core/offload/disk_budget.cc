#include "core/offload/disk_budget.h"

#include <algorithm>
#include <string>
#include <utility>

namespace siesta {

DiskBudget::Space& DiskBudget::Space::operator=(Space&& other) noexcept {
  if (this != &other) {
    set(0);
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DiskBudget::Space::set(uint64_t bytes) {
  if (budget_ == nullptr) return;
  budget_->adjust(bytes_, bytes);
  bytes_ = bytes;
}

DiskBudget::Space DiskBudget::Space::split(uint64_t bytes) {
  const uint64_t moved = std::min(bytes, bytes_);
  bytes_ -= moved;  // the account stays the same: the bytes move to the new Space
  return Space(budget_, moved);
}

void DiskBudget::adjust(uint64_t from, uint64_t to) {
  MutexLock lock(mu_);
  used_ = used_ - from + to;
}

bool DiskBudget::fits(uint64_t bytes) const {
  MutexLock lock(mu_);
  return bytes <= budget_ && used_ <= budget_ - bytes;
}

Result<DiskBudget::Space> DiskBudget::reserve(uint64_t bytes, const std::atomic<bool>* cancel) {
  const auto refuse = [&](const std::string& why) -> Status {
    MutexLock lock(mu_);
    ++refused_;
    return NoSpace("the snapshot directory's budget (--cache-disk-max-mib, " +
                   std::to_string(budget_) + " bytes) has no room for " + std::to_string(bytes) +
                   " bytes: " + why);
  };
  if (bytes > budget_) return refuse("larger than the whole budget");
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      // Checked and charged at once: two saves never both take the last room.
      MutexLock lock(mu_);
      if (used_ <= budget_ - bytes) {
        used_ += bytes;
        return Space(this, bytes);
      }
    }
    if (attempt == 1) break;
    RoomMade made;
    holders_.make_room([&] { return fits(bytes); }, cancel, made);
    MutexLock lock(mu_);
    deleted_for_room_ += made.deleted;
    delete_failures_ += made.failures;
  }
  return refuse("no conversation's snapshot could be deleted for it");
}

Result<DiskBudget::Space> DiskBudget::reserve_free(uint64_t bytes) {
  MutexLock lock(mu_);
  if (bytes > budget_ || used_ > budget_ - bytes) {
    return NoSpace("the snapshot directory's budget (--cache-disk-max-mib, " +
                   std::to_string(budget_) + " bytes, " + std::to_string(used_) +
                   " used) has no free room for " + std::to_string(bytes) + " bytes");
  }
  used_ += bytes;
  return Space(this, bytes);
}

DiskBudgetStats DiskBudget::stats() const {
  MutexLock lock(mu_);
  return {budget_, used_, deleted_for_room_, delete_failures_, refused_};
}

uint64_t default_disk_budget_bytes(uint64_t free_bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return std::max<uint64_t>(kMiB, free_bytes / 2 / kMiB * kMiB);
}

}  // namespace siesta
