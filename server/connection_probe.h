// Finding out that an HTTP client has gone while its request is still being computed.
//
// cpp-httplib 0.11 hands a handler the Request but not its socket, and only notices a closed
// connection when a write fails, which for a non-streamed answer is after the whole
// generation. The handler runs on the connection's thread while httplib holds the socket
// open, so the descriptor cannot close or be reused under us; find_connection() finds it once
// by its addresses (a TCP connection is the only socket with this local and remote address
// and port, listed in /proc/self/fd), and connection_gone() then polls it.
//
// Thread rule: any thread; the descriptor must stay open (true while the request's handler
// runs).
#pragma once

#include <httplib.h>

namespace siesta::server {

// The descriptor of `request`'s connection, or -1 when none matches (then only a failed
// write reveals a departed client).
int find_connection(const httplib::Request& request);

// True when the peer closed or reset the connection (or half-closed its sending side). Bytes
// waiting to be read (a pipelined next request) are left where they are. False for fd < 0.
bool connection_gone(int fd);

}  // namespace siesta::server
