// RequestStream: the httplib::Stream that cpp-httplib parses one request from and writes its
// answer to. Reads come from memory: the bytes of exactly one request (head and body), which
// the connection loop has already received and framed, so parsing never waits for a client.
// Writes go to the client's socket (non-blocking; the loop owns it), each waiting at most
// `write_stall` for room: a client that stops reading its answer loses the connection
// instead of holding a worker for ever.
//
// Thread rule: one stream per request, used on the worker thread that serves it.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>
#include <string_view>

#include "server/connection_probe.h"

namespace siesta::server {

// The numeric addresses of a connection's two ends, as cpp-httplib puts them in a Request.
struct ConnectionAddresses {
  std::string remote_ip;
  int remote_port = 0;
  std::string local_ip;
  int local_port = 0;
};

// Fills `addresses` from the connected socket `fd` (getpeername/getsockname); fields it
// cannot learn stay empty / 0.
void read_connection_addresses(int fd, ConnectionAddresses& addresses);

class RequestStream final : public httplib::Stream {
 public:
  // `request`: the request's bytes (must outlive the stream). `watch`: told when the answer
  // starts, and consulted before each write (nullptr: none).
  RequestStream(int fd, std::string_view request, std::chrono::milliseconds write_stall,
                const ConnectionAddresses& addresses, ClientWatch* watch)
      : fd_(fd),
        request_(request),
        write_stall_(write_stall),
        addresses_(addresses),
        watch_(watch) {}

  bool is_readable() const override { return position_ < request_.size(); }
  // True when the socket takes bytes within write_stall.
  bool is_writable() const override;
  // Copies up to `size` of the request's remaining bytes; 0 at its end.
  ssize_t read(char* ptr, size_t size) override;
  // Writes all `size` bytes. Returns size, or -1 when the client is gone or did not make
  // room within write_stall (write_failed() is then true and stays true).
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

  bool write_failed() const { return write_failed_; }

 private:
  // Waits up to write_stall for room; false on a timeout or an error.
  bool wait_writable() const;

  const int fd_;
  const std::string_view request_;
  const std::chrono::milliseconds write_stall_;
  const ConnectionAddresses& addresses_;
  ClientWatch* const watch_;
  size_t position_ = 0;
  bool write_failed_ = false;
};

}  // namespace siesta::server
