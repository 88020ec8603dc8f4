// Status and Result<T>: how every fallible call in siesta reports failure.
//
// OS, driver and library errors are mapped into these named codes once, at the boundary
// where they happen (see core/base/os_error.h); everything above the boundary branches on the
// code, never on a message. Messages are for people: they name the operation, the object
// and the cause. Exceptions never cross a module boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace siesta {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,            // the thing asked for does not exist (file, session, device)
  kCorrupt,             // bytes exist but fail validation (seal, digest, grammar)
  kTruncated,           // fewer bytes than the format promised
  kExpired,             // valid once, but its time has passed
  kForeign,             // valid, but belongs to another process, session or layout
  kIoError,             // the storage failed (EIO, failed sync, failed rename...)
  kNoSpace,             // the storage is full (ENOSPC, quota, free-space check)
  kOutOfMemory,         // device or host memory could not be had; retryable later
  kCancelled,           // the caller asked the operation to stop
  kInvalidArgument,     // the input can never be valid
  kUnsupported,         // valid input this build or device cannot serve
  kFailedPrecondition,  // misuse: the object is not in a state that allows the call
  kDeviceError,         // the device or its driver failed; not retryable
  kInternal,            // a broken invariant inside siesta
  kUnavailable,         // busy now (every session in use, a full queue); retry later
};

// Stable lower-case name of a code ("not_found", "out_of_memory"...), used in logs,
// metrics labels and JSON.
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<code name>: <message>", or "ok".
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>"; the code is kept.
  Status with_context(std::string_view context) const;

  // Marks a status as deliberately ignored (destructors, best-effort cleanup).
  void ignore() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// One factory per code keeps call sites short: `return NotFound("snapshot " + path);`
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Truncated(std::string m) { return {StatusCode::kTruncated, std::move(m)}; }
inline Status Expired(std::string m) { return {StatusCode::kExpired, std::move(m)}; }
inline Status Foreign(std::string m) { return {StatusCode::kForeign, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
inline Status OutOfMemory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status DeviceError(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none. Never holds an OK status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  // REQUIRES: !status.ok(). An OK status without a value becomes kInternal.
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : state_(status.ok() ? Internal("Result constructed from an OK status") : std::move(status)) {
  }

  bool ok() const { return std::holds_alternative<T>(state_); }

  // The error, or OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  // REQUIRES: ok(). Checked: calling these on an error aborts with the status printed.
  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(state_) : std::move(fallback); }

 private:
  T& checked();
  std::variant<T, Status> state_;
};

[[noreturn]] void die_on_bad_result_access(const Status& status);

template <class T>
T& Result<T>::checked() {
  if (!ok()) die_on_bad_result_access(std::get<Status>(state_));
  return std::get<T>(state_);
}

}  // namespace siesta

#define SIESTA_CONCAT_INNER_(a, b) a##b
#define SIESTA_CONCAT_(a, b) SIESTA_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define SIESTA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::siesta::Status siesta_status_ = (expr);        \
    if (!siesta_status_.ok()) return siesta_status_; \
  } while (0)

// `SIESTA_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result, or returns its error.
// (`lhs` is a declaration and `result` a name: neither can be parenthesized.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SIESTA_ASSIGN_OR_RETURN(lhs, expr) \
  SIESTA_ASSIGN_OR_RETURN_IMPL_(SIESTA_CONCAT_(siesta_result_, __LINE__), lhs, expr)
#define SIESTA_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                  \
  if (!result.ok()) return result.status();              \
  lhs = std::move(result).value()
// NOLINTEND(bugprone-macro-parentheses)
