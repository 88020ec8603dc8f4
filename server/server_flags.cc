#include "server/server_flags.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/base/log_text.h"
#include "core/offload/offload_config.h"
#include "core/offload/offloader.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "engine/session_table.h"

#ifndef SIESTA_VERSION
#define SIESTA_VERSION "unknown"
#endif

namespace siesta::server {
namespace {

constexpr int64_t kMaxPort = 65535;
constexpr int64_t kMinBodyBytes = 1024;
constexpr int64_t kMaxBodyBytes = int64_t{64} << 20;
constexpr int64_t kMaxParallel = engine::kMaxParallel;
constexpr int64_t kMaxDevices = 64;
constexpr int64_t kMaxSessions = engine::kMaxSessions;
constexpr int64_t kMaxConnections = 65536;
constexpr int64_t kMaxRequestTimeoutSeconds = 3600;

// "lo..hi", as the help writes a range.
std::string range(int64_t lo, int64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

// A share (--session-match's) as the help writes its default: "0.5", not "0.500000".
std::string share_text(double share) {
  char text[32];
  (void)std::snprintf(text, sizeof text, "%g", share);
  return text;
}

// Strict decimal integer in [lo, hi]; see the grammar in the header.
Result<int64_t> parse_integer(std::string_view flag, std::string_view text, int64_t lo,
                              int64_t hi) {
  const std::string range = std::to_string(lo) + " and " + std::to_string(hi);
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [end, error] = std::from_chars(first, last, value);
  // Out of int64's range: `end` still marks the digits matched, so junk after them is
  // reported as not an integer, and an all-digit text as out of range.
  const bool digits_only = error == std::errc() || error == std::errc::result_out_of_range;
  if (text.empty() || !digits_only || end != last) {
    return InvalidArgument(std::string(flag) + " must be an integer between " + range + ", got " +
                           quote_for_log(text));
  }
  // From here `text` is an optional '-' and digits: safe to echo unquoted.
  if (error == std::errc::result_out_of_range || value < lo || value > hi) {
    return InvalidArgument(std::string(flag) + " (" + std::string(text) + ") must be between " +
                           range);
  }
  return value;
}

// A share in [0, 1]: "0", "1", "0.5", "1.0", ".25" -- digits and at most one point, no sign,
// exponent or spaces.
Result<double> parse_share(std::string_view flag, std::string_view text) {
  const auto refuse = [&] {
    return InvalidArgument(std::string(flag) + " must be a number between 0 and 1, got " +
                           quote_for_log(text));
  };
  if (text.empty() || text.size() > 32 || text == ".") return refuse();
  size_t points = 0;
  for (char c : text) {
    if (c == '.') {
      ++points;
    } else if (c < '0' || c > '9') {
      return refuse();
    }
  }
  if (points > 1) return refuse();
  const double value = std::strtod(std::string(text).c_str(), nullptr);
  if (!(value >= 0 && value <= 1)) return refuse();
  return value;
}

Result<bool> parse_on_off(std::string_view flag, std::string_view text) {
  if (text == "on") return true;
  if (text == "off") return false;
  return InvalidArgument(std::string(flag) + " must be on or off, got " + quote_for_log(text));
}

// The key travels in an HTTP header, so it must be a visible ASCII token. The messages never
// echo it: a key typed into the wrong flag must not land in a log.
Status check_api_key(std::string_view flag, std::string_view key) {
  if (key.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
  for (char c : key) {
    if (c <= 0x20 || c >= 0x7f) {
      return InvalidArgument(std::string(flag) +
                             " must be printable ASCII without spaces (the key is not shown)");
    }
  }
  return Status::Ok();
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// An IPv6 address ("::1", without its brackets) as a browser writes it in an origin (the URL
// standard's serialiser): lower-case hex pieces without leading zeros, the first longest run
// of two or more zero pieces written "::". nullopt when `text` is not an IPv6 address.
std::optional<std::string> ipv6_as_browsers_write_it(std::string_view text) {
  std::array<unsigned char, 16> bytes{};
  if (text.find('%') != std::string_view::npos) return std::nullopt;  // no zone ids in URLs
  if (::inet_pton(AF_INET6, std::string(text).c_str(), bytes.data()) != 1) return std::nullopt;
  std::array<unsigned, 8> pieces{};
  for (size_t i = 0; i < pieces.size(); ++i) {
    pieces[i] = static_cast<unsigned>(bytes[2 * i] << 8) | bytes[2 * i + 1];
  }
  size_t run_start = pieces.size();
  size_t run_length = 1;  // a run must be longer than this to be compressed
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i;
    while (j < pieces.size() && pieces[j] == 0) ++j;
    if (j - i > run_length) {
      run_start = i;
      run_length = j - i;
    }
    i = j == i ? i + 1 : j;
  }
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i == run_start) {
      out += i == 0 ? "::" : ":";
      i += run_length - 1;
      continue;
    }
    char hex[8];
    (void)std::snprintf(hex, sizeof hex, "%x", pieces[i]);
    out += hex;
    if (i + 1 < pieces.size()) out += ':';
  }
  return out;
}

// --cors-origin: an origin as a browser sends it in its Origin header, "scheme://host[:port]".
// A value no browser ever sends is refused rather than left never to match: a scheme other
// than http and https, no host, a path (a trailing slash included), a query, a fragment, user
// information, a port outside 1..65535, a host with characters a browser would have encoded.
// "*" is refused (name each origin: a wildcard would open the server to every page the
// browser visits), and so is "null" (the opaque origin any page can give itself in a
// sandboxed frame). The result is what the browser sends: scheme and host in lower case, the
// port in decimal without leading zeros and left out when it is the scheme's default, an IPv6
// address in its canonical form.
Result<std::string> parse_cors_origin(std::string_view flag, std::string_view text) {
  const auto refuse = [&](const std::string& rule) {
    return InvalidArgument(std::string(flag) + " " + quote_for_log(text) + " " + rule);
  };
  if (text.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
  if (text == "*") {
    return refuse(
        "is refused: name each origin whose pages may call the server (scheme://host[:port]); "
        "a wildcard would let every page the browser visits use the server and read its "
        "answers");
  }
  if (text == "null") {
    return refuse(
        "is refused: the opaque origin null is sent by sandboxed frames and local files, and "
        "any page can give itself one");
  }
  const size_t separator = text.find("://");
  if (separator == std::string_view::npos) {
    return refuse("must be scheme://host[:port], for example http://localhost:3000");
  }
  const std::string scheme = lower(text.substr(0, separator));
  if (scheme != "http" && scheme != "https") return refuse("must use the scheme http or https");
  const std::string_view authority = text.substr(separator + 3);
  if (const size_t rest = authority.find_first_of("/?#"); rest != std::string_view::npos) {
    if (authority.substr(rest) == "/") {
      return refuse("must not end in a slash: a browser sends " +
                    quote_for_log(text.substr(0, text.size() - 1)));
    }
    return refuse(std::string("must not hold a ") +
                  (authority[rest] == '/'   ? "path"
                   : authority[rest] == '?' ? "query"
                                            : "fragment") +
                  ": an origin is scheme://host[:port]");
  }
  if (authority.find('@') != std::string_view::npos) {
    return refuse("must not hold user information (user@): a browser never sends it");
  }
  std::string host;
  std::optional<std::string_view> port;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    std::optional<std::string> address;
    if (close != std::string_view::npos)
      address = ipv6_as_browsers_write_it(authority.substr(1, close - 1));
    if (!address) return refuse("must have an IPv6 address in brackets, such as [::1]");
    host = "[" + *address + "]";
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return refuse("must have nothing but :port after ]");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    host = lower(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
    if (host.empty()) return refuse("has no host");
    const bool plain = std::all_of(host.begin(), host.end(), [](unsigned char c) {
      return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_';
    });
    if (!plain) {
      return refuse(
          "has a host a browser never sends: letters, digits, '-', '.' and '_' only (an "
          "international name in its xn-- form)");
    }
  }
  std::string origin = scheme + "://" + host;
  if (port) {
    int number = 0;
    const auto [end, error] = std::from_chars(port->data(), port->data() + port->size(), number);
    if (port->empty() || error != std::errc() || end != port->data() + port->size() || number < 1 ||
        number > kMaxPort) {
      return refuse("must have a port between 1 and " + std::to_string(kMaxPort));
    }
    if (number != (scheme == "https" ? 443 : 80)) origin += ":" + std::to_string(number);
  }
  return origin;
}

// One flag that takes a value. `apply` stores the parsed value into the config; `fallback`
// describes the default as --help prints it, read from a default-constructed ServerConfig so
// that the help text cannot drift from the code.
struct FlagSpec {
  std::string_view name;
  std::string_view value_name;
  std::string help;  // its ranges written from the constants that check them
  Status (*apply)(std::string_view flag, std::string_view value, ServerConfig& config);
  std::string (*fallback)(const ServerConfig& defaults);
};

const std::vector<FlagSpec>& flag_specs() {
  static const std::vector<FlagSpec> specs = {
      {"--host", "HOST", "address to listen on; without --api-key, keep it a loopback address",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         if (value.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
         config.host = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return d.host; }},
      {"--port", "N", "TCP port to listen on; 0 picks a free port",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t port, parse_integer(flag, value, 0, kMaxPort));
         config.port = static_cast<int>(port);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.port); }},
      {"--backend", "sim|cuda|auto",
       "device memory: the host simulator, CUDA VMM, or CUDA when a GPU is usable",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         std::optional<runtime::BackendKind> kind = runtime::parse_backend_kind(value);
         if (!kind) {
           return InvalidArgument(std::string(flag) + " must be sim, cuda or auto, got " +
                                  quote_for_log(value));
         }
         config.backend = *kind;
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::string(runtime::backend_kind_name(d.backend)); }},
      {"--cache-idle-seconds", "N",
       "offload the session after N idle seconds (" + range(0, kMaxOffloadSeconds) +
           "; 0 = offload off)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.offload.idle_seconds,
                                 parse_integer(flag, value, 0, kMaxOffloadSeconds));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.offload.idle_seconds); }},
      {"--cache-expire-seconds", "N",
       "delete an offloaded snapshot after N seconds (" + range(0, kMaxOffloadSeconds) +
           "; must exceed the idle time)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.offload.expire_seconds,
                                 parse_integer(flag, value, 0, kMaxOffloadSeconds));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.offload.expire_seconds); }},
      {"--cache-disk-dir", "DIR",
       "private directory for snapshots (created 0700); required when offload is on",
       [](std::string_view, std::string_view value, ServerConfig& config) {
         config.offload.disk_dir = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("none"); }},
      {"--cache-encrypt", "on|off",
       "seal snapshot chunks with AES-256-GCM under a key held only in memory; off: a digest "
       "per chunk (detects damage, not tampering)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.offload.encrypt, parse_on_off(flag, value));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::string(d.offload.encrypt ? "on" : "off"); }},
      {"--cache-delta-saves", "N",
       "after a whole snapshot, up to N saves write only what changed since the save before "
       "(" +
           range(0, kMaxDeltaSegments) + "; 0 = every save writes the whole session)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t deltas, parse_integer(flag, value, 0, kMaxDeltaSegments));
         config.offload.delta_segments = static_cast<uint32_t>(deltas);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.offload.delta_segments); }},
      {"--cache-ram-mib", "N",
       "host memory (MiB) for offloaded sessions' snapshots, shared by all: a snapshot goes "
       "there when it fits (the least recently used ones moving to --cache-disk-dir to make "
       "room), else to --cache-disk-dir (0 = every snapshot on disk; at most the machine's "
       "memory)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         const int64_t machine_mib = static_cast<int64_t>(physical_memory_bytes() >> 20);
         SIESTA_ASSIGN_OR_RETURN(
             int64_t mib, parse_integer(flag, value, 0, machine_mib > 0 ? machine_mib : INT32_MAX));
         config.offload.ram_bytes = static_cast<uint64_t>(mib) << 20;
         return Status::Ok();
       },
       [](const ServerConfig& d) {
         return std::to_string(d.offload.ram_bytes >> 20) + ": min(8192, a quarter of the RAM)";
       }},
      {"--cache-disk-max-mib", "N",
       "the snapshot directory's budget (MiB): the least recently used offloaded conversations' "
       "snapshots are deleted to keep within it (they read their prompt again)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t mib, parse_integer(flag, value, 1, INT32_MAX));
         config.disk_max_bytes = static_cast<uint64_t>(mib) << 20;
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("half the free space at start"); }},
      {"--cache-persist", "on|off",
       "keep conversations across a restart: snapshots sealed under --cache-key-file's key stay "
       "when the server stops (saved within --cache-exit-save-seconds) and the next start with "
       "the same key, model and layout takes them back",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.persist, parse_on_off(flag, value));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::string(d.persist ? "on" : "off"); }},
      {"--cache-key-file", "FILE",
       "the snapshot key for --cache-persist on: 32 bytes, mode 0600, this user's (made when "
       "missing); whoever reads it can read the snapshots",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         if (value.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
         config.key_file = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("none"); }},
      {"--cache-exit-save-seconds", "N",
       "with --cache-persist on, the time a stop may spend saving conversations not on disk yet (" +
           range(0, kMaxExitSaveSeconds) + "; what does not fit is lost)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.exit_save_seconds,
                                 parse_integer(flag, value, 0, kMaxExitSaveSeconds));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.exit_save_seconds); }},
      {"--model", "synthetic:SIZE",
       "the reference model: synthetic:tiny, synthetic:small, synthetic:medium or "
       "synthetic:large (seeded weights, nothing downloaded)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         if (value.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
         config.model = std::string(value);  // judged with --ctx and --kv-type after parsing
         return Status::Ok();
       },
       [](const ServerConfig& d) { return d.model; }},
      {"--alias", "NAME",
       "the model's id in API answers and GET /v1/models (any name a request sends is served)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         if (value.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
         if (value.size() > 256) {
           return InvalidArgument(std::string(flag) + " must be at most 256 bytes");
         }
         config.alias = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("the model's name"); }},
      {"--n-predict", "N",
       "tokens a generation asks for when its request names none (-1: until a stop string or "
       "the context is full, as llama-server)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.n_predict,
                                 parse_integer(flag, value, -1, engine::kMaxContext));
         if (config.n_predict == 0) {
           // A default of no tokens would answer every request without a length empty.
           return InvalidArgument(std::string(flag) + " must be -1 or at least 1, got 0");
         }
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.n_predict); }},
      {"--ctx", "N", "tokens the session holds (" + range(1, engine::kMaxContext) + ")",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t context,
                                 parse_integer(flag, value, 1, engine::kMaxContext));
         config.context = static_cast<uint32_t>(context);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("the model's; small: 2048"); }},
      {"--kv-type", "f32|f16|int8", "element type of the KV cache",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         Result<KvType> type = parse_kv_type(value);
         if (!type.ok()) {
           return InvalidArgument(std::string(flag) + " must be f32, f16 or int8, got " +
                                  quote_for_log(value));
         }
         config.kv_type = *type;
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("the model's; small: f16"); }},
      {"--slot-save-path", "DIR",
       "private directory for POST /slots/0?action=save|restore files; unset: those "
       "actions are refused",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         if (value.empty()) return InvalidArgument(std::string(flag) + " must not be empty");
         config.slot_save_path = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("none"); }},
      {"--no-slots", "", "turn GET /slots and POST /slots/{id} off (they answer 501)",
       [](std::string_view, std::string_view, ServerConfig& config) {
         config.slots_endpoints = false;
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("slots on"); }},
      {"--no-webui", "", "serve no web page at / (it answers 404)",
       [](std::string_view, std::string_view, ServerConfig& config) {
         config.webui = false;
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("page at /"); }},
      {"--api-key", "KEY",
       "require \"Authorization: Bearer KEY\" on every endpoint but /health; when absent, "
       "the SIESTA_API_KEY environment variable; the key is never printed",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_RETURN_IF_ERROR(check_api_key(flag, value));
         config.api_key = std::string(value);
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("none: no authentication"); }},
      {"--cors-origin", "ORIGIN",
       "let pages of ORIGIN (scheme://host[:port], as a browser sends it) call the server from "
       "another origin: their answers carry CORS headers, their writes are allowed and a "
       "preflight needs no key (the request after it does); repeat the flag for each origin; "
       "'*' is refused: a wildcard would let every page the browser visits use the server",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(std::string origin, parse_cors_origin(flag, value));
         std::vector<std::string>& origins = config.cors_origins;
         if (std::find(origins.begin(), origins.end(), origin) == origins.end()) {
           origins.push_back(std::move(origin));
         }
         return Status::Ok();
       },
       [](const ServerConfig&) { return std::string("none: cross-origin writes are refused"); }},
      {"--max-body-bytes", "N",
       "largest request body accepted (" + range(kMinBodyBytes, kMaxBodyBytes) +
           "); a larger one is answered 413",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t bytes,
                                 parse_integer(flag, value, kMinBodyBytes, kMaxBodyBytes));
         config.max_body_bytes = static_cast<uint64_t>(bytes);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.max_body_bytes); }},
      {"--http-max-connections", "N",
       "client connections open at once (" + range(1, kMaxConnections) +
           "); one more is answered 503 with "
           "Retry-After and closed",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t n, parse_integer(flag, value, 1, kMaxConnections));
         config.http_max_connections = static_cast<uint32_t>(n);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.http_max_connections); }},
      {"--http-request-timeout-seconds", "N",
       "seconds a client has to send a request's head, and again its body (" +
           range(1, kMaxRequestTimeoutSeconds) +
           "); "
           "an idle connection is closed after as long, a partial request is answered 408",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t n,
                                 parse_integer(flag, value, 1, kMaxRequestTimeoutSeconds));
         config.http_request_timeout_seconds = static_cast<uint32_t>(n);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.http_request_timeout_seconds); }},
      {"--parallel", "N",
       "sessions resident on the device at once, each with the full --ctx (" +
           range(1, kMaxParallel) + ")",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t n, parse_integer(flag, value, 1, kMaxParallel));
         config.parallel = static_cast<uint32_t>(n);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.parallel); }},
      {"--max-sessions", "N",
       "conversations whose history the server keeps, resident or offloaded (--parallel.." +
           std::to_string(kMaxSessions) +
           "); more than --parallel needs --cache-idle-seconds and --cache-disk-dir",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t n, parse_integer(flag, value, 1, kMaxSessions));
         config.max_sessions = static_cast<uint32_t>(n);
         return Status::Ok();
       },
       [](const ServerConfig&) {
         return std::to_string(kDefaultMaxSessionsWithOffload) + " with offload, else --parallel";
       }},
      {"--session-match", "F",
       "a prompt without prompt_cache_key or id_slot continues the conversation whose history "
       "it repeats the most of, when it repeats at least this share of it (0..1)",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(config.session_match, parse_share(flag, value));
         return Status::Ok();
       },
       [](const ServerConfig& d) { return share_text(d.session_match); }},
      {"--devices", "N",
       "devices the model is split over (" + range(1, kMaxDevices) +
           "); only 1 is implemented, and idle offload "
           "needs 1",
       [](std::string_view flag, std::string_view value, ServerConfig& config) {
         SIESTA_ASSIGN_OR_RETURN(int64_t n, parse_integer(flag, value, 1, kMaxDevices));
         config.devices = static_cast<uint32_t>(n);
         return Status::Ok();
       },
       [](const ServerConfig& d) { return std::to_string(d.devices); }},
  };
  return specs;
}

const FlagSpec* find_flag(std::string_view name) {
  for (const FlagSpec& spec : flag_specs()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// --model with --ctx and --kv-type: the configuration the engine will load, validated now
// so that a bad one is a usage error (exit 2), not a start-up failure.
Status validate_model_flags(const ServerConfig& config) {
  Result<engine::ModelConfig> model =
      engine::model_config_from_spec(config.model, config.context, config.kv_type);
  if (model.ok()) return Status::Ok();
  std::string flags = "--model " + quote_for_log(config.model);
  if (config.context) flags += " --ctx " + std::to_string(*config.context);
  if (config.kv_type) flags += " --kv-type " + std::string(kv_type_name(*config.kv_type));
  return InvalidArgument(flags + ": " + model.status().message());
}

// --devices: the engine serves one device. With idle offload on, more is a combination the
// server this grew from rejects too, so it is named as such. --max-sessions: at least
// --parallel, and more than it only with offload on (an offloaded conversation needs a disk).
Status validate_scale_flags(const ServerConfig& config) {
  if (config.devices > 1) {
    const std::string head = "--devices " + std::to_string(config.devices);
    if (config.offload.enabled()) {
      return InvalidArgument(head +
                             " cannot be used with --cache-idle-seconds: idle offload keeps a "
                             "session's memory on one device");
    }
    return InvalidArgument(head +
                           ": splitting the model over devices is not implemented by this "
                           "engine (use 1)");
  }
  if (config.max_sessions) {
    const std::string head = "--max-sessions " + std::to_string(*config.max_sessions);
    if (*config.max_sessions < config.parallel) {
      return InvalidArgument(head + " must be at least --parallel (" +
                             std::to_string(config.parallel) + ")");
    }
    if (*config.max_sessions > config.parallel && !config.offload.enabled()) {
      return InvalidArgument(head + " (more than --parallel " + std::to_string(config.parallel) +
                             ") needs idle offload: --cache-idle-seconds N and --cache-disk-dir "
                             "DIR keep the conversations that are not on the device");
    }
  }
  return Status::Ok();
}

// Persistence needs offload, AES seals and a key file; a key file means nothing without it.
Status validate_persist_flags(const ServerConfig& config) {
  if (!config.persist) {
    if (!config.key_file.empty()) {
      return InvalidArgument("--cache-key-file is used only with --cache-persist on");
    }
    return Status::Ok();
  }
  if (!config.offload.enabled()) {
    return InvalidArgument("--cache-persist on needs idle offload (--cache-idle-seconds N)");
  }
  if (config.key_file.empty()) {
    return InvalidArgument("--cache-persist on needs --cache-key-file FILE (made when missing)");
  }
  if (!config.offload.encrypt) {
    return InvalidArgument(
        "--cache-persist on needs --cache-encrypt on: a snapshot kept across a restart must be "
        "sealed under the key");
  }
  return Status::Ok();
}

// Core's offload rules, worded with the flags a person changes to fix them.
Status validate_offload_flags(const OffloadConfig& config) {
  const std::optional<OffloadConfigProblem> problem = find_offload_config_problem(config);
  if (!problem) return Status::Ok();
  const std::string idle = std::to_string(problem->idle_seconds);
  const std::string expire = std::to_string(problem->expire_seconds);
  const std::string range = "0 and " + std::to_string(kMaxOffloadSeconds);
  switch (problem->rule) {
    case OffloadConfigRule::kIdleOutOfRange:
      return InvalidArgument("--cache-idle-seconds (" + idle + ") must be between " + range);
    case OffloadConfigRule::kExpireOutOfRange:
      return InvalidArgument("--cache-expire-seconds (" + expire + ") must be between " + range);
    case OffloadConfigRule::kExpireNotAfterIdle:
      return InvalidArgument("--cache-expire-seconds (" + expire +
                             ") must be greater than --cache-idle-seconds (" + idle + ")");
    case OffloadConfigRule::kDirectoryMissing:
      return InvalidArgument("--cache-disk-dir is required when --cache-idle-seconds is not 0");
  }
  return InvalidArgument(offload_config_problem_text(*problem));
}

bool is_help(std::string_view name) { return name == "--help" || name == "-h"; }
bool is_version(std::string_view name) { return name == "--version"; }

}  // namespace

Result<ParsedFlags> parse_server_flags(std::span<const std::string_view> args,
                                       std::optional<std::string_view> env_api_key) {
  ParsedFlags parsed;
  bool api_key_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (!arg.starts_with("-") || arg == "-" || arg == "--") {
      return InvalidArgument("unexpected argument " + quote_for_log(arg) +
                             " (siesta-server takes only flags; see --help)");
    }
    const size_t equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    std::optional<std::string_view> value;
    if (equals != std::string_view::npos) value = arg.substr(equals + 1);

    if (is_help(name) || is_version(name)) {
      if (value) return InvalidArgument(std::string(name) + " takes no value");
      parsed.action = is_help(name) ? ParsedFlags::Action::kHelp : ParsedFlags::Action::kVersion;
      return parsed;
    }
    const FlagSpec* spec = find_flag(name);
    if (spec == nullptr) {
      return InvalidArgument("unknown flag " + quote_for_log(name) + " (see --help)");
    }
    if (spec->value_name.empty()) {  // a switch
      if (value) return InvalidArgument(std::string(name) + " takes no value");
      value = std::string_view();
    } else if (!value) {
      if (i + 1 == args.size() || args[i + 1].starts_with("--")) {
        return InvalidArgument(std::string(name) + " requires a value (" +
                               std::string(spec->value_name) + ")");
      }
      value = args[++i];
    }
    SIESTA_RETURN_IF_ERROR(spec->apply(name, *value, parsed.config));
    if (name == "--api-key") api_key_given = true;
  }
  // Set but empty is refused like --api-key '': an unset variable means "no key", an empty
  // one is a mistake (a script's unset value), and authentication must not silently go.
  if (!api_key_given && env_api_key) {
    Status key = check_api_key(kApiKeyEnvironmentVariable, *env_api_key);
    if (!key.ok()) return key;
    parsed.config.api_key = std::string(*env_api_key);
  }
  SIESTA_RETURN_IF_ERROR(validate_offload_flags(parsed.config.offload));
  SIESTA_RETURN_IF_ERROR(validate_persist_flags(parsed.config));
  SIESTA_RETURN_IF_ERROR(validate_model_flags(parsed.config));
  SIESTA_RETURN_IF_ERROR(validate_scale_flags(parsed.config));
  return parsed;
}

Result<ParsedFlags> parse_server_flags(int argc, const char* const* argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  // Read once, on the main thread, before any other thread exists.
  const char* env_key = std::getenv(kApiKeyEnvironmentVariable);  // NOLINT(concurrency-mt-unsafe)
  return parse_server_flags(
      std::span<const std::string_view>(args),
      env_key != nullptr ? std::optional<std::string_view>(env_key) : std::nullopt);
}

std::string server_help_text() {
  const ServerConfig defaults;
  std::string text =
      "Usage: siesta-server [flags]\n"
      "\n"
      "Serves one LLM session over HTTP; with --cache-idle-seconds, an idle session's device\n"
      "memory is written to --cache-disk-dir and released, and restored on the next request.\n"
      "\n"
      "Flags (--flag value or --flag=value; a repeated flag: the last one wins, but each\n"
      "--cors-origin adds an origin):\n";
  // Two columns: the flag, then its description wrapped to 80 columns; "(default: X)" is
  // kept whole so that it can be searched for.
  auto add = [&text](const std::string& left, std::string_view help, const std::string& fallback) {
    constexpr size_t kColumn = 30;
    constexpr size_t kWidth = 80;
    std::vector<std::string> words;
    size_t start = 0;
    while (start < help.size()) {
      size_t end = help.find(' ', start);
      if (end == std::string_view::npos) end = help.size();
      words.emplace_back(help.substr(start, end - start));
      start = end + 1;
    }
    if (!fallback.empty()) words.push_back("(default: " + fallback + ")");
    std::string line = "  " + left;
    if (line.size() + 1 > kColumn) {
      text += line + "\n";
      line.clear();
    }
    line.resize(kColumn, ' ');
    bool line_empty = true;
    for (const std::string& word : words) {
      if (!line_empty && line.size() + 1 + word.size() > kWidth) {
        text += line + "\n";
        line = std::string(kColumn, ' ');
        line_empty = true;
      }
      if (!line_empty) line += ' ';
      line += word;
      line_empty = false;
    }
    text += line + "\n";
  };
  for (const FlagSpec& spec : flag_specs()) {
    const std::string usage = spec.value_name.empty()
                                  ? std::string(spec.name)
                                  : std::string(spec.name) + " " + std::string(spec.value_name);
    add(usage, spec.help, spec.fallback(defaults));
  }
  add("--help, -h", "print this help and exit", "");
  add("--version", "print the version and exit", "");
  text +=
      "\n"
      "Exit status: 0 after a clean stop (SIGINT, SIGTERM or SIGHUP), 1 when the server cannot\n"
      "run, 2 for a command line it refuses.\n";
  return text;
}

std::string_view server_version() { return SIESTA_VERSION; }

std::string server_version_text() {
  return "siesta-server " + std::string(server_version()) + "\n";
}

}  // namespace siesta::server
