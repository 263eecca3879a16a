// HTTP/1.1 server (Boost.Beast) with keep-alive, limits on header and body
// size, read and idle timeouts, and a graceful stop that drains requests in
// flight. The handler is called on one of the server's I/O threads and must
// not block for long; it never sees a request that broke a limit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "http/message.h"

namespace atrium::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 4;
  size_t max_header_bytes = size_t{16} * 1024;  // larger: 431
  size_t max_body_bytes = size_t{1024} * 1024;  // larger: 413
  int read_timeout_ms = 30'000;                 // whole request must arrive within this
  int idle_timeout_ms = 60'000;                 // keep-alive connection with no request
  int max_connections = 10'000;                 // beyond: accept and close at once
  // Requests that may carry a larger body (uploads): given the method and
  // the target's path (not decoded), the body limit for that request; 0 =
  // max_body_bytes. The header is read first and the limit applied to its
  // Content-Length (413) and to what arrives. Called on an I/O thread.
  std::function<size_t(std::string_view method, std::string_view path)> body_limit_for;
};

using Handler = std::function<Response(Request&)>;

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  ~Server();  // Stop()s if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving on background threads. Returns the bound port.
  Result<int> Start();
  // Stops accepting, lets requests in flight finish (up to drain_timeout_ms),
  // closes idle connections, joins the threads. Idempotent.
  void Stop(int drain_timeout_ms = 10'000);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace atrium::http
