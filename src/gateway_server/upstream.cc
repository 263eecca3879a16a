#include "gateway_server/upstream.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace atrium::gateway_server {

namespace ssl = boost::asio::ssl;
namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using Millis = std::chrono::milliseconds;

Result<UpstreamAddress> ParseUpstreamUrl(const std::string& url) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kHttps = "https://";
  UpstreamAddress out;
  std::string rest;
  if (url.rfind(kHttps, 0) == 0) {
    out.tls = true;
    rest = url.substr(kHttps.size());
  } else if (url.rfind(kHttp, 0) == 0) {
    rest = url.substr(kHttp.size());
  } else {
    return Error::InvalidArgument("endpoint " + url + ": not http:// or https://");
  }
  const std::string default_port = out.tls ? "443" : "80";
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) out.base_path = rest.substr(slash);
  while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  if (authority.empty() || authority.find('@') != std::string::npos) {
    return Error::InvalidArgument("endpoint " + url + ": bad host");
  }
  out.host_header = authority;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) return Error::InvalidArgument("endpoint " + url + ": bad host");
    out.host = authority.substr(1, close - 1);
    out.port = close + 1 < authority.size() && authority[close + 1] == ':'
                   ? authority.substr(close + 2)
                   : default_port;
  } else {
    size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    out.port = colon == std::string::npos ? default_port : authority.substr(colon + 1);
  }
  if (out.host.empty() || out.port.empty()) {
    return Error::InvalidArgument("endpoint " + url + ": bad host or port");
  }
  return out;
}

Result<std::shared_ptr<ssl::context>> MakeUpstreamTlsContext(const std::string& extra_ca_file) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1,
                       ec);
  if (!ec) context->set_verify_mode(ssl::verify_peer, ec);
  if (!ec) context->set_default_verify_paths(ec);
  if (ec) return Error::Internal("TLS client set-up: " + ec.message());
  if (!extra_ca_file.empty()) {
    context->load_verify_file(extra_ca_file, ec);
    if (ec) {
      return Error::InvalidArgument("cannot load the upstream CA file '" + extra_ca_file +
                                    "': " + ec.message());
    }
  }
  return context;
}

Status ExpectPeer(boost::beast::ssl_stream<boost::beast::tcp_stream>& stream,
                  const std::string& host) {
  SSL* ssl = stream.native_handle();
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  const bool is_ip = !ec;
  bool ok = true;
  if (is_ip) {  // no SNI for an address (RFC 6066); the certificate must name it
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  } else {
    // "*.example.com" may match a name, "w*.example.com" may not.
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 && SSL_set1_host(ssl, host.c_str()) == 1;
  }
  if (!ok) {
    ERR_clear_error();
    return Error::InvalidArgument("cannot expect a TLS certificate for '" + host + "'");
  }
  return OkStatus();
}

std::unique_ptr<UpstreamConnection> UpstreamPool::TakeIdle(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = idle_.find(url);
  if (it == idle_.end() || it->second.empty()) return nullptr;
  auto connection = std::move(it->second.back());
  it->second.pop_back();
  connection->reused = true;
  return connection;
}

void UpstreamPool::GiveBack(const std::string& url,
                            std::unique_ptr<UpstreamConnection> connection) {
  std::lock_guard lock(mu_);
  auto& idle = idle_[url];
  if (idle.size() < max_idle_per_endpoint_) idle.push_back(std::move(connection));
}

std::vector<boost::asio::ip::tcp::endpoint> UpstreamPool::Cached(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = resolved_.find(url);
  return it == resolved_.end() ? std::vector<boost::asio::ip::tcp::endpoint>{} : it->second;
}

void UpstreamPool::Remember(const std::string& url,
                            std::vector<boost::asio::ip::tcp::endpoint> endpoints) {
  std::lock_guard lock(mu_);
  resolved_[url] = std::move(endpoints);
}

void UpstreamPool::Forget(const std::string& url) {
  std::lock_guard lock(mu_);
  resolved_.erase(url);
  idle_.erase(url);
}

void UpstreamPool::Clear() {
  std::lock_guard lock(mu_);
  idle_.clear();
  resolved_.clear();
}

boost::asio::awaitable<std::unique_ptr<UpstreamConnection>> ConnectUpstream(
    UpstreamPool& pool, const std::string& url, const UpstreamAddress& address,
    boost::asio::ssl::context* tls_context, int timeout_ms, std::string& why,
    const AddressCheck* check) {
  beast::error_code ec;
  auto executor = co_await net::this_coro::executor;
  std::vector<tcp::endpoint> endpoints = pool.Cached(url);
  if (endpoints.empty()) {
    tcp::resolver resolver(executor);
    auto results = co_await resolver.async_resolve(address.host, address.port,
                                                   net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      why = "cannot resolve " + address.host + ": " + ec.message();
      co_return nullptr;
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
    pool.Remember(url, endpoints);
  }
  if (check != nullptr && *check) {
    for (const tcp::endpoint& endpoint : endpoints) {
      if (std::string refused = (*check)(endpoint); !refused.empty()) {
        why = std::move(refused);
        co_return nullptr;
      }
    }
  }
  if (address.tls && tls_context == nullptr) {  // never https in cleartext
    why = "no TLS set-up for " + url;
    co_return nullptr;
  }
  auto connection =
      std::make_unique<UpstreamConnection>(executor, address.tls ? tls_context : nullptr);
  beast::tcp_stream& tcp_layer = connection->tcp();
  tcp_layer.expires_after(Millis(timeout_ms));
  co_await tcp_layer.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    pool.Forget(url);
    why = "cannot connect to " + url + ": " + ec.message();
    co_return nullptr;
  }
  beast::error_code ignored;
  tcp_layer.socket().set_option(tcp::no_delay(true), ignored);
  if (connection->tls) {
    if (auto expected = ExpectPeer(*connection->tls, address.host); !expected.has_value()) {
      why = expected.error().message;
      co_return nullptr;
    }
    co_await connection->tls->async_handshake(net::ssl::stream_base::client,
                                              net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      why = "TLS handshake with " + url + " failed: " + ec.message();
      // Which check the certificate failed (wrong host, unknown CA, expired).
      const long verify = SSL_get_verify_result(connection->tls->native_handle());
      if (verify != X509_V_OK)
        why += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
      co_return nullptr;
    }
  }
  tcp_layer.expires_never();
  co_return connection;
}

}  // namespace atrium::gateway_server
