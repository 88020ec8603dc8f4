#include "core/memory/host_vmm.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/base/os_error.h"
#include "core/base/round_up.h"
#include "core/memory/host_address_space.h"

namespace siesta {

size_t HostVmm::page_size() { return host_address_space::page_size(); }

Result<HostRange> HostVmm::reserve(size_t bytes) {
  if (bytes == 0) return InvalidArgument("HostVmm::reserve of 0 bytes");
  const size_t page = page_size();
  if (bytes > SIZE_MAX - page) return OutOfMemory("HostVmm::reserve of " + std::to_string(bytes));
  const size_t rounded = round_up(bytes, page);
  SIESTA_ASSIGN_OR_RETURN(std::byte * base, host_address_space::reserve(rounded, page));
  reserved_.fetch_add(rounded);
  return HostRange(this, base, rounded);
}

HostRange::HostRange(HostRange&& other) noexcept { *this = std::move(other); }

HostRange& HostRange::operator=(HostRange&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    base_ = other.base_;
    size_ = other.size_;
    committed_ = other.committed_;
    other.owner_ = nullptr;
    other.base_ = nullptr;
    other.size_ = 0;
    other.committed_ = false;
  }
  return *this;
}

HostRange::~HostRange() { reset(); }

void HostRange::reset() {
  if (owner_ == nullptr) return;
  host_address_space::unreserve(base_, size_);
  if (committed_) owner_->committed_.fetch_sub(size_);
  owner_->reserved_.fetch_sub(size_);
  owner_ = nullptr;
  base_ = nullptr;
  size_ = 0;
  committed_ = false;
}

Status HostRange::commit() {
  if (owner_ == nullptr) return FailedPrecondition("commit of a moved-from HostRange");
  if (committed_) return FailedPrecondition("HostRange is already committed");
  SIESTA_RETURN_IF_ERROR(owner_->injected_fault(HostVmmCall::kCommit, *this));
  // Fresh anonymous pages replace the PROT_NONE reservation in one call. No MAP_NORESERVE:
  // the kernel accounts for the pages now, so a shortage shows here as ENOMEM instead of as
  // a SIGBUS or the OOM killer on first touch.
  void* got =
      mmap(base_, size_, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    // A failed MAP_FIXED mmap may already have unmapped the old range; put the PROT_NONE
    // reservation back so that the addresses stay ours.
    host_address_space::drop(base_, size_).ignore();  // best effort; the error below matters
    Status status = status_from_errno(
        err, "HostRange::commit of " + std::to_string(size_) + " bytes (mmap MAP_FIXED)");
    if (status.code() != StatusCode::kOutOfMemory) status = OutOfMemory(status.message());
    return status;
  }
  committed_ = true;
  owner_->committed_.fetch_add(size_);
  return Status::Ok();
}

Status HostRange::release() {
  if (owner_ == nullptr) return FailedPrecondition("release of a moved-from HostRange");
  if (!committed_) return FailedPrecondition("HostRange is not committed");
  SIESTA_RETURN_IF_ERROR(owner_->injected_fault(HostVmmCall::kRelease, *this));
  SIESTA_RETURN_IF_ERROR(host_address_space::drop(base_, size_));
  committed_ = false;
  owner_->committed_.fetch_sub(size_);
  return Status::Ok();
}

}  // namespace siesta
