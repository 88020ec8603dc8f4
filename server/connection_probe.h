// ClientWatch: finding out that an HTTP client has gone while its request is still being
// computed, so that its generation can be cancelled instead of run for nobody.
//
// The connection loop (connection_loop.h) gives each request it hands to a worker a watch
// over its own socket, current for the worker thread while the request is served (its
// handler, then the writing of its answer): current_client(). gone() polls the socket:
//   - a reset, or both directions shut: gone;
//   - the peer's FIN (it closed, or only shut down its sending side after the request with
//     shutdown(SHUT_WR), and still reads): TCP cannot tell the two apart. For an HTTP/1.1 request
//     whose answer has not started, the watch sends one interim "100 Continue" (RFC 9110
//     section 15.2: a client must accept unexpected 1xx answers before the final one): a peer that
//     has closed its socket answers it with a reset, which a later gone() sees; a half-closed one
//     reads it and then its answer. Once the answer has started, its own writes do the same. For
//     HTTP/1.0 (no 1xx allowed) a FIN counts as gone.
// Bytes waiting to be read (a pipelined next request) are left where they are.
//
// Thread rule: one watch per request, used only on the worker thread that serves it.
#pragma once

namespace siesta::server {

class ClientWatch {
 public:
  // `fd`: the request's connection (it stays open while the request is served).
  // `http11`: the request's version allows an interim answer. `peer_finished`: the loop has
  // already read the peer's FIN after the request.
  ClientWatch(int fd, bool http11, bool peer_finished)
      : fd_(fd), http11_(http11), peer_finished_(peer_finished) {}

  // True when the peer is known to be gone (see above). Never blocks; once true, stays true.
  bool gone();

  // Called when the first byte of the answer is written: no interim answer after that.
  void answer_started() { answer_started_ = true; }

  // True when the interim answer could be written only in part: nothing more may be written
  // on the connection (the answer would be garbled), and it must be closed.
  bool garbled() const { return garbled_; }

 private:
  const int fd_;
  const bool http11_;
  bool peer_finished_;
  bool answer_started_ = false;
  bool probed_ = false;
  bool gone_ = false;
  bool garbled_ = false;
};

// The watch of the request this thread is serving, or nullptr outside one (a handler served
// by a plain httplib::Server, in a test, has none: it learns of a departed client only from
// a failed write).
ClientWatch* current_client();

// Makes `watch` current for this thread for the scope's lifetime.
class ScopedClientWatch {
 public:
  explicit ScopedClientWatch(ClientWatch* watch);
  ~ScopedClientWatch();
  ScopedClientWatch(const ScopedClientWatch&) = delete;
  ScopedClientWatch& operator=(const ScopedClientWatch&) = delete;

 private:
  ClientWatch* previous_;
};

}  // namespace siesta::server
