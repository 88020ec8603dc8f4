// What hostile and crowded clients do to siesta-server's HTTP layer, measured against the real
// binary on loopback. Prints one JSON object on stdout.
//
//   baseline   /health probes with nothing else connected: latency p50/p99/max (ms)
//   attack     --idle connections that never send a byte and --slowloris connections that
//              send one byte of an endless request head every --trickle-ms, kept open (one
//              the server closes is counted and opened again, as an attacker would; the probes
//              start once all are connected), while
//              /health is probed every --probe-interval-ms on a new connection each time and
//              a client sends completions one after another. Figures: the probes' latency
//              p50/p99/max and failures (a probe that failed or took longer than
//              --timeout-ms counts as --timeout-ms), the completions answered 200, how often
//              the server closed an idle or slowloris connection, and the attackers' state
//              when the probes ended (connections still open).
//   burst      --clients clients at once (all released by one barrier), each sending
//              --burst-requests requests on new connections (alternately GET /health and a
//              completion): answers by status, connection resets (ECONNRESET or EPIPE at
//              any step, counted whether or not the answer had arrived), timeouts, and the
//              latency p50/p99/max.
//
// Target: attack.health_p99_ms <= 50 with 200 idle and 50 slowloris connections and every
// completion answered; burst.resets == 0 with 256 clients.
//
// Usage: http_load_bench [--server PATH] [--port N] [--idle N] [--slowloris N]
//                        [--trickle-ms N] [--probes N] [--probe-interval-ms N]
//                        [--clients N] [--burst-requests N] [--timeout-ms N]
//                        [-- server flags...]
// Without --port it starts --server (default: the siesta-server this build made) with
// "--host 127.0.0.1 --port 0 --model synthetic:tiny" and the flags after "--", and stops it
// with SIGTERM at the end; with --port it measures a server already listening on 127.0.0.1.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"

#ifndef SIESTA_SERVER_BINARY
#define SIESTA_SERVER_BINARY "siesta-server"
#endif

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using std::chrono::milliseconds;

struct Options {
  std::string server = SIESTA_SERVER_BINARY;
  int port = 0;
  int idle = 200;
  int slowloris = 50;
  int trickle_ms = 1000;
  int probes = 750;  // 15 s at the default interval: beyond the server's request deadline
  int probe_interval_ms = 20;
  int clients = 256;
  int burst_requests = 4;
  int timeout_ms = 5000;
  std::vector<std::string> server_args;
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// ---- One request on a new connection --------------------------------------------------------

enum class Outcome { kAnswered, kReset, kTimeout, kRefused, kClosed, kOther };

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kAnswered: return "answered";
    case Outcome::kReset: return "reset";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kRefused: return "refused";
    case Outcome::kClosed: return "closed_without_answer";
    case Outcome::kOther: return "other_error";
  }
  return "?";
}

struct Exchange {
  Outcome outcome = Outcome::kOther;
  int status = 0;      // when answered
  bool reset = false;  // a reset was seen at any step (also after a complete answer)
  double ms = 0;
};

Outcome errno_outcome(int error) {
  if (error == ECONNRESET || error == EPIPE) return Outcome::kReset;
  if (error == ECONNREFUSED) return Outcome::kRefused;
  return Outcome::kOther;
}

// A non-blocking TCP socket connecting to 127.0.0.1:port (the connect may still be running).
int open_socket(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 &&
      errno != EINPROGRESS) {
    const int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

// Complete when the head is in and Content-Length bytes of body followed (or, without one,
// at the end of the stream). Returns the status once complete, 0 before.
int complete_response(const std::string& received, bool at_end) {
  const size_t head_end = received.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  int status = 0;
  if (std::sscanf(received.c_str(), "HTTP/1.%*d %d", &status) != 1) return 0;
  if (status >= 100 && status < 200) {
    // An interim answer: the final one follows.
    return complete_response(received.substr(head_end + 4), at_end);
  }
  std::string lower = received.substr(0, head_end);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const size_t length_at = lower.find("\r\ncontent-length:");
  if (length_at == std::string::npos) return at_end ? status : 0;
  const size_t length = std::strtoull(lower.c_str() + length_at + 17, nullptr, 10);
  return received.size() - head_end - 4 >= length ? status : 0;
}

// Sends `request` on a new connection and reads the answer (the request says
// "Connection: close"), then reads on to the end of the stream to see how the server closed.
Exchange exchange(int port, const std::string& request, int timeout_ms) {
  Exchange result;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + milliseconds(timeout_ms);
  const int fd = open_socket(port);
  if (fd < 0) {
    result.outcome = errno_outcome(errno);
    result.reset = result.outcome == Outcome::kReset;
    return result;
  }
  size_t sent = 0;
  std::string received;
  bool answered = false;
  for (;;) {
    pollfd entry{fd, static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    const int ready = ::poll(&entry, 1, ms_left(deadline));
    if (ready == 0) {
      result.outcome = answered ? Outcome::kAnswered : Outcome::kTimeout;
      break;
    }
    if (ready < 0) continue;
    if ((entry.revents & POLLOUT) != 0) {
      const ssize_t n =
          ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        result.reset = errno == ECONNRESET || errno == EPIPE;
        if (!answered) result.outcome = errno_outcome(errno);
        if (!answered) break;
      }
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if ((entry.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buffer[8192];
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) {
        result.reset = errno == ECONNRESET || errno == EPIPE;
        result.outcome = answered ? Outcome::kAnswered : errno_outcome(errno);
        break;
      }
      if (n == 0) {
        const int status = complete_response(received, true);
        if (status != 0) {
          answered = true;
          result.status = status;
          result.ms = ms_since(start);
        }
        result.outcome = answered ? Outcome::kAnswered : Outcome::kClosed;
        break;
      }
      received.append(buffer, static_cast<size_t>(n));
      if (!answered) {
        const int status = complete_response(received, false);
        if (status != 0) {
          answered = true;
          result.status = status;
          result.ms = ms_since(start);
        }
      }
    }
  }
  ::close(fd);
  if (!answered) result.ms = ms_since(start);
  return result;
}

std::string get_request(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
}

std::string completion_request() {
  const std::string body = R"({"prompt": "Hello there", "max_tokens": 8})";
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// ---- Summaries -------------------------------------------------------------------------------

struct Tally {
  std::vector<double> ms;  // every exchange; a failed one counts as the timeout
  std::map<std::string, int> outcomes;
  std::map<int, int> statuses;
  int resets = 0;

  void add(const Exchange& e, int timeout_ms) {
    ms.push_back(e.outcome == Outcome::kAnswered ? e.ms : static_cast<double>(timeout_ms));
    ++outcomes[outcome_name(e.outcome)];
    if (e.outcome == Outcome::kAnswered) ++statuses[e.status];
    if (e.reset) ++resets;
  }
  void merge(const Tally& other) {
    ms.insert(ms.end(), other.ms.begin(), other.ms.end());
    for (const auto& [k, v] : other.outcomes) outcomes[k] += v;
    for (const auto& [k, v] : other.statuses) statuses[k] += v;
    resets += other.resets;
  }
  json to_json(const std::string& prefix) const {
    json out;
    out["count"] = ms.size();
    out[prefix + "p50_ms"] = siesta::bench::percentile(ms, 0.50);
    out[prefix + "p99_ms"] = siesta::bench::percentile(ms, 0.99);
    out[prefix + "max_ms"] = ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
    out["outcomes"] = outcomes;
    json by_status = json::object();
    for (const auto& [status, n] : statuses) by_status[std::to_string(status)] = n;
    out["statuses"] = by_status;
    out["resets"] = resets;
    return out;
  }
};

Tally probe_health(const Options& options, int count) {
  Tally tally;
  const std::string request = get_request("/health");
  for (int i = 0; i < count; ++i) {
    const Clock::time_point next = Clock::now() + milliseconds(options.probe_interval_ms);
    tally.add(exchange(options.port, request, options.timeout_ms), options.timeout_ms);
    std::this_thread::sleep_until(next);  // pacing, not synchronisation
  }
  return tally;
}

// ---- Attackers -------------------------------------------------------------------------------

// Keeps `idle` silent connections and `slowloris` trickling ones open on one thread until
// stop is set; a connection the server ends is counted and replaced.
class Attackers {
 public:
  explicit Attackers(const Options& options) : options_(options) {}
  ~Attackers() { stop(); }

  // Starts the attackers and waits (at most 10 s) until every connection is established.
  void start() {
    thread_ = std::thread([this] { run(); });
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
    while (established_.load() < options_.idle + options_.slowloris && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));  // polling a counter, bounded
    }
    established_at_start_ = established_.load();
  }
  void stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  json to_json() const {
    return {{"idle", options_.idle},
            {"slowloris", options_.slowloris},
            {"trickle_ms", options_.trickle_ms},
            {"established_before_probes", established_at_start_},
            {"idle_closed_by_server", idle_closed_.load()},
            {"slowloris_closed_by_server", slow_closed_.load()},
            {"answers_to_attackers", answers_.load()},
            {"open_at_end", open_at_end_.load()}};
  }

 private:
  struct Conn {
    int fd = -1;
    bool slow = false;
    bool established = false;
    size_t sent = 0;
    Clock::time_point next_byte;
  };

  void open(Conn& c) {
    c.fd = open_socket(options_.port);
    c.established = false;
    c.sent = 0;
    c.next_byte = Clock::now() + milliseconds(c.slow ? options_.trickle_ms : 0);
    opened_.fetch_add(1);
  }

  void run() {
    std::vector<Conn> conns(options_.idle + options_.slowloris);
    for (size_t i = 0; i < conns.size(); ++i) {
      conns[i].slow = static_cast<int>(i) >= options_.idle;
      open(conns[i]);
    }
    // An endless head: the request line, then one long header that never ends.
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    std::vector<pollfd> entries(conns.size());
    while (!stopping_.load()) {
      for (size_t i = 0; i < conns.size(); ++i) {
        entries[i] = {conns[i].fd,
                      static_cast<short>(POLLIN | (conns[i].established ? 0 : POLLOUT)), 0};
      }
      (void)::poll(entries.data(), entries.size(), 50);
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < conns.size(); ++i) {
        Conn& c = conns[i];
        bool ended = c.fd < 0;
        if (!ended && !c.established && (entries[i].revents & POLLOUT) != 0) {
          c.established = true;
          established_.fetch_add(1);
        }
        if (!ended && (entries[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          char buffer[4096];
          const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
          if (n > 0) answers_.fetch_add(1);  // a refusal or a timeout answer
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) ended = true;
        }
        if (!ended && c.slow && c.established && now >= c.next_byte) {
          const char byte = c.sent < head.size() ? head[c.sent] : 'a';
          if (::send(c.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) ++c.sent;
          c.next_byte = now + milliseconds(options_.trickle_ms);
        }
        if (ended) {
          if (c.fd >= 0) {
            ::close(c.fd);
            (c.slow ? slow_closed_ : idle_closed_).fetch_add(1);
          }
          open(c);
        }
      }
    }
    int open_count = 0;
    for (Conn& c : conns) {
      if (c.fd < 0) continue;
      pollfd entry{c.fd, POLLIN, 0};
      char byte;
      const bool alive =
          ::poll(&entry, 1, 0) == 0 || ::recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
      if (alive) ++open_count;
      ::close(c.fd);
    }
    open_at_end_.store(open_count);
  }

  const Options& options_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> opened_{0};
  std::atomic<int> established_{0};  // connections that completed their connect, reopened ones too
  int established_at_start_ = 0;
  std::atomic<int> idle_closed_{0};
  std::atomic<int> slow_closed_{0};
  std::atomic<int> answers_{0};
  std::atomic<int> open_at_end_{0};
};

// ---- Burst -----------------------------------------------------------------------------------

Tally burst(const Options& options) {
  std::vector<Tally> tallies(options.clients);
  std::mutex mutex;
  std::condition_variable go;
  bool released = false;
  std::vector<std::thread> threads;
  threads.reserve(options.clients);
  for (int c = 0; c < options.clients; ++c) {
    threads.emplace_back([&, c] {
      {
        std::unique_lock lock(mutex);
        go.wait(lock, [&] { return released; });
      }
      for (int r = 0; r < options.burst_requests; ++r) {
        const std::string request =
            (c + r) % 2 == 0 ? get_request("/health") : completion_request();
        tallies[c].add(exchange(options.port, request, options.timeout_ms), options.timeout_ms);
      }
    });
  }
  {
    std::lock_guard lock(mutex);
    released = true;
  }
  go.notify_all();
  Tally all;
  for (int c = 0; c < options.clients; ++c) {
    threads[c].join();
    all.merge(tallies[c]);
  }
  return all;
}

// ---- The server ------------------------------------------------------------------------------

struct Server {
  pid_t pid = -1;
  int port = 0;
};

std::optional<Server> start_server(const Options& options) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<std::string> args = {options.server, "--host",        "127.0.0.1", "--port", "0",
                                   "--model",      "synthetic:tiny"};
  args.insert(args.end(), options.server_args.begin(), options.server_args.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  Server server;
  const int error = ::posix_spawn(&server.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (error != 0) {
    std::fprintf(stderr, "http_load_bench: cannot start %s: %s\n", argv[0], std::strerror(error));
    ::close(out[0]);
    return std::nullopt;
  }
  std::string line;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
    pollfd entry{out[0], POLLIN, 0};
    if (::poll(&entry, 1, ms_left(deadline)) <= 0) continue;
    char buffer[256];
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n <= 0) break;
    line.append(buffer, static_cast<size_t>(n));
  }
  ::close(out[0]);
  const size_t colon = line.rfind(':');
  if (line.find("listening on") == std::string::npos || colon == std::string::npos) {
    std::fprintf(stderr, "http_load_bench: the server did not say where it listens\n");
    ::kill(server.pid, SIGKILL);
    ::waitpid(server.pid, nullptr, 0);
    return std::nullopt;
  }
  server.port = std::atoi(line.c_str() + colon + 1);
  return server;
}

void stop_server(const Server& server) {
  ::kill(server.pid, SIGTERM);
  int status = 0;
  ::waitpid(server.pid, &status, 0);
}

bool parse_options(int argc, char** argv, Options& options) {
  const std::map<std::string, int*> ints = {{"--port", &options.port},
                                            {"--idle", &options.idle},
                                            {"--slowloris", &options.slowloris},
                                            {"--trickle-ms", &options.trickle_ms},
                                            {"--probes", &options.probes},
                                            {"--probe-interval-ms", &options.probe_interval_ms},
                                            {"--clients", &options.clients},
                                            {"--burst-requests", &options.burst_requests},
                                            {"--timeout-ms", &options.timeout_ms}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) options.server_args.emplace_back(argv[i]);
      break;
    }
    if (i + 1 >= argc) return false;
    if (arg == "--server") {
      options.server = argv[++i];
    } else if (auto it = ints.find(arg); it != ints.end()) {
      *it->second = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fprintf(stderr, "usage: see the comment at the top of bench/http_load_bench.cc\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  // Every attacker and burst client holds a descriptor.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::optional<Server> server;
  if (options.port == 0) {
    server = start_server(options);
    if (!server) return 1;
    options.port = server->port;
  }
  // The server answers once it serves; wait for the first /health (bounded).
  for (int i = 0; i < 300; ++i) {
    const Exchange e = exchange(options.port, get_request("/health"), 1000);
    if (e.outcome == Outcome::kAnswered && e.status == 200) break;
    std::this_thread::sleep_for(milliseconds(10));
  }

  json report;
  report["server_args"] = options.server_args;
  report["baseline"] = probe_health(options, std::min(options.probes, 100)).to_json("health_");

  Attackers attackers(options);
  attackers.start();
  std::atomic<bool> completions_done{false};
  Tally completions;
  std::thread completer([&] {
    const std::string request = completion_request();
    while (!completions_done.load()) {
      completions.add(exchange(options.port, request, options.timeout_ms), options.timeout_ms);
    }
  });
  Tally probes = probe_health(options, options.probes);
  completions_done.store(true);
  completer.join();
  attackers.stop();
  json attack = probes.to_json("health_");
  attack["attackers"] = attackers.to_json();
  attack["completions"] = completions.to_json("");
  report["attack"] = attack;

  json burst_report = burst(options).to_json("");
  burst_report["clients"] = options.clients;
  burst_report["requests_per_client"] = options.burst_requests;
  report["burst"] = burst_report;

  if (server) stop_server(*server);
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
