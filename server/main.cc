// siesta-server: parses the command line, prepares the snapshot directory, opens the memory
// backend and serves HTTP until SIGINT or SIGTERM.
//
// Exit status: 0 after a clean stop, 1 when the server cannot run (backend, address), 2 for
// a command line or snapshot directory it refuses (ANCHORS.md: a bad combination exits 2).
// stdout carries exactly one line, "siesta-server listening on http://HOST:PORT", once the
// socket is bound (tests and scripts read it to learn the port); logs go to stderr.
#include <signal.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/clock.h"
#include "core/status.h"
#include "server/backend_choice.h"
#include "server/cache_dir.h"
#include "server/offload_storage.h"
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

int serve(const srv::ServerConfig& config, const sigset_t& stop_signals) {
  std::unique_ptr<srv::OffloadStorage> storage;  // null when offload is off
  if (config.offload.enabled()) {
    bool created = false;
    Status dir = srv::prepare_cache_dir(config.offload.disk_dir, &created);
    if (!dir.ok()) {
      log_line(dir.message());
      return srv::kUsageExitCode;
    }
    if (created) log_line("created " + config.offload.disk_dir + " (mode 0700)");
    Result<std::unique_ptr<srv::OffloadStorage>> opened =
        srv::OffloadStorage::open(config.offload.disk_dir, siesta::SystemClock::instance());
    if (!opened.ok()) {
      log_line(opened.status().message());
      return kRuntimeErrorExitCode;
    }
    const siesta::SnapshotStore::CleanupReport& cleanup = (*opened)->store().startup_cleanup();
    if (cleanup.removed_dead_owner_files + cleanup.removed_expired_files + cleanup.failures > 0) {
      log_line("snapshot directory clean-up: removed " +
               std::to_string(cleanup.removed_dead_owner_files) + " files of stopped servers, " +
               std::to_string(cleanup.removed_expired_files) + " expired; " +
               std::to_string(cleanup.failures) + " could not be removed");
    }
    for (const std::string& failure : cleanup.failure_messages) log_line(failure);
    storage = std::move(opened).value();
  }

  std::string note;
  Result<std::unique_ptr<siesta::MemoryBackend>> backend = srv::open_backend(config.backend, &note);
  if (!note.empty()) log_line(note);
  if (!backend.ok()) {
    log_line(backend.status().message());
    return kRuntimeErrorExitCode;
  }
  log_line("backend " + (*backend)->name() + ", offload " +
           (config.offload.enabled()
                ? "after " + std::to_string(config.offload.idle_seconds) + " idle seconds"
                : std::string("off")));

  srv::ServerApp app(config, std::move(backend).value(), std::move(storage),
                    siesta::SystemClock::instance());
  srv::HttpServer http(app);
  Result<int> port = http.bind(config.host, config.port);
  if (!port.ok()) {
    log_line(port.status().message());
    return kRuntimeErrorExitCode;
  }

  // SIGINT/SIGTERM become http.stop() on a thread of their own; the waiter is joined
  // (woken if no signal came) when `serve` returns, whichever way it returns.
  srv::StopSignalWaiter stop_waiter(stop_signals, [&http] { http.stop(); });

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
  log_line(std::string("stopped on ") + (stop_waiter.received() == SIGINT ? "SIGINT" : "SIGTERM"));
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
  if (!srv::block_signals(stop_signals)) {
    log_line("cannot block SIGINT/SIGTERM");
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
