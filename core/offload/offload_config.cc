#include "core/offload/offload_config.h"

#include <string>
#include <string_view>

namespace siesta {
namespace {

Status check_range(std::string_view flag, int64_t value) {
  if (value >= 0 && value <= kMaxOffloadSeconds) return Status::Ok();
  return InvalidArgument(std::string(flag) + " (" + std::to_string(value) +
                         ") must be between 0 and " + std::to_string(kMaxOffloadSeconds));
}

}  // namespace

Status validate_offload_config(const OffloadConfig& config) {
  SIESTA_RETURN_IF_ERROR(check_range("--cache-idle-seconds", config.idle_seconds));
  SIESTA_RETURN_IF_ERROR(check_range("--cache-expire-seconds", config.expire_seconds));
  if (!config.enabled()) return Status::Ok();
  if (config.expire_seconds <= config.idle_seconds) {
    return InvalidArgument("--cache-expire-seconds (" + std::to_string(config.expire_seconds) +
                           ") must be greater than --cache-idle-seconds (" +
                           std::to_string(config.idle_seconds) + ")");
  }
  if (config.disk_dir.empty()) {
    return InvalidArgument("--cache-disk-dir is required when --cache-idle-seconds is not 0");
  }
  return Status::Ok();
}

}  // namespace siesta
