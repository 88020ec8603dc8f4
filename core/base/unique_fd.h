// UniqueFd: owns one file descriptor and closes it exactly once.
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
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the current descriptor (if any) and takes `fd`. Returns close()'s result, 0 if
  // nothing was closed.
  int reset(int fd = -1) {
    int result = 0;
    if (fd_ >= 0) result = ::close(fd_);
    fd_ = fd;
    return result;
  }

 private:
  int fd_ = -1;
};

}  // namespace siesta
