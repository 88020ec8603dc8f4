// ServerProcess: the real siesta-server binary, started for one e2e test on a free loopback
// port, driven over HTTP and stopped with a signal. Also run_to_exit() for command lines
// that must be refused.
//
// Synchronisation is by events, never by sleeping: the fixture reads the server's
// "siesta-server listening on http://HOST:PORT" line from a pipe (poll() with a deadline),
// then asks GET /health until it answers 200; it learns of the exit from the end of the
// server's stdout (poll() again) and reaps it with waitpid().
//
// The binary is the one CMake built (SIESTA_SERVER_BINARY). Thread rule: one test thread.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"

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

  // A client for this server with bounded timeouts.
  std::unique_ptr<httplib::Client> client() const;
  // GET `path` on this server.
  httplib::Result get(const std::string& path) const;

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
};

}  // namespace siesta::testing
