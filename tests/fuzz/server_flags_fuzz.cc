// Fuzz target: the siesta-server command line. Whatever the arguments, parsing returns a
// Result (never crashes, never throws), and a configuration it accepts obeys every rule of
// docs/IDLE_SESSION.md (integers 0..604800, expiry beyond idle, a directory when enabled).
//
// Input: argv without argv[0], arguments separated by NUL bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "server/server_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> args;
  while (!input.empty() && args.size() < 64) {
    size_t end = input.find('\0');
    args.push_back(input.substr(0, end));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  auto parsed = siesta::server::parse_server_flags(args);
  if (!parsed.ok()) {
    // An error is one line naming what is wrong.
    const siesta::Status status = parsed.status();  // status() returns a copy: keep it alive
    const std::string& message = status.message();
    if (message.empty() || message.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  if (parsed->action != siesta::server::ParsedFlags::Action::kRun) return 0;
  const siesta::OffloadConfig& offload = parsed->config.offload;
  if (offload.idle_seconds < 0 || offload.idle_seconds > 604800) std::abort();
  if (offload.expire_seconds < 0 || offload.expire_seconds > 604800) std::abort();
  if (offload.enabled() &&
      (offload.expire_seconds <= offload.idle_seconds || offload.disk_dir.empty())) {
    std::abort();
  }
  if (parsed->config.port < 0 || parsed->config.port > 65535) std::abort();
  return 0;
}
