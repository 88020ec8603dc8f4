// HttpServer: siesta-server's HTTP layer: the listening socket (bind, serve, stop), the
// connection loop that holds every client connection (connection_loop.h: deadlines, the
// connection limit, pipelining) and cpp-httplib, which parses each whole request the loop
// hands it and runs the routes (routes.h).
//
// Why not cpp-httplib alone: 0.11's server gives each connection a thread of a fixed pool for
// as long as it is open and bounds each read, not a request, so a few idle or trickling
// clients hold every thread (docs/PERFORMANCE.md has the measurement); it drops the bytes of
// a pipelined request; and Debian's libcpp-httplib.so has its listen backlog (5) and pool
// size compiled in, so the CPPHTTPLIB_* macros cannot change them. Its request parser,
// router and response writer are kept: Server::process_request() runs on a Stream, and the
// loop gives it one over the bytes already received.
//
// With --cors-origin, every answer carries the CORS headers the request policy decides
// (RequestPolicy::cors_headers): the loop's refusals of a head or body get them from the
// screens, and everything cpp-httplib writes (routed and streamed answers, a preflight's 204,
// its own errors) from its post-routing handler, just before the head is written. A
// preflight is not answered by the loop: it goes on to a worker, where the pre-routing
// handler answers it, so its connection stays open for the request the browser sends next.
//
// Typical use (main.cc):
//   HttpServer http(app);
//   Result<int> port = http.bind(host, 0);      // the port is known before serving
//   print "listening on ..."; start a thread that calls http.stop() on SIGTERM
//   Status served = http.run();                 // returns after stop()
#pragma once

#include <condition_variable>
#include <memory>
#include <string>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "server/server_app.h"

namespace siesta::server {

class ConnectionLoop;
class RequestPolicy;

// "http://HOST:PORT", with an IPv6 host in brackets.
std::string http_url(const std::string& host, int port);

class HttpServer {
 public:
  // Registers the routes and the request policy (request_policy.h: a body over
  // app.config().max_body_bytes is answered 413 before it is read, and so on); serves nothing
  // until run(). `app` must outlive this object.
  explicit HttpServer(ServerApp& app);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens on host:port; port 0 lets the OS pick a free one. Connections queue
  // from here on and are answered once run() starts.
  // Success: the bound port. Failure: IoError naming the address (in use, no such host,
  // permission denied...), or the error setting up the connection loop. REQUIRES: called
  // once, before run().
  Result<int> bind(const std::string& host, int port);

  // Serves on the calling thread until stop(). Returns OK once stopped (in-flight requests
  // answered, every connection closed), or the connection loop's error. Returns at once if
  // stop() came first. REQUIRES: bind() succeeded; called once.
  Status run() SIESTA_EXCLUDES(mutex_);

  // Makes run() return, and waits until it has (when it is running). Safe from any thread,
  // before, during or after run(), any number of times. REQUIRES: not called from a request
  // handler (run() waits for the handlers to finish).
  void stop() SIESTA_EXCLUDES(mutex_);

 private:
  class RoutedServer;

  ServerApp& app_;
  std::unique_ptr<RoutedServer> server_;
  std::shared_ptr<const RequestPolicy> policy_;
  // Set by bind(), before run() and stop() may read it (ConnectionLoop::stop() is safe from
  // any thread).
  std::unique_ptr<ConnectionLoop> loop_;
  // Guards run()'s and stop()'s meeting: whether stop() came, whether run() serves.
  Mutex mutex_;
  std::condition_variable changed_;  // run() returned
  bool stop_requested_ SIESTA_GUARDED_BY(mutex_) = false;
  bool running_ SIESTA_GUARDED_BY(mutex_) = false;
};

}  // namespace siesta::server
