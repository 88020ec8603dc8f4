#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/routes.h"

namespace siesta::server {
namespace {

// Fills the body of an error response that has none (cpp-httplib's own 400 for a request it
// cannot parse, 413 for an oversized body...) so every error is OpenAI-shaped.
httplib::Server::HandlerResponse fill_empty_error(uint64_t max_body_bytes,
                                                  const httplib::Request& request,
                                                  httplib::Response& response) {
  if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  if (response.status == 413) {
    set_api_error(response, 413,
                  "request body too large: the limit is " + std::to_string(max_body_bytes) +
                      " bytes (--max-body-bytes)",
                  "invalid_request_error", "request_too_large");
    return httplib::Server::HandlerResponse::Handled;
  }
  // cpp-httplib 0.11 answers a POST without Content-Length (curl -X POST with no -d) with a
  // bare 400 before routing; say what is missing.
  const bool unframed =
      (request.method == "POST" || request.method == "PUT" || request.method == "PATCH") &&
      !request.has_header("Content-Length") && !request.has_header("Transfer-Encoding");
  const std::string reason = response.status != 400
                                 ? "HTTP error " + std::to_string(response.status)
                             : unframed ? "malformed request: a " + request.method +
                                              " needs a Content-Length header (0 for an empty body)"
                                        : "malformed request";
  set_api_error(response, response.status, reason,
                response.status >= 500 ? "server_error" : "invalid_request_error",
                response.status >= 500 ? "internal" : "bad_request");
  return httplib::Server::HandlerResponse::Handled;
}

// A handler that throws must not take the worker thread (or the process) with it.
void answer_exception(const httplib::Request&, httplib::Response& response,
                      std::exception_ptr error) {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  set_api_error(response, 500, "internal error: " + what, "server_error", "internal");
}

// cpp-httplib's default sets SO_REUSEPORT on Linux, which lets a second server bind a port
// that one is already listening on, and the kernel then splits connections between them: a
// client would reach a different session at random. SO_REUSEADDR alone still allows a quick
// restart over connections in TIME_WAIT, but refuses a live listener.
void listening_socket_options(socket_t sock) {
  int yes = 1;
  (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

}  // namespace

std::string http_url(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HttpServer::HttpServer(ServerApp& app) : server_(std::make_unique<httplib::Server>()) {
  server_->set_socket_options(listening_socket_options);
  // cpp-httplib 0.11 checks Content-Length against this before buffering the body (and a
  // chunked body as it grows), answers 413 and calls the error handler, which fills in the
  // OpenAI-style body.
  server_->set_payload_max_length(app.config().max_body_bytes);
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [limit = app.config().max_body_bytes](const httplib::Request& request,
                                            httplib::Response& response) {
        return fill_empty_error(limit, request, response);
      }));
  server_->set_exception_handler(answer_exception);
  register_routes(*server_, app);
}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::bind(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  // cpp-httplib reports only success or failure, so the message cannot say why.
  if (bound <= 0) {
    return IoError("cannot listen on " + http_url(host, port) +
                   " (address in use, unknown host or no permission)");
  }
  return bound;
}

Status HttpServer::run() {
  {
    std::lock_guard lock(mutex_);
    if (stop_requested_) return Status::Ok();
    running_ = true;
  }
  bool clean = false;
  std::string failure = "the HTTP listening loop failed";
  try {
    clean = server_->listen_after_bind();
  } catch (const std::exception& e) {
    // Its worker threads could not start, say; stop() must still see run() finish.
    failure += std::string(": ") + e.what();
  }
  bool stopped;
  {
    std::lock_guard lock(mutex_);
    running_ = false;
    finished_ = true;
    stopped = stop_requested_;
  }
  changed_.notify_all();
  // listen_after_bind() returns false both when stopped and when accept() failed; only the
  // latter is an error.
  if (!clean && !stopped) return IoError(failure);
  return Status::Ok();
}

void HttpServer::stop() {
  std::unique_lock lock(mutex_);
  stop_requested_ = true;
  // httplib's stop() does nothing until its loop has started (is_running()), and run() may
  // be between our flag check and that point: look again until it has. It must also be
  // called only once: a second call while the loop drains its workers trips an assert in
  // the library. Hence the poll and the stop_sent_ flag.
  while (running_) {
    if (!stop_sent_ && server_->is_running()) {
      server_->stop();
      stop_sent_ = true;
    }
    changed_.wait_for(lock, std::chrono::milliseconds(stop_sent_ ? 1000 : 10));
  }
}

}  // namespace siesta::server
