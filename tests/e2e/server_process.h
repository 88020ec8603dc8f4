// ServerProcess: the real siesta-server binary, started for one e2e test on a free loopback
// port, driven over HTTP and stopped with a signal. Also run_to_exit() for command lines
// that must be refused.
//
// Synchronisation is by events, never by sleeping: the fixture reads the server's
// "siesta-server listening on http://HOST:PORT" line from a pipe (poll() with a deadline),
// then asks GET /health until it answers 200; it learns of the exit from the end of the
// server's stdout (poll() again) and reaps it with waitpid().
//
// Waiting for the server's own state (wait_for_status) polls GET /v1/status, which never
// wakes a session, until a predicate holds or a deadline passes. Between two polls it waits
// up to `pause` (default 20 ms) on the server's stdout, so an exit ends the wait at once.
// Those short, bounded pauses are the one place the fixture lets time pass: they are used
// only while waiting for the server's wall-clock timers (--cache-idle-seconds,
// --cache-expire-seconds), which run on real time in the real binary; no test sleeps to
// "let something happen".
//
// Requests: post()/post_json() send a body with the bearer key set by set_api_key() (if
// any); raw sockets (incremental SSE reading, abrupt disconnects) are in raw_http.h.
//
// The binary is the one CMake built (SIESTA_SERVER_BINARY). Thread rule: start, stop,
// kill_hard and running on the test thread; get, post, post_json, status and
// wait_for_status may be called from several threads at once (each makes its own client).
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/base/unique_fd.h"

namespace siesta::testing {

// Path of the siesta-server binary under test.
const char* server_binary();

// How a process ended and what it wrote.
struct ProcessExit {
  int exit_code = -1;  // the exit status when it exited, else -1
  int signal = 0;      // the signal that killed it, else 0
  std::string stdout_text;
  std::string stderr_text;

  bool exited() const { return exit_code >= 0; }
  // "exit status 2" / "killed by signal 9".
  std::string describe() const;
};

inline constexpr std::chrono::milliseconds kServerDeadline{20000};

class ServerProcess {
 public:
  // Starts siesta-server with "--host 127.0.0.1 --port 0" followed by `args`, reads its
  // listening line and waits for GET /health to answer 200, all within `deadline`.
  // Failure: Internal with the reason and whatever the server wrote to stderr (the process
  // is killed and reaped).
  static Result<std::unique_ptr<ServerProcess>> start(
      const std::vector<std::string>& args, std::chrono::milliseconds deadline = kServerDeadline);

  // Runs siesta-server with exactly `args` until it exits, capturing stdout and stderr.
  // Failure: Internal when it cannot be started or has not exited within `deadline` (then it
  // is killed).
  static Result<ProcessExit> run_to_exit(const std::vector<std::string>& args,
                                         std::chrono::milliseconds deadline = kServerDeadline);

  // Kills the server (SIGKILL) if it is still running.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // "http://127.0.0.1:PORT".
  std::string base_url() const;
  // The exact line the server printed on stdout, without the newline.
  const std::string& listening_line() const { return listening_line_; }

  // Every client() made from now on sends "Authorization: Bearer <key>" (empty: none).
  // REQUIRES: no request in flight on another thread.
  void set_api_key(std::string key) { api_key_ = std::move(key); }
  const std::string& api_key() const { return api_key_; }

  // A client for this server with bounded timeouts (read: 30 s).
  std::unique_ptr<httplib::Client> client() const;
  // GET `path` on this server.
  httplib::Result get(const std::string& path) const;
  // POST `body` to `path` with `content_type`.
  httplib::Result post(const std::string& path, const std::string& body,
                       const std::string& content_type = "application/json") const;
  // POST `body` serialised as JSON.
  httplib::Result post_json(const std::string& path, const nlohmann::json& body) const;

  // GET /v1/status, parsed. Failure: Internal naming the transport error, the HTTP status or
  // the body that is not JSON.
  Result<nlohmann::json> status() const;

  // Polls GET /v1/status until `predicate(body)` holds (see the header comment: at most
  // `pause` between polls, ends early when the server exits).
  // Success: the first body that satisfied the predicate.
  // Failure: Internal when the deadline passed (with `what` and the last body) or the server
  // exited or stopped answering.
  Result<nlohmann::json> wait_for_status(
      const std::function<bool(const nlohmann::json&)>& predicate, std::string_view what,
      std::chrono::milliseconds deadline = kServerDeadline,
      std::chrono::milliseconds pause = std::chrono::milliseconds(20)) const;
  // wait_for_status for cache.state == `state`.
  Result<nlohmann::json> wait_for_cache_state(
      const std::string& state, std::chrono::milliseconds deadline = kServerDeadline) const;

  // Whether the process has not exited yet (its stdout is still open). Never blocks.
  bool running() const;

  // kill -9 now and reap. Success: how it ended (signal 9 unless it had exited already).
  Result<ProcessExit> kill_hard() { return stop(SIGKILL); }

  // What the server has written to stderr so far.
  std::string stderr_text() const;

  // Sends `signal_number` and waits (up to `deadline`) for the server to exit.
  // Success: how it ended. Failure: Internal when it did not end in time (it is then killed).
  // After this the process is gone; calling again fails.
  Result<ProcessExit> stop(int signal_number = SIGTERM,
                           std::chrono::milliseconds deadline = kServerDeadline);

 private:
  ServerProcess() = default;
  // Reaps the child after its stdout closed (or after SIGKILL).
  ProcessExit reap();
  void kill_and_reap();

  pid_t pid_ = -1;
  UniqueFd stdout_fd_;  // read end of the server's stdout; EOF means it exited
  UniqueFd stderr_fd_;  // a memfd the server's stderr is written into
  int port_ = 0;
  std::string listening_line_;
  std::string api_key_;
};

}  // namespace siesta::testing
