#include "core/base/status.h"

#include <cstdio>
#include <cstdlib>

namespace siesta {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kTruncated: return "truncated";
    case StatusCode::kExpired: return "expired";
    case StatusCode::kForeign: return "foreign";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kNoSpace: return "no_space";
    case StatusCode::kOutOfMemory: return "out_of_memory";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kDeviceError: return "device_error";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUnavailable: return "unavailable";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(status_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

void die_on_bad_result_access(const Status& status) {
  // About to abort: nothing useful can be done if stderr fails too.
  (void)std::fprintf(stderr, "siesta: value() called on a Result holding an error: %s\n",
                     status.to_string().c_str());
  std::abort();
}

}  // namespace siesta
