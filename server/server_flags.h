// The siesta-server command line: argv -> ParsedFlags, without printing or exiting, so that
// every rule is unit-testable; main() turns an error into one stderr line and exit status 2.
//
// Grammar:
//   --flag value | --flag=value   for flags that take a value
//   --help | -h, --version        print and exit 0 (the first of them wins; arguments after
//                                 it are not examined, arguments before it are)
// Rules:
//   - A value given as a separate argument must not start with "--" (so a forgotten value is
//     reported as missing instead of swallowing the next flag); use --flag=--odd for such a
//     value. An empty value ("--flag=" or "--flag ''") is passed on and judged by the flag.
//   - Integers are decimal digits with an optional leading '-' (std::from_chars): no '+',
//     no spaces, no hex, no trailing characters; anything outside int64 is out of range.
//   - A flag given twice: the last one wins (so a wrapper script can override a default),
//     but --cors-origin, which adds an origin each time it is given.
//   - Positional arguments are errors.
// After parsing, the whole configuration is validated, so an error names the flag and the
// rule it breaks: core's offload rules (find_offload_config_problem, worded with the flag
// names); --model with --ctx and --kv-type
// (engine::model_config_from_spec); --parallel / --devices above 1 (refused: with
// --cache-idle-seconds as a combination idle offload cannot serve, without it as not
// implemented by this engine).
// Thread rule: pure functions; no shared state.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "server/server_config.h"

namespace siesta::server {

// The exit status of a command line that cannot run: a bad value or combination exits with
// status 2.
inline constexpr int kUsageExitCode = 2;

// The longest --cache-exit-save-seconds: a stop that saves for longer than an hour is a stop a
// supervisor kills anyway.
inline constexpr int64_t kMaxExitSaveSeconds = 3600;

struct ParsedFlags {
  enum class Action { kRun, kHelp, kVersion };
  Action action = Action::kRun;
  ServerConfig config;  // meaningful only for kRun
};

// Parses `args` (argv without argv[0]).
// Success: the action and, for kRun, a validated ServerConfig.
// Failure: InvalidArgument whose message names the flag and the rule, one line, without the
// "siesta-server: " prefix (main adds it).
// `env_api_key` is the SIESTA_API_KEY environment variable's value (nullopt when unset): it
// is the key when --api-key is absent, and set but empty it is refused as --api-key '' is.
// No message ever contains a key.
Result<ParsedFlags> parse_server_flags(std::span<const std::string_view> args,
                                       std::optional<std::string_view> env_api_key = std::nullopt);

// Convenience for main(): argv as the OS gives it, and SIESTA_API_KEY from the environment.
Result<ParsedFlags> parse_server_flags(int argc, const char* const* argv);

// What --help prints: every flag with its default, one per line, ending in a newline.
std::string server_help_text();

// The version from CMake's PROJECT_VERSION ("0.1.0").
std::string_view server_version();

// What --version prints: "siesta-server <version>\n".
std::string server_version_text();

}  // namespace siesta::server
