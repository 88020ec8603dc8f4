#include "runtime/offload_settings.h"

#include <utility>

namespace siesta::runtime {

OffloaderOptions offloader_options(const OffloadSettings& settings, LogLine log) {
  OffloaderOptions options;
  options.idle_seconds = settings.config.idle_seconds;
  options.expire_seconds = settings.config.expire_seconds;
  options.encrypt = settings.encrypt;
  options.max_delta_segments = settings.delta_segments;
  options.on_fatal = settings.on_fatal;
  options.log = std::move(log);
  return options;
}

}  // namespace siesta::runtime
