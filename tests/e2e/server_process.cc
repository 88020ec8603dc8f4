#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <regex>
#include <string>
#include <system_error>
#include <utility>

#include "core/base/os_error.h"
#include "tests/e2e/poll_deadline.h"

#ifndef SIESTA_SERVER_BINARY
#error "SIESTA_SERVER_BINARY must name the siesta-server binary under test"
#endif

extern char** environ;

namespace siesta::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Both ends close-on-exec: only the descriptors the child is given by dup2 survive exec.
Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return status_from_errno(errno, "pipe2");
  return std::pair<UniqueFd, UniqueFd>(UniqueFd(ends[0]), UniqueFd(ends[1]));
}

// Starts the binary with `args`; its stdout and stderr go to the given descriptors, its
// stdin reads /dev/null, and it starts with no blocked signals and default dispositions.
Result<pid_t> spawn(const std::vector<std::string>& args, int stdout_fd, int stderr_fd) {
  std::vector<std::string> argv_strings = {server_binary()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);

  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaddset(&defaults, signal_number);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    return Internal(std::string("posix_spawn ") + argv[0] + ": " +
                    std::generic_category().message(error));
  }
  return pid;
}

// Reads what is available on `fd` into `out`, waiting at most until `deadline`.
// Returns false at end of file (or a read error), true otherwise.
bool read_some(int fd, std::string& out, Clock::time_point deadline) {
  pollfd entry{fd, POLLIN, 0};
  const int ready = ::poll(&entry, 1, poll_timeout_ms(deadline));
  if (ready < 0) return errno == EINTR;
  if (ready == 0) return true;  // nothing yet
  char buffer[4096];
  const ssize_t got = ::read(fd, buffer, sizeof buffer);
  if (got < 0) return errno == EINTR || errno == EAGAIN;
  if (got == 0) return false;
  out.append(buffer, static_cast<size_t>(got));
  return true;
}

ProcessExit decode(int wait_status) {
  ProcessExit result;
  if (WIFEXITED(wait_status)) result.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) result.signal = WTERMSIG(wait_status);
  return result;
}

ProcessExit wait_for(pid_t pid) {
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  return decode(wait_status);
}

}  // namespace

const char* server_binary() { return SIESTA_SERVER_BINARY; }

std::string ProcessExit::describe() const {
  if (exited()) return "exit status " + std::to_string(exit_code);
  return "killed by signal " + std::to_string(signal);
}

Result<ProcessExit> ServerProcess::run_to_exit(const std::vector<std::string>& args,
                                               std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  SIESTA_ASSIGN_OR_RETURN(auto out, make_pipe());
  SIESTA_ASSIGN_OR_RETURN(auto err, make_pipe());
  SIESTA_ASSIGN_OR_RETURN(pid_t pid, spawn(args, out.second.get(), err.second.get()));
  out.second.reset();  // the child holds the write ends now; EOF means it is gone
  err.second.reset();

  ProcessExit result;
  bool out_open = true;
  bool err_open = true;
  while ((out_open || err_open) && Clock::now() < deadline) {
    pollfd entries[2] = {{out_open ? out.first.get() : -1, POLLIN, 0},
                         {err_open ? err.first.get() : -1, POLLIN, 0}};
    if (::poll(entries, 2, poll_timeout_ms(deadline)) < 0 && errno != EINTR) break;
    // A ready or hung-up descriptor is read now (its poll wait is zero).
    if (out_open && entries[0].revents != 0) {
      out_open = read_some(out.first.get(), result.stdout_text, Clock::now());
    }
    if (err_open && entries[1].revents != 0) {
      err_open = read_some(err.first.get(), result.stderr_text, Clock::now());
    }
  }
  if (out_open || err_open) {
    ::kill(pid, SIGKILL);
    wait_for(pid);
    return Internal("siesta-server did not exit within " + std::to_string(deadline_after.count()) +
                    " ms; stderr so far: " + result.stderr_text);
  }
  ProcessExit how = wait_for(pid);
  result.exit_code = how.exit_code;
  result.signal = how.signal;
  return result;
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::start(
    const std::vector<std::string>& args, std::chrono::milliseconds deadline_after) {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  std::unique_ptr<ServerProcess> server(new ServerProcess());

  UniqueFd stderr_file(::memfd_create("siesta-server-stderr", MFD_CLOEXEC));
  if (!stderr_file.valid()) return status_from_errno(errno, "memfd_create");
  SIESTA_ASSIGN_OR_RETURN(auto out, make_pipe());
  std::vector<std::string> full_args = {"--host", "127.0.0.1", "--port", "0"};
  full_args.insert(full_args.end(), args.begin(), args.end());
  SIESTA_ASSIGN_OR_RETURN(server->pid_, spawn(full_args, out.second.get(), stderr_file.get()));
  out.second.reset();
  server->stdout_fd_ = std::move(out.first);
  server->stderr_fd_ = std::move(stderr_file);

  auto fail = [&server](const std::string& why) -> Status {
    server->kill_and_reap();
    return Internal(why + "; siesta-server stderr:\n" + server->stderr_text());
  };

  // 1. The listening line tells the port.
  std::string printed;
  while (printed.find('\n') == std::string::npos) {
    if (Clock::now() >= deadline) return fail("no listening line within the deadline");
    if (!read_some(server->stdout_fd_.get(), printed, deadline)) {
      return fail("siesta-server exited before listening (" + server->reap().describe() + ")");
    }
  }
  server->listening_line_ = printed.substr(0, printed.find('\n'));
  static const std::regex kListening(R"(siesta-server listening on http://127\.0\.0\.1:(\d+))");
  std::smatch match;
  if (!std::regex_match(server->listening_line_, match, kListening)) {
    return fail("unexpected first stdout line: \"" + server->listening_line_ + "\"");
  }
  server->port_ = std::stoi(match[1].str());
  if (server->port_ <= 0 || server->port_ > 65535) return fail("bad port in the listening line");

  // 2. The socket is bound and listening before that line is printed, so /health normally
  // answers at the first try; a failure means the server died, which the pipe then shows.
  while (true) {
    if (Clock::now() >= deadline) return fail("GET /health did not answer 200 in time");
    httplib::Result health = server->get("/health");
    if (health && health->status == 200) break;
    std::string ignored;
    // Waits up to 50 ms for the server's exit; returns at once if it has exited.
    if (!read_some(server->stdout_fd_.get(), ignored,
                   std::min(deadline, Clock::now() + std::chrono::milliseconds(50)))) {
      return fail("siesta-server exited while waiting for /health (" + server->reap().describe() +
                  ")");
    }
  }
  return server;
}

// The descriptors close after the body, once the server is gone.
ServerProcess::~ServerProcess() { kill_and_reap(); }

std::string ServerProcess::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::unique_ptr<httplib::Client> ServerProcess::client() const {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
  client->set_connection_timeout(std::chrono::seconds(2));
  client->set_read_timeout(std::chrono::seconds(30));
  client->set_write_timeout(std::chrono::seconds(10));
  if (!api_key_.empty()) client->set_bearer_token_auth(api_key_.c_str());
  return client;
}

httplib::Result ServerProcess::get(const std::string& path) const { return client()->Get(path); }

httplib::Result ServerProcess::post(const std::string& path, const std::string& body,
                                    const std::string& content_type) const {
  return client()->Post(path.c_str(), body, content_type.c_str());
}

httplib::Result ServerProcess::post_json(const std::string& path,
                                         const nlohmann::json& body) const {
  return post(path, body.dump());
}

Result<nlohmann::json> ServerProcess::status() const {
  httplib::Result response = get("/v1/status");
  if (!response) {
    return Internal("GET /v1/status: " + httplib::to_string(response.error()));
  }
  if (response->status != 200) {
    return Internal("GET /v1/status answered " + std::to_string(response->status) + ": " +
                    response->body);
  }
  nlohmann::json body = nlohmann::json::parse(response->body, nullptr, false);
  if (body.is_discarded()) return Internal("GET /v1/status: not JSON: " + response->body);
  return body;
}

bool ServerProcess::running() const {
  if (pid_ < 0 || !stdout_fd_.valid()) return false;
  pollfd entry{stdout_fd_.get(), POLLIN, 0};
  if (::poll(&entry, 1, 0) <= 0) return true;
  return (entry.revents & (POLLHUP | POLLERR)) == 0;
}

Result<nlohmann::json> ServerProcess::wait_for_status(
    const std::function<bool(const nlohmann::json&)>& predicate, std::string_view what,
    std::chrono::milliseconds deadline_after, std::chrono::milliseconds pause) const {
  const Clock::time_point deadline = Clock::now() + deadline_after;
  nlohmann::json last;
  while (true) {
    if (!running()) {
      return Internal("siesta-server exited while waiting for " + std::string(what) +
                      "; stderr:\n" + stderr_text());
    }
    Result<nlohmann::json> body = status();
    if (body.ok()) {
      if (predicate(*body)) return body;
      last = *body;
    }
    if (Clock::now() >= deadline) {
      return Internal("no /v1/status satisfied \"" + std::string(what) + "\" within " +
                      std::to_string(deadline_after.count()) + " ms; last: " + last.dump() +
                      (body.ok() ? "" : "; last error: " + body.status().to_string()) +
                      "; stderr:\n" + stderr_text());
    }
    // The bounded pause of the header comment: the server's timers run on real time. Waiting
    // on stdout ends it early when the server exits.
    pollfd entry{stdout_fd_.get(), POLLIN, 0};
    const int wait_ms = std::min<int>(static_cast<int>(pause.count()), poll_timeout_ms(deadline));
    if (::poll(&entry, 1, wait_ms) > 0 && (entry.revents & (POLLHUP | POLLERR)) == 0) {
      char ignored[256];
      (void)::read(stdout_fd_.get(), ignored, sizeof ignored);  // stray stdout text
    }
  }
}

Result<nlohmann::json> ServerProcess::wait_for_cache_state(
    const std::string& state, std::chrono::milliseconds deadline_after) const {
  return wait_for_status(
      [&state](const nlohmann::json& body) {
        return body.contains("cache") && body["cache"].is_object() &&
               body["cache"].value("state", "") == state;
      },
      "cache.state == " + state, deadline_after);
}

std::string ServerProcess::stderr_text() const {
  std::string text;
  if (!stderr_fd_.valid()) return text;
  char buffer[4096];
  off_t offset = 0;
  while (true) {
    // pread leaves the offset the server writes at untouched.
    const ssize_t got = ::pread(stderr_fd_.get(), buffer, sizeof buffer, offset);
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
    offset += got;
  }
  return text;
}

Result<ProcessExit> ServerProcess::stop(int signal_number,
                                        std::chrono::milliseconds deadline_after) {
  if (pid_ < 0) return Internal("siesta-server is not running");
  const Clock::time_point deadline = Clock::now() + deadline_after;
  if (::kill(pid_, signal_number) != 0) return status_from_errno(errno, "kill");
  std::string printed;
  while (read_some(stdout_fd_.get(), printed, deadline)) {
    if (Clock::now() >= deadline) {
      const std::string log = stderr_text();
      kill_and_reap();
      return Internal("siesta-server did not exit within " +
                      std::to_string(deadline_after.count()) + " ms of signal " +
                      std::to_string(signal_number) + "; stderr:\n" + log);
    }
  }
  ProcessExit result = reap();
  result.stdout_text = listening_line_ + "\n" + printed;
  result.stderr_text = stderr_text();
  return result;
}

ProcessExit ServerProcess::reap() {
  ProcessExit result;
  if (pid_ < 0) return result;
  result = wait_for(pid_);
  pid_ = -1;
  return result;
}

void ServerProcess::kill_and_reap() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  reap();
}

}  // namespace siesta::testing
