// ServerConfig: everything the command line decides, after parsing and validation. The flag
// parser (server_flags.h) fills it; the app and the routes read it, so neither depends on the
// other's details. Defaults here are the defaults `--help` and the README document.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compute/kernels.h"
#include "core/offload/offload_config.h"
#include "core/offload/ram_tier.h"
#include "engine/session_table.h"
#include "runtime/backend_kind.h"

namespace siesta::server {

inline constexpr uint64_t kDefaultMaxBodyBytes = 1u << 20;  // 1 MiB of JSON per request
inline constexpr const char* kApiKeyEnvironmentVariable = "SIESTA_API_KEY";
// Conversations a server with idle offload keeps when --max-sessions is not given: enough for
// a team sharing one server, each user's history kept between turns.
inline constexpr uint32_t kDefaultMaxSessionsWithOffload = 256;

struct ServerConfig {
  std::string host = "127.0.0.1";  // loopback by default
  int port = 8080;                 // 0: the OS picks a free port (printed once bound)
  runtime::BackendKind backend = runtime::BackendKind::kAuto;

  // The model: --model synthetic:<size>, --ctx N (default: the size's), --kv-type.
  std::string model = "synthetic:small";
  // --alias NAME: the model's id in API answers and GET /v1/models; empty: the model's name.
  std::string alias;
  // --n-predict N: the tokens a generation asks for when its request names none (OpenAI's
  // max_tokens, llama-server's n_predict); -1: until a stop string or the context is full, as
  // llama-server's default.
  int64_t n_predict = -1;
  std::optional<uint32_t> context;
  std::optional<KvType> kv_type;

  // --cache-idle-seconds, --cache-expire-seconds, --cache-disk-dir, --cache-encrypt on|off
  // (off: digests instead of AES-GCM), --cache-delta-saves N (saves that write only what
  // changed since the one before), --cache-ram-mib N (the RAM tier's budget; by default the
  // smaller of 8 GiB and a quarter of the machine's memory; 0: off).
  // --cache-disk-max-mib N: the snapshot directory's budget; unset: half the filesystem's free
  // space at start (main resolves it into offload.disk_max_bytes).
  std::optional<uint64_t> disk_max_bytes;
  OffloadConfig offload = [] {
    OffloadConfig defaults;
    defaults.ram_bytes = default_ram_tier_bytes();
    return defaults;
  }();

  // --cache-persist on|off: conversations survive a restart (off by default); --cache-key-file
  // FILE (required with it: the snapshot key, made 0600 when missing); --cache-exit-save-seconds
  // N: the time a stop may spend putting conversations on disk.
  bool persist = false;
  std::string key_file;
  int64_t exit_save_seconds = 30;

  // --slot-save-path DIR: where POST /slots/0?action=save|restore|erase keep their files;
  // empty: those actions answer 501 (llama-server's answer) with a message naming the flag.
  std::string slot_save_path;
  // --no-slots: GET /slots and POST /slots/{id} answer 501, as llama-server's --no-slots.
  bool slots_endpoints = true;
  // --no-webui: no page at / (404), as llama-server's --no-webui.
  bool webui = true;

  // --api-key KEY, or the SIESTA_API_KEY environment variable when the flag is absent;
  // empty: no authentication (the server then listens on loopback unless --host says
  // otherwise, and says so at start-up).
  std::string api_key;

  // --cors-origin ORIGIN, repeatable: the origins whose browser pages may call the server
  // across origins (request_policy.h), each as a browser sends it in its Origin header:
  // "scheme://host[:port]", scheme and host in lower case, no default port. Empty: none, and
  // every cross-origin write from a browser is refused.
  std::vector<std::string> cors_origins;

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
  // --max-sessions N: conversations kept, resident or offloaded (P..4096); unset: with idle
  // offload on, kDefaultMaxSessionsWithOffload (at least P: a shared server keeps every user's
  // history, the disk budget bounds what that costs), else P. More than P needs idle offload.
  std::optional<uint32_t> max_sessions;
  // --session-match F: the share of a kept history a prompt must repeat to continue it.
  double session_match = engine::kDefaultSessionMatch;

  uint32_t sessions() const {
    if (max_sessions) return *max_sessions;
    return offload.enabled() ? std::max(parallel, kDefaultMaxSessionsWithOffload) : parallel;
  }
  // The model's id in API answers: the alias, or the model's name.
  const std::string& model_id() const { return alias.empty() ? model : alias; }
  // --devices N: devices the model is split over. Only 1; with offload on, more is rejected.
  uint32_t devices = 1;
};

}  // namespace siesta::server
