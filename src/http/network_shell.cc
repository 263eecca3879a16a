#include "http/network_shell.h"

#include <boost/asio/io_context.hpp>

namespace atrium::http {

Result<boost::asio::ip::tcp::endpoint> ListenEndpoint(const std::string& host_in, int port) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port < 0 || port > 65535) {
    return Error::InvalidArgument("port out of range: " + std::to_string(port));
  }
  boost::system::error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, static_cast<unsigned short>(port));
  net::io_context resolver_context;
  tcp::resolver resolver(resolver_context);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    return Error::Unavailable("cannot resolve listen host " + host_in + ": " +
                              (ec ? ec.message() : "no addresses"));
  }
  return results.begin()->endpoint();
}

}  // namespace atrium::http
