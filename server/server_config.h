// ServerConfig: everything the command line decides, after parsing and validation.
// Later issues add the engine's and the API's settings here; the flag parser fills it and
// the app reads it, so neither depends on the other's details.
#pragma once

#include <cstdint>
#include <string>

#include "core/offload_config.h"
#include "server/backend_kind.h"

namespace siesta::server {

struct ServerConfig {
  std::string host = "127.0.0.1";  // loopback by default: no endpoint is authenticated yet
  int port = 8080;                 // 0: the OS picks a free port (printed once bound)
  BackendKind backend = BackendKind::kAuto;
  OffloadConfig offload;
};

}  // namespace siesta::server
