// Mutex and MutexLock: std::mutex and std::unique_lock with the thread-safety annotations
// (core/base/thread_annotations.h), so that clang checks every SIESTA_GUARDED_BY member is
// touched only with its mutex held. libstdc++'s std::mutex carries no annotations.
//
// Waiting: MutexLock::wait(cv, predicate) is std::condition_variable::wait on the held lock,
// wait_for(cv, timeout, predicate) its bounded form; the predicate runs with the mutex held
// (annotate a lambda that reads guarded members with SIESTA_REQUIRES(mu) after its parameter
// list). wait(cv) and wait_for(cv, timeout) wait for one notification (or a spurious wake-up)
// without a predicate, for loops that decide again on every wake-up.
//
// Thread rule: as std::mutex: any thread; not recursive; unlock on the thread that locked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/base/thread_annotations.h"

namespace siesta {

class SIESTA_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() SIESTA_ACQUIRE() { mu_.lock(); }
  void unlock() SIESTA_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, except while wait() waits or between unlock()
// and lock().
class SIESTA_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SIESTA_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() SIESTA_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For slow work or callbacks that must run without the mutex (REQUIRES: held).
  void unlock() SIESTA_RELEASE() { lock_.unlock(); }
  // REQUIRES: not held (after unlock()).
  void lock() SIESTA_ACQUIRE() { lock_.lock(); }

  // Waits on `cv` until `done()` is true; the mutex is held whenever `done` runs and on return.
  template <typename Predicate>
  void wait(std::condition_variable& cv, Predicate done) {
    cv.wait(lock_, std::move(done));
  }
  // As wait(cv, done), for at most `timeout`. Returns done()'s last value (false: timed out).
  template <typename Rep, typename Period, typename Predicate>
  bool wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout,
                Predicate done) {
    return cv.wait_for(lock_, timeout, std::move(done));
  }
  // Waits for one notification of `cv` (or a spurious wake-up); the mutex is held on return.
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  // As wait(cv), for at most `timeout`.
  template <typename Rep, typename Period>
  void wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout) {
    (void)cv.wait_for(lock_, timeout);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace siesta
