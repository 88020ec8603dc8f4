// ConnectionLoop: every client connection of siesta-server, from accept() to close(), on one
// thread with epoll, so that a connection costs a thread only while a worker serves one of
// its requests. Idle, slow and half-sent connections cost a descriptor and their bytes.
//
// A connection waits in the loop for a whole request: its head (framed by request_head.h's
// HeadFramer as the bytes arrive, each judged once, so that a byte that cannot start or
// continue a valid head is refused when it comes; then judged by the `screen` callback before
// a byte of the body is read), then its Content-Length body (judged by `screen_body`). Only
// then does a worker (worker_pool.h) get it, with the request's bytes in memory
// (request_stream.h): the `serve` callback parses and answers it. Then the connection comes
// back to the loop, and the bytes it had received beyond that request (pipelined requests)
// are served next, in order. A request whose client shut down its sending side after it is
// still served and answered; a client that shuts it down in the middle of a head is answered
// 400 (that head can never end), and one that shuts it down before sending a request (empty
// lines before one do not count) is closed without an answer.
//
// Limits:
//   max_connections  connections open at once (waiting for a request or being served). The
//                    next one is answered 503 with Retry-After: 1 and "Connection: close" as
//                    soon as it is accepted, without reading it, then closed.
//   request_timeout  from the accept (or the previous answer) to the end of the head, then
//                    again from there to the end of the body. A connection that has sent
//                    nothing of a request by then (empty lines before one do not count) is
//                    closed silently (an idle keep-alive connection); one that has sent part
//                    of one, every byte of it valid so far, is answered 408. Also the
//                    longest one write of an answer waits for a client that does not read.
//   max_requests     requests on one connection; the last one's answer says
//                    "Connection: close".
// A refusal (a head that cannot be framed: 400, 411, 414, 431, 505; a head cut by the
// client's FIN: 400; the screens'; 413 past max_body_bytes; 408; 503) is written by the loop
// itself with "Connection: close"; the connection is then shut down for writing and drained
// for up to `linger` before it is closed, so that the client reads the answer instead of a
// reset caused by the bytes it sent and the loop did not read.
// Connections being drained do not count against max_connections (at most as many again;
// beyond that one is closed at once).
//
// The listening socket's backlog is raised to kListenBacklog. When accept() runs out of
// descriptors, the loop stops accepting for 100 ms rather than spin.
//
// Thread rule: run() on one thread, once; stop() from any thread (not from a callback).
// `screen` runs on the loop thread and must not block; `serve` runs on worker threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/unique_fd.h"
#include "server/request_head.h"
#include "server/request_stream.h"
#include "server/worker_pool.h"

namespace siesta::server {

inline constexpr int kListenBacklog = 1024;

struct ConnectionLimits {
  size_t max_connections = 512;
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds linger{2000};
  uint32_t max_requests = 1000;
  // A body longer is refused (413) before it is read, whatever the screen said: the loop
  // never buffers more than this per request.
  uint64_t max_body_bytes = uint64_t{1} << 20;
  HeadLimits head;
};

struct ConnectionCallbacks {
  // Judges a complete head (method, path, version, headers; no body yet) on the loop thread.
  // True: read the body and serve the request. False: `response` holds the refusal, which
  // is sent, and the connection closed.
  std::function<bool(const httplib::Request& head, httplib::Response& response)> screen;
  // Judges the body once it is all in, on the loop thread (the same head as `screen` saw).
  // Same contract as `screen`. May be empty.
  std::function<bool(const httplib::Request& head, std::string_view body,
                     httplib::Response& response)>
      screen_body;
  // Serves one request whose bytes `stream` holds, on a worker thread. `close_after`: the
  // answer must say "Connection: close". Returns whether the connection may carry another
  // request.
  std::function<bool(RequestStream& stream, bool close_after)> serve;
};

class ConnectionLoop {
 public:
  // Takes `listener`, a bound and listening TCP socket (shut down and closed when run() stops
  // accepting). Failure: the errno's Status (os_error.h) when the socket cannot be set up or
  // epoll or the wake-up descriptor cannot be made.
  static Result<std::unique_ptr<ConnectionLoop>> create(UniqueFd listener, ConnectionLimits limits,
                                                        ConnectionCallbacks callbacks);
  // REQUIRES: run() is not running (it has returned, or was never called).
  ~ConnectionLoop();
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  // Serves until stop(): then stops accepting, closes every connection not being served,
  // waits for the requests at workers to be answered, closes the rest and returns OK.
  // Failure: epoll_wait's error (requests at workers are answered, then every connection is
  // closed all the same).
  // Returns at once (OK) if stop() came first.
  Status run();

  // Makes run() return soon (see run()). Any thread, any number of times; does not wait.
  void stop();

  // Connections refused at the limit so far, from any thread (for tests).
  uint64_t refused_connections() const { return refused_.load(); }

 private:
  struct Connection;
  enum class State { kWaitingHead, kWaitingBody, kBusy, kClosing };

  ConnectionLoop(UniqueFd listener, UniqueFd epoll, UniqueFd wake, ConnectionLimits limits,
                 ConnectionCallbacks callbacks);

  void accept_all();
  void admit(UniqueFd fd);
  void on_readable(Connection& c);
  void read_more(Connection& c);
  void progress(Connection& c);
  void dispatch(Connection& c);
  void serve_on_worker(Connection* c, bool close_after);
  void on_returned(uint64_t id, bool keep);
  void on_deadline(Connection& c);
  void end_unfinished_head(Connection& c);
  void refuse(Connection& c, int status, const std::string& message, const std::string& code);
  void send_refusal(Connection& c, const httplib::Response& response);
  void finish(Connection& c);
  void close_now(Connection& c);
  void watch(Connection& c, bool on);
  void set_deadline(Connection& c, std::chrono::steady_clock::time_point when);
  void begin_stop();
  int next_timeout_ms() const;

  UniqueFd listener_;
  const UniqueFd epoll_;
  const UniqueFd wake_;  // an eventfd: stop() and the workers' returns
  const ConnectionLimits limits_;
  const ConnectionCallbacks callbacks_;
  WorkerPool pool_;

  // Loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::set<std::pair<std::chrono::steady_clock::time_point, uint64_t>> deadlines_;
  uint64_t next_id_ = 2;  // 0: the listener, 1: the wake-up descriptor
  size_t active_ = 0;     // waiting or busy
  size_t closing_ = 0;
  size_t busy_ = 0;
  bool stopping_ = false;
  bool listener_paused_ = false;
  std::chrono::steady_clock::time_point listener_resumes_{};

  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> refused_{0};
  Mutex returned_mutex_;
  std::vector<std::pair<uint64_t, bool>> returned_ SIESTA_GUARDED_BY(returned_mutex_);
};

}  // namespace siesta::server
