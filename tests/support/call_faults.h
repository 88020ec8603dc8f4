// CallFaults: which calls of an interposed library function fail, for the test files that
// define a libc or OpenSSL function themselves (extern "C", in the test binary, so the
// product's static libraries bind to it) to make a call fail that no real condition in a
// test makes fail. The interposed function asks `fails(name)` on every call: false forwards
// to the real function (dlsym(RTLD_NEXT), real_function()), true makes it fail as that
// function fails (the file that interposes it decides how: -1 and errno for libc, 0 or a null
// pointer for OpenSSL).
//
// A ScopedCallFault arms one plan ("the nth call of `function` from now, and every later one
// when sticky") until it is destroyed; describe() names it for the test's trace, and every
// test that injects one should say it (SCOPED_TRACE). Calls are counted from the arming, on
// every thread (the snapshot pipeline seals on its workers), so a plan is armed around the
// one call under test and nothing else the test does.
//
// Thread rule: arming and disarming on the test's thread while nothing else runs the
// function; fails() from any thread.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace siesta::test_util {

struct CallFault {
  std::string_view function;  // e.g. "fstat", "EVP_EncryptUpdate"
  uint64_t nth_call = 1;      // 1-based, counted from the arming
  bool sticky = false;        // every later call fails too
  int error = 0;              // what errno says after a failing libc call (0: unchanged)
  long result = -1;           // what a failing libc call returns (pwrite: 0 is "wrote nothing")

  std::string describe() const {
    std::string text = "injected: call " + std::to_string(nth_call) + (sticky ? " and later" : "") +
                       " of " + std::string(function) + " fails";
    if (error != 0) text += std::string(" (errno ") + ::strerrorname_np(error) + ")";
    if (result != -1) text += ", returning " + std::to_string(result);
    return text;
  }
};

namespace call_faults_internal {
struct Armed {
  std::mutex mutex;  // guards plan and calls (the pipeline's workers call in concurrently)
  std::atomic<bool> armed{false};
  CallFault plan;
  uint64_t calls = 0;
  uint64_t fired = 0;
};
inline Armed& armed() {
  static Armed* state = new Armed;  // never destroyed: interposed calls may come at exit
  return *state;
}
}  // namespace call_faults_internal

// Whether any plan is armed (cheap: what an interposed function asks before anything else).
inline bool armed_now() {
  return call_faults_internal::armed().armed.load(std::memory_order_acquire);
}

// Whether this call of `function` must fail (counts it if a plan for it is armed).
inline bool fails(std::string_view function) {
  call_faults_internal::Armed& state = call_faults_internal::armed();
  if (!state.armed.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(state.mutex);
  if (!state.armed.load(std::memory_order_relaxed) || state.plan.function != function) {
    return false;
  }
  const uint64_t call = ++state.calls;
  const bool fire =
      call == state.plan.nth_call || (state.plan.sticky && call > state.plan.nth_call);
  if (fire) ++state.fired;
  return fire;
}

// The armed plan (for the failing call's errno and result).
inline CallFault armed_fault() {
  call_faults_internal::Armed& state = call_faults_internal::armed();
  std::lock_guard lock(state.mutex);
  return state.plan;
}

class ScopedCallFault {
 public:
  explicit ScopedCallFault(CallFault fault) {
    call_faults_internal::Armed& state = call_faults_internal::armed();
    std::lock_guard lock(state.mutex);
    state.plan = fault;
    state.calls = 0;
    state.fired = 0;
    state.armed.store(true, std::memory_order_release);
  }
  ~ScopedCallFault() { call_faults_internal::armed().armed.store(false); }
  ScopedCallFault(const ScopedCallFault&) = delete;
  ScopedCallFault& operator=(const ScopedCallFault&) = delete;

  // How many calls failed so far: a test checks it to know its fault was reached.
  uint64_t fired() const {
    call_faults_internal::Armed& state = call_faults_internal::armed();
    std::lock_guard lock(state.mutex);
    return state.fired;
  }
  // How many calls of the function were made since the arming, failed ones included (a plan
  // whose nth_call is never reached counts what a clean run calls).
  uint64_t calls() const {
    call_faults_internal::Armed& state = call_faults_internal::armed();
    std::lock_guard lock(state.mutex);
    return state.calls;
  }
};

// A plan that never fires: arm it to count the calls of `function` a step makes.
inline CallFault counting(std::string_view function) {
  return {.function = function, .nth_call = UINT64_MAX, .error = 0};
}

// The next definition of `name` after the test binary's own (libc's, or the sanitizer's
// interceptor in front of it). Aborts when there is none: nothing would work without it.
template <class Function>
Function* real_function(const char* name) {
  void* symbol = ::dlsym(RTLD_NEXT, name);
  if (symbol == nullptr) std::abort();
  return reinterpret_cast<Function*>(symbol);
}

}  // namespace siesta::test_util
