#include "core/offload/offload_config.h"

#include <string>

namespace siesta {
namespace {

bool in_range(int64_t seconds) { return seconds >= 0 && seconds <= kMaxOffloadSeconds; }

std::optional<OffloadConfigProblem> find_times_problem(int64_t idle, int64_t expire) {
  if (!in_range(idle))
    return OffloadConfigProblem{OffloadConfigRule::kIdleOutOfRange, idle, expire};
  if (!in_range(expire)) {
    return OffloadConfigProblem{OffloadConfigRule::kExpireOutOfRange, idle, expire};
  }
  if (offload_enabled(idle) && expire <= idle) {
    return OffloadConfigProblem{OffloadConfigRule::kExpireNotAfterIdle, idle, expire};
  }
  return std::nullopt;
}

}  // namespace

std::optional<OffloadConfigProblem> find_offload_config_problem(const OffloadConfig& config) {
  if (auto problem = find_times_problem(config.idle_seconds, config.expire_seconds)) {
    return problem;
  }
  if (config.enabled() && config.disk_dir.empty()) {
    return OffloadConfigProblem{OffloadConfigRule::kDirectoryMissing, config.idle_seconds,
                                config.expire_seconds};
  }
  return std::nullopt;
}

std::string offload_config_problem_text(const OffloadConfigProblem& problem) {
  const std::string range = "0.." + std::to_string(kMaxOffloadSeconds) + " seconds";
  switch (problem.rule) {
    case OffloadConfigRule::kIdleOutOfRange:
      return "the idle time must be " + range + ", got " + std::to_string(problem.idle_seconds);
    case OffloadConfigRule::kExpireOutOfRange:
      return "the expiry must be " + range + ", got " + std::to_string(problem.expire_seconds);
    case OffloadConfigRule::kExpireNotAfterIdle:
      return "the expiry (" + std::to_string(problem.expire_seconds) +
             " s) must be greater than the idle time (" + std::to_string(problem.idle_seconds) +
             " s)";
    case OffloadConfigRule::kDirectoryMissing:
      return "a snapshot directory is required when the idle time is not 0";
  }
  return "the offload settings are invalid";
}

Status validate_offload_config(const OffloadConfig& config) {
  if (auto problem = find_offload_config_problem(config)) {
    return InvalidArgument(offload_config_problem_text(*problem));
  }
  return Status::Ok();
}

Status validate_offload_times(int64_t idle_seconds, int64_t expire_seconds) {
  if (auto problem = find_times_problem(idle_seconds, expire_seconds)) {
    return InvalidArgument(offload_config_problem_text(*problem));
  }
  return Status::Ok();
}

}  // namespace siesta
