// Upstream endpoints as the gateway's I/O sees them: the address parsed from
// a deployment endpoint URL, and a pool of idle keep-alive connections per
// endpoint so that a request rarely pays for a TCP handshake.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace atrium::gateway_server {

struct UpstreamAddress {
  std::string host;         // name or address, without brackets
  std::string port;         // "80" when the URL has none
  std::string base_path;    // "" or "/prefix" (no trailing slash)
  std::string host_header;  // what goes into Host:
};

// "http://host[:port][/prefix]". https endpoints are refused with a clear
// error (the gateway does not speak TLS to upstreams yet).
Result<UpstreamAddress> ParseUpstreamUrl(const std::string& url);

struct UpstreamConnection {
  explicit UpstreamConnection(const boost::asio::any_io_executor& executor) : stream(executor) {}
  boost::beast::tcp_stream stream;
  boost::beast::flat_buffer buffer;
  bool reused = false;  // came from the idle pool (may have been closed by the peer)
};

class UpstreamPool {
 public:
  explicit UpstreamPool(size_t max_idle_per_endpoint = 256)
      : max_idle_per_endpoint_(max_idle_per_endpoint) {}

  std::unique_ptr<UpstreamConnection> TakeIdle(const std::string& url);
  void GiveBack(const std::string& url, std::unique_ptr<UpstreamConnection> connection);

  // Resolved addresses are cached per URL; Forget() after a failed connect.
  std::vector<boost::asio::ip::tcp::endpoint> Cached(const std::string& url);
  void Remember(const std::string& url, std::vector<boost::asio::ip::tcp::endpoint> endpoints);
  void Forget(const std::string& url);
  void Clear();

 private:
  const size_t max_idle_per_endpoint_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
  std::unordered_map<std::string, std::vector<boost::asio::ip::tcp::endpoint>> resolved_;
};

}  // namespace atrium::gateway_server
