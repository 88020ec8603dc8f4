// UniqueFd: owns one file descriptor and closes it when destroyed. The simulator's
// "physical allocations" are memfds, so every one of them is held by one of these.
#pragma once

#include <unistd.h>

#include <utility>

namespace siesta {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    // close() may report EINTR/EIO, but the descriptor is gone either way on Linux and a
    // memfd has nothing to flush, so there is nothing useful to do with its result.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace siesta
