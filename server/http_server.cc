#include "server/http_server.h"

#include <httplib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "core/base/unique_fd.h"
#include "server/api_error.h"
#include "server/connection_loop.h"
#include "server/request_policy.h"
#include "server/routes.h"

namespace siesta::server {
namespace {

// Fills the body of an error response that has none (cpp-httplib's own 400 for a request it
// cannot parse, 413 for an oversized body...) so every error is OpenAI-shaped.
httplib::Server::HandlerResponse fill_empty_error(uint64_t max_body_bytes, const httplib::Request&,
                                                  httplib::Response& response) {
  if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  if (response.status == 413) {
    set_api_error(response, 413,
                  "request body too large: the limit is " + std::to_string(max_body_bytes) +
                      " bytes (--max-body-bytes)",
                  "invalid_request_error", "request_too_large");
    return httplib::Server::HandlerResponse::Handled;
  }
  const std::string reason = response.status != 400
                                 ? "HTTP error " + std::to_string(response.status)
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

// The CORS headers the policy decides for `request` (request_policy.h), on its answer,
// whoever wrote it: the connection loop (a refusal of the head or body) or cpp-httplib (a
// routed answer, a streamed one before its first byte, a preflight's 204, an error).
void write_cors_headers(const RequestPolicy& policy, const httplib::Request& request,
                        httplib::Response& response) {
  for (auto& [name, value] : policy.cors_headers(request)) response.set_header(name, value);
  // cpp-httplib says "Content-Length: 0" for every empty body; a 204 must not (RFC 9110 8.6).
  if (response.status == 204) response.headers.erase("Content-Length");
}

ConnectionLimits limits_for(const ServerConfig& config) {
  ConnectionLimits limits;
  limits.max_connections = config.http_max_connections;
  limits.request_timeout = std::chrono::seconds(config.http_request_timeout_seconds);
  limits.max_body_bytes = config.max_body_bytes;
  return limits;
}

}  // namespace

// cpp-httplib's server with its request processing opened up: the connection loop calls it
// with a stream over one received request. Its own accept loop (listen_after_bind) is never
// run; it only binds the socket.
class HttpServer::RoutedServer : public httplib::Server {
 public:
  // Parses the request in `stream`, routes it and writes the answer. Returns whether the
  // connection may carry another request.
  bool serve(httplib::Stream& stream, bool close_after) {
    bool closed = false;
    const bool answered =
        process_request(stream, close_after, closed, [](httplib::Request& request) {
          // The loop has already said "100 Continue" where one was due, before the body came.
          request.headers.erase("Expect");
        });
    return answered && !closed;
  }

  socket_t listening_socket() const { return svr_sock_; }

  // After the loop has stopped: nothing streams any more, so the descriptor can go (and
  // cpp-httplib's streaming, which ends once it is INVALID_SOCKET, cannot see it earlier).
  void close_listening_socket() {
    const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) ::close(sock);
  }
};

std::string http_url(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HttpServer::HttpServer(ServerApp& app) : app_(app), server_(std::make_unique<RoutedServer>()) {
  server_->set_socket_options(listening_socket_options);
  // cpp-httplib checks Content-Length against this too (the policy refuses first), answers
  // 413 and calls the error handler, which fills in the OpenAI-style body.
  server_->set_payload_max_length(app.config().max_body_bytes);
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [limit = app.config().max_body_bytes](const httplib::Request& request,
                                            httplib::Response& response) {
        return fill_empty_error(limit, request, response);
      }));
  server_->set_exception_handler(answer_exception);
  // What the Keep-Alive header of an answer says: the loop's rules.
  const ConnectionLimits limits = limits_for(app.config());
  server_->set_keep_alive_timeout(
      std::chrono::duration_cast<std::chrono::seconds>(limits.request_timeout).count());
  server_->set_keep_alive_max_count(limits.max_requests);
  policy_ = register_routes(*server_, app);
  // Called by cpp-httplib just before it writes an answer's head, for every answer it writes.
  server_->set_post_routing_handler(
      [policy = policy_](const httplib::Request& request, httplib::Response& response) {
        write_cors_headers(*policy, request, response);
      });
}

HttpServer::~HttpServer() {
  stop();
  loop_.reset();
  server_->close_listening_socket();
}

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
  // The loop gets a descriptor of its own for the socket; cpp-httplib's stays open until the
  // loop is gone (see close_listening_socket).
  UniqueFd listener(::dup(server_->listening_socket()));
  if (!listener.valid()) return IoError("cannot listen on " + http_url(host, port) + ": dup()");
  ConnectionCallbacks callbacks;
  callbacks.screen = [policy = policy_](const httplib::Request& head, httplib::Response& response) {
    // A preflight goes on to a worker like any request; cpp-httplib's pre-routing handler
    // (the same policy) answers it there, so its connection stays open for the request the
    // browser sends next.
    if (policy->is_preflight(head) || policy->admit(head, response)) return true;
    write_cors_headers(*policy, head, response);  // a page of a listed origin reads why
    return false;
  };
  callbacks.screen_body = [policy = policy_](const httplib::Request& head, std::string_view body,
                                             httplib::Response& response) {
    if (policy->admit_body(head, body, response)) return true;
    write_cors_headers(*policy, head, response);
    return false;
  };
  callbacks.serve = [server = server_.get()](RequestStream& stream, bool close_after) {
    return server->serve(stream, close_after);
  };
  SIESTA_ASSIGN_OR_RETURN(
      loop_,
      ConnectionLoop::create(std::move(listener), limits_for(app_.config()), std::move(callbacks)));
  return bound;
}

Status HttpServer::run() {
  {
    MutexLock lock(mutex_);
    if (stop_requested_ || !loop_) return Status::Ok();
    running_ = true;
  }
  Status served = loop_->run();
  {
    MutexLock lock(mutex_);
    running_ = false;
  }
  changed_.notify_all();
  return served;
}

void HttpServer::stop() {
  MutexLock lock(mutex_);
  stop_requested_ = true;
  if (loop_) loop_->stop();
  lock.wait(changed_, [this]() SIESTA_REQUIRES(mutex_) { return !running_; });
}

}  // namespace siesta::server
