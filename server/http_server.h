// HttpServer: the lifecycle of siesta-server's listening socket (bind, serve, stop) around
// cpp-httplib. The routes themselves are in routes.h.
//
// Typical use (main.cc):
//   HttpServer http(app);
//   Result<int> port = http.bind(host, 0);      // the port is known before serving
//   print "listening on ..."; start a thread that calls http.stop() on SIGTERM
//   Status served = http.run();                 // returns after stop()
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "core/base/status.h"
#include "server/server_app.h"

namespace httplib {
class Server;
}

namespace siesta::server {

// "http://HOST:PORT", with an IPv6 host in brackets.
std::string http_url(const std::string& host, int port);

class HttpServer {
 public:
  // Registers the routes and limits request bodies to app.config().max_body_bytes (a larger
  // one is answered 413 with an OpenAI-style error, its handler never runs); serves nothing
  // until run(). `app` must outlive this object.
  explicit HttpServer(ServerApp& app);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens on host:port; port 0 lets the OS pick a free one. Connections queue
  // from here on and are answered once run() starts.
  // Success: the bound port. Failure: IoError naming the address (in use, no such host,
  // permission denied...). REQUIRES: called once, before run().
  Result<int> bind(const std::string& host, int port);

  // Serves on the calling thread until stop(). Returns OK once stopped (in-flight requests
  // finished), IoError when the listening loop failed. Returns at once if stop() came first.
  // REQUIRES: bind() succeeded; called once.
  Status run();

  // Makes run() return, and waits until it has (when it is running). Safe from any thread,
  // before, during or after run(), any number of times. REQUIRES: not called from a request
  // handler (run() waits for the handlers to finish).
  void stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_requested_ = false;
  bool running_ = false;
  bool finished_ = false;
  bool stop_sent_ = false;  // httplib::Server::stop() was called (it must be, exactly once)
};

}  // namespace siesta::server
