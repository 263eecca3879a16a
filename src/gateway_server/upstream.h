// Upstream endpoints as the gateway's I/O sees them: the address parsed from
// a deployment endpoint URL, connecting to it (TCP, or TLS with the
// certificate checked), and a pool of idle keep-alive connections per
// endpoint so that a request rarely pays for a TCP handshake.
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace atrium::gateway_server {

struct UpstreamAddress {
  std::string host;         // name or address, without brackets
  std::string port;         // "80" (http) or "443" (https) when the URL has none
  std::string base_path;    // "" or "/prefix" (no trailing slash)
  std::string host_header;  // what goes into Host:
  bool tls = false;         // https
};

// "http://host[:port][/prefix]" or "https://...".
Result<UpstreamAddress> ParseUpstreamUrl(const std::string& url);

// The client-side TLS settings for https endpoints: TLS 1.2 or later, the
// peer's certificate checked against the system's CAs plus those in
// `extra_ca_file` (PEM; "" for none), e.g. a private CA of the model servers.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeUpstreamTlsContext(
    const std::string& extra_ca_file);

// Prepares `stream` for a handshake with `host`: SNI (for a name) and the
// check that the certificate is for that name or IP address.
Status ExpectPeer(boost::beast::ssl_stream<boost::beast::tcp_stream>& stream,
                  const std::string& host);

// One connection to an endpoint: plain TCP, or TLS over TCP (https).
struct UpstreamConnection {
  UpstreamConnection(const boost::asio::any_io_executor& executor,
                     boost::asio::ssl::context* tls_context) {
    if (tls_context) {
      tls.emplace(executor, *tls_context);
    } else {
      plain.emplace(executor);
    }
  }
  // The TCP layer: timeouts, the socket.
  boost::beast::tcp_stream& tcp() { return tls ? tls->next_layer() : *plain; }
  // Calls f with the stream HTTP is spoken over; f's result is returned
  // (the same type for both, e.g. an awaitable<std::size_t>).
  template <class F>
  auto With(F&& f) {
    return tls ? f(*tls) : f(*plain);
  }

  std::optional<boost::beast::tcp_stream> plain;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls;
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

// Judges one resolved address of an endpoint before the gateway connects
// to it: "" to connect, else why not (the egress policy of a tenant's
// dedicated deployment: see gateway/egress_policy.h).
using AddressCheck = std::function<std::string(const boost::asio::ip::tcp::endpoint&)>;

// A fresh connection to one endpoint (its resolved addresses cached in
// `pool`), within `timeout_ms` including the TLS handshake of an https
// endpoint; never https in cleartext (no tls_context: a failure). With
// `check` (a pointer: no temporary with a destructor in a co_await
// expression, which g++ 12 may destroy twice), every address the host resolves to (cached or not)
// must pass it, or nothing is connected (DNS rebinding: the addresses are judged, not the name). On
// failure nullptr, and `why` says what failed (for a certificate: which check).
boost::asio::awaitable<std::unique_ptr<UpstreamConnection>> ConnectUpstream(
    UpstreamPool& pool, const std::string& url, const UpstreamAddress& address,
    boost::asio::ssl::context* tls_context, int timeout_ms, std::string& why,
    const AddressCheck* check = nullptr);

}  // namespace atrium::gateway_server
