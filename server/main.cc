// siesta-server: parses the command line, prepares the snapshot directory, opens the device,
// the engine and its offloader (ServerApp) and serves HTTP until SIGINT, SIGTERM or SIGHUP
// (a closed terminal, or a supervisor's stop: the same clean stop, since the default action
// would kill the process and leave its snapshot files and the directory's lock behind). On a
// stop signal: every in-flight generation is cancelled (it ends at its next token, prompt
// tokens included), the listener stops and the handlers finish, then the engine closes (a
// running save is stopped) and this process's snapshot files are removed -- or, with
// --cache-persist on, every conversation not on disk yet is saved there (within
// --cache-exit-save-seconds) and the files stay for the next start to adopt.
//
// Exit status: 0 after a clean stop, 1 when the server cannot run (backend, address), 2 for
// a command line, snapshot directory or key file it refuses (a bad combination of flags exits 2),
// 70 when the session's memory is lost after an offload (exit_on_session_memory_lost).
// stdout carries exactly one line, "siesta-server listening on http://HOST:PORT", once the
// socket is bound (tests and scripts read it to learn the port); logs go to stderr.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/snapshot/key_file.h"
#include "server/cache_dir.h"
#include "server/http_server.h"
#include "server/server_app.h"
#include "server/server_config.h"
#include "server/server_flags.h"
#include "server/stop_signals.h"

namespace {

using siesta::Result;
using siesta::Status;
namespace srv = siesta::server;

constexpr int kRuntimeErrorExitCode = 1;

void log_line(std::string_view message) {
  // Nothing useful can be done when stderr itself fails.
  (void)std::fprintf(stderr, "siesta-server: %.*s\n", static_cast<int>(message.size()),
                     message.data());
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// The start-up lines: what runs, with which model, whether idle offload and authentication
// are on. Never the key itself.
void log_configuration(const srv::ServerConfig& config, const srv::ServerApp& app) {
  const srv::StatusSnapshot status = app.status();
  const srv::ModelSummary& model = status.model;
  log_line("backend " + status.backend_name + " (kernels " + status.kernels_name +
           ", granularity " + std::to_string(status.granularity) + " bytes)");
  log_line("model " + model.name + ": context " + std::to_string(model.context) + ", KV " +
           std::string(siesta::kv_type_name(model.kv_type)) + ", " + std::to_string(model.layers) +
           " layers, dim " + std::to_string(model.dim));
  if (config.offload.enabled()) {
    log_line("idle offload on: after " + std::to_string(config.offload.idle_seconds) +
             " idle seconds to " + config.offload.disk_dir + ", snapshots expire after " +
             std::to_string(config.offload.expire_seconds) + " seconds, chunks " +
             (config.offload.encrypt ? "sealed with AES-256-GCM" : "with digests (not encrypted)"));
    log_line("snapshot directory budget: " + std::to_string(config.offload.disk_max_bytes >> 20) +
             " MiB (--cache-disk-max-mib); the least recently used snapshots go beyond it");
    log_line("keeping up to " + std::to_string(config.sessions()) + " conversations (" +
             std::to_string(config.parallel) + " on the device at once; --max-sessions)");
    log_line(config.offload.ram_bytes > 0
                 ? "RAM tier: " + std::to_string(config.offload.ram_bytes >> 20) +
                       " MiB of host memory for offloaded sessions, disk beyond (--cache-ram-mib)"
                 : "RAM tier off (--cache-ram-mib N turns it on): every snapshot on disk");
    const siesta::engine::AdoptionReport& adopted = status.adoption;
    log_line(config.persist
                 ? "conversations kept across restarts (--cache-persist on): " +
                       std::to_string(adopted.adopted) + " adopted at start, " +
                       std::to_string(adopted.refused()) + " refused; saved on stop within " +
                       std::to_string(config.exit_save_seconds) + " s"
                 : "conversations end with this process (--cache-persist off)");
  } else {
    log_line("idle offload off (--cache-idle-seconds 0)");
  }
  log_line(config.slot_save_path.empty() ? "slot save/restore off (no --slot-save-path)"
                                         : "slot files in " + config.slot_save_path);
  if (!config.api_key.empty()) {
    log_line("authentication on: every endpoint but /health needs the API key");
  } else if (is_loopback(config.host)) {
    log_line("authentication off (no --api-key or SIESTA_API_KEY); listening on loopback only");
  } else {
    log_line("WARNING: authentication off and listening on " + config.host +
             ": anyone who can reach this address can use and offload the session; set "
             "--api-key or SIESTA_API_KEY");
  }
}

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// Every client connection holds a descriptor, and as many again may be closing; the engine,
// its snapshot files and the loop need a few dozen more. Raises the soft limit to that when
// the hard limit allows; otherwise says what will happen (accept() pauses when it runs out).
void ensure_descriptors(uint32_t max_connections) {
  constexpr rlim_t kReserve = 64;
  const rlim_t needed = 2 * static_cast<rlim_t>(max_connections) + kReserve;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= needed) return;
  const rlim_t wanted = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
  rlimit raised = limit;
  raised.rlim_cur = wanted;
  if (wanted > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur < needed) {
    log_line("WARNING: the open-file limit is " + std::to_string(limit.rlim_cur) + "; " +
             std::to_string(max_connections) + " connections (--http-max-connections) may need " +
             std::to_string(needed) + ": connections beyond it wait in the listen queue");
  }
}

int serve(srv::ServerConfig config, const sigset_t& stop_signals) {
  ensure_descriptors(config.http_max_connections);
  if (config.offload.enabled()) {
    bool created = false;
    Status dir = srv::prepare_cache_dir(config.offload.disk_dir, &created);
    if (!dir.ok()) {
      log_line(dir.message());
      return srv::kUsageExitCode;
    }
    if (created) log_line("created " + config.offload.disk_dir + " (mode 0700)");
    if (config.persist) {
      // Judged before anything opens, so that a key file refused is a usage error (exit 2).
      Result<siesta::LoadedKey> key = siesta::load_or_create_key_file(config.key_file);
      if (!key.ok()) {
        log_line("--cache-key-file: " + key.status().message());
        return srv::kUsageExitCode;
      }
      if (key->created)
        log_line("created the snapshot key file " + config.key_file + " (mode 0600)");
    }
    if (config.disk_max_bytes) {
      config.offload.disk_max_bytes = *config.disk_max_bytes;
    } else {
      Result<uint64_t> budget = srv::default_cache_dir_budget(config.offload.disk_dir);
      if (!budget.ok()) {
        log_line("--cache-disk-dir: " + budget.status().message());
        return srv::kUsageExitCode;
      }
      config.offload.disk_max_bytes = *budget;
    }
  }

  Result<std::unique_ptr<srv::ServerApp>> started = srv::ServerApp::start(
      config, siesta::SystemClock::instance(), [](const std::string& line) { log_line(line); },
      srv::exit_on_session_memory_lost);
  if (!started.ok()) {
    log_line(started.status().message());
    return kRuntimeErrorExitCode;
  }
  // Destroyed after `http` (declared later): the engine outlives every request handler, and
  // its Offloader and this process's snapshots go last (SnapshotStore removes them).
  std::unique_ptr<srv::ServerApp> app = std::move(started).value();
  log_configuration(config, *app);

  srv::HttpServer http(*app);
  Result<int> port = http.bind(config.host, config.port);
  if (!port.ok()) {
    log_line(port.status().message());
    return kRuntimeErrorExitCode;
  }

  // SIGINT/SIGTERM/SIGHUP, on a thread of their own: raise every request's cancel flag first, so a
  // running generation ends at its next token and queued ones end at their first, then stop
  // accepting and wait for the handlers (http.stop() returns once run() has). The waiter is
  // joined (woken if no signal came) when `serve` returns, whichever way it returns.
  srv::StopSignalWaiter stop_waiter(stop_signals, [&http, &app] {
    app->cancel_all();
    http.stop();
  });

  // The one stdout line; scripts and the e2e fixture read the port from it.
  const std::string url = srv::http_url(config.host, *port);
  if (std::printf("siesta-server listening on %s\n", url.c_str()) < 0 || std::fflush(stdout) != 0) {
    log_line("listening on " + url + " (could not say so on stdout)");
  }
  Status served = http.run();
  if (!served.ok()) {
    log_line(served.message());
    return kRuntimeErrorExitCode;
  }
  log_line(std::string("stopped on ") + signal_name(stop_waiter.received()) +
           (config.persist ? "; closing the engine and saving its conversations for the next start"
                           : "; closing the engine and removing this process's snapshots"));
  return 0;
}

// Writes `text` to stdout; 0 when it all got there, else 1.
int print(const std::string& text) {
  return std::fputs(text.c_str(), stdout) < 0 || std::fflush(stdout) != 0 ? 1 : 0;
}

int run(int argc, char** argv) {
  // Block the stop signals before any thread starts (the backend and the HTTP server start
  // threads), so that they stay pending until the waiter thread collects them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  if (!srv::block_signals(stop_signals)) {
    log_line("cannot block SIGINT/SIGTERM/SIGHUP");
    return kRuntimeErrorExitCode;
  }
  // A client that hangs up mid-response must cost one write error, not the process.
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
    log_line("cannot ignore SIGPIPE");
    return kRuntimeErrorExitCode;
  }

  Result<srv::ParsedFlags> parsed = srv::parse_server_flags(argc, argv);
  if (!parsed.ok()) {
    log_line(parsed.status().message());
    return srv::kUsageExitCode;
  }
  switch (parsed->action) {
    case srv::ParsedFlags::Action::kHelp: return print(srv::server_help_text());
    case srv::ParsedFlags::Action::kVersion: return print(srv::server_version_text());
    case srv::ParsedFlags::Action::kRun: break;
  }
  return serve(parsed->config, stop_signals);
}

}  // namespace

int main(int argc, char** argv) {
  // No exception crosses main: whatever escaped (allocation, thread creation) is reported as
  // one line and a failing exit status, after the stack is unwound.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    log_line(std::string("fatal: ") + e.what());
  } catch (...) {
    log_line("fatal: unknown exception");
  }
  return kRuntimeErrorExitCode;
}
