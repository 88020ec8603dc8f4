#include "runtime/offload_settings.h"

#include <utility>

namespace siesta::runtime {

OffloaderOptions offloader_options(const OffloadSettings& settings, LogLine log) {
  OffloaderOptions options;
  options.config = settings.config;
  options.on_fatal = settings.on_fatal;
  options.log = std::move(log);
  return options;
}

}  // namespace siesta::runtime
