// ServerConfig: everything the command line decides, after parsing and validation. The flag
// parser (server_flags.h) fills it; the app and the routes read it, so neither depends on the
// other's details. Defaults here are the defaults `--help` and the README document.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compute/kernels.h"
#include "core/offload/offload_config.h"
#include "runtime/backend_kind.h"
#include "runtime/offload_settings.h"

namespace siesta::server {

inline constexpr uint64_t kDefaultMaxBodyBytes = 1u << 20;  // 1 MiB of JSON per request
inline constexpr const char* kApiKeyEnvironmentVariable = "SIESTA_API_KEY";

struct ServerConfig {
  std::string host = "127.0.0.1";  // loopback by default
  int port = 8080;                 // 0: the OS picks a free port (printed once bound)
  runtime::BackendKind backend = runtime::BackendKind::kAuto;

  // The model: --model synthetic:<size>, --ctx N (default: the size's), --kv-type.
  std::string model = "synthetic:small";
  std::optional<uint32_t> context;
  std::optional<KvType> kv_type;

  OffloadConfig offload;      // --cache-idle-seconds, --cache-expire-seconds, --cache-disk-dir
  bool cache_encrypt = true;  // --cache-encrypt on|off (off: digests instead of AES-GCM)
  // --cache-delta-saves N: saves that write only what changed since the one before (0..64).
  uint32_t cache_delta_saves = runtime::kDefaultDeltaSegments;

  // --slot-save-path DIR: where POST /slots/0?action=save|restore|erase keep their files;
  // empty: those actions answer 400 with a message naming the flag.
  std::string slot_save_path;

  // --api-key KEY, or the SIESTA_API_KEY environment variable when the flag is absent;
  // empty: no authentication (the server then listens on loopback unless --host says
  // otherwise, and says so at start-up).
  std::string api_key;

  uint64_t max_body_bytes = kDefaultMaxBodyBytes;  // --max-body-bytes N

  // --http-max-connections N: client connections open at once (idle, sending, being
  // answered); one more is answered 503 with Retry-After and closed (connection_loop.h).
  uint32_t http_max_connections = 512;
  // --http-request-timeout-seconds N: the time a client has to send a request's head (from
  // its connection or its previous answer), and again its body; also the longest one write
  // of an answer waits for a client that does not read.
  uint32_t http_request_timeout_seconds = 10;

  // --parallel P: sessions resident on the device at once, each with the full context.
  uint32_t parallel = 1;
  // --max-sessions N: conversations kept, resident or offloaded (P..4096); unset: P. More
  // than P needs idle offload on.
  std::optional<uint32_t> max_sessions;
  // --session-match F: the share of a kept history a prompt must repeat to continue it.
  double session_match = 0.5;

  uint32_t sessions() const { return max_sessions.value_or(parallel); }
  // --devices N: devices the model is split over. Only 1; with offload on, more is rejected.
  uint32_t devices = 1;
};

}  // namespace siesta::server
