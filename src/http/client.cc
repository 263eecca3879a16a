// Client: a private io_context driven by the calling thread. Every step is an
// async operation run to completion with io_context::run(), because
// tcp_stream's timeouts apply to async operations only.

#include "http/client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

namespace atrium::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

constexpr std::uint64_t kMaxResponseBody = 64ull * 1024 * 1024;
constexpr std::uint32_t kMaxResponseHeader = 1024 * 1024;

struct ParsedUrl {
  std::string host;         // without brackets
  std::string port;         // decimal
  std::string host_header;  // as the Host header wants it
  std::string path_prefix;  // "" or "/prefix" without a trailing '/'
};

Result<ParsedUrl> ParseBaseUrl(const std::string& base_url) {
  std::string_view url = base_url;
  if (url.substr(0, 8) == "https://") return Error::InvalidArgument("https is not supported yet");
  if (url.substr(0, 7) != "http://") {
    return Error::InvalidArgument("base URL must start with http://: " + base_url);
  }
  url.remove_prefix(7);
  size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (authority.empty()) return Error::InvalidArgument("base URL has no host: " + base_url);

  ParsedUrl parsed;
  std::string_view port;
  if (authority.front() == '[') {  // IPv6 literal
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return Error::InvalidArgument("unterminated IPv6 address in " + base_url);
    }
    parsed.host = std::string(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Error::InvalidArgument("bad authority in " + base_url);
      port = rest.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    parsed.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (parsed.host.empty()) return Error::InvalidArgument("base URL has no host: " + base_url);
  if (port.empty()) port = "80";
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535 || std::stoi(std::string(port)) == 0) {
    return Error::InvalidArgument("bad port in base URL: " + base_url);
  }
  parsed.port = std::string(port);
  parsed.host_header = std::string(authority);
  if (authority.ends_with(":80")) {
    parsed.host_header.resize(parsed.host_header.size() - 3);
  }
  parsed.path_prefix = std::string(path);
  return parsed;
}

bool IsTimeout(const beast::error_code& ec) { return ec == beast::error::timeout; }

// Errors that mean "the server closed a connection we thought was idle".
bool IsStaleConnection(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == net::error::connection_aborted || ec == net::error::not_connected;
}

}  // namespace

struct Client::Impl {
  Impl(ParsedUrl url, int timeout_ms) : url(std::move(url)), timeout_ms(timeout_ms) {}

  // Runs the operation started by `initiate` to completion; returns its error.
  template <typename Initiate>
  beast::error_code RunOp(Initiate&& initiate) {
    beast::error_code result = net::error::operation_aborted;
    initiate([&result](beast::error_code ec, auto&&...) { result = ec; });
    io_context.restart();
    io_context.run();
    return result;
  }

  void Disconnect() {
    stream.close();
    buffer.clear();
    connected = false;
  }

  Status Connect() {
    beast::error_code ec;
    std::vector<tcp::endpoint> endpoints;
    auto address = net::ip::make_address(url.host, ec);
    if (!ec) {
      endpoints.emplace_back(address, static_cast<unsigned short>(std::stoi(url.port)));
    } else {
      tcp::resolver resolver(io_context);
      auto results = resolver.resolve(url.host, url.port, ec);
      if (ec) return Error::Unavailable("cannot resolve " + url.host + ": " + ec.message());
      for (const auto& entry : results) endpoints.push_back(entry.endpoint());
    }
    stream.expires_after(std::chrono::milliseconds(timeout_ms));
    ec = RunOp([&](auto handler) { stream.async_connect(endpoints, std::move(handler)); });
    if (ec) {
      Disconnect();
      return Error::Unavailable("cannot connect to " + url.host_header + ": " +
                                (IsTimeout(ec) ? "timed out" : ec.message()));
    }
    beast::error_code ignored;
    stream.socket().set_option(tcp::no_delay(true), ignored);
    connected = true;
    return OkStatus();
  }

  // One request and response on the current connection. `got_response_bytes`
  // tells the caller whether a retry could repeat a request the server saw.
  beast::error_code RoundTrip(bhttp::request<bhttp::string_body>& request, ClientResponse& response,
                              bool& got_response_bytes) {
    got_response_bytes = false;
    stream.expires_after(std::chrono::milliseconds(timeout_ms));
    beast::error_code ec =
        RunOp([&](auto handler) { bhttp::async_write(stream, request, std::move(handler)); });
    if (ec) return ec;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxResponseBody);
    parser.header_limit(kMaxResponseHeader);
    if (request.method() == bhttp::verb::head) parser.skip(true);
    ec =
        RunOp([&](auto handler) { bhttp::async_read(stream, buffer, parser, std::move(handler)); });
    got_response_bytes = parser.got_some();
    if (ec) return ec;
    auto& message = parser.get();
    response.status = static_cast<int>(message.result_int());
    response.headers.clear();
    for (const auto& field : message) {
      std::string name(field.name_string().data(), field.name_string().size());
      for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      std::string value(field.value().data(), field.value().size());
      auto [it, inserted] = response.headers.try_emplace(std::move(name), value);
      if (!inserted) it->second += ", " + value;
    }
    response.body = std::move(message.body());
    if (!message.keep_alive()) Disconnect();
    return {};
  }

  ParsedUrl url;
  int timeout_ms;
  net::io_context io_context{1};
  beast::tcp_stream stream{io_context};
  beast::flat_buffer buffer;
  bool connected = false;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() { impl_->Disconnect(); }

Result<std::unique_ptr<Client>> Client::Create(const std::string& base_url, int timeout_ms) {
  ATRIUM_ASSIGN_OR_RETURN(ParsedUrl url, ParseBaseUrl(base_url));
  if (timeout_ms <= 0) return Error::InvalidArgument("timeout_ms must be positive");
  // The connection is made by the first Send().
  return std::unique_ptr<Client>(new Client(std::make_unique<Impl>(std::move(url), timeout_ms)));
}

Result<ClientResponse> Client::Send(const std::string& method, const std::string& target,
                                    const std::string& body,
                                    const std::map<std::string, std::string>& headers) {
  if (method.empty()) return Error::InvalidArgument("empty HTTP method");
  if (target.empty() || target.front() != '/') {
    return Error::InvalidArgument("target must start with '/': " + target);
  }
  auto is_bad = [](const std::string& s) { return s.find_first_of("\r\n") != std::string::npos; };
  if (is_bad(method) || is_bad(target) || method.find(' ') != std::string::npos ||
      target.find(' ') != std::string::npos) {
    return Error::InvalidArgument("method and target must not contain spaces or line breaks");
  }
  bhttp::request<bhttp::string_body> request;
  request.version(11);
  request.method_string(method);
  request.target(impl_->url.path_prefix + target);
  request.set(bhttp::field::host, impl_->url.host_header);
  request.set(bhttp::field::user_agent, "atrium-cli");
  if (!body.empty()) request.set(bhttp::field::content_type, "application/json");
  for (const auto& [name, value] : headers) {
    if (name.empty() || is_bad(name) || is_bad(value) || name.find(':') != std::string::npos) {
      return Error::InvalidArgument("bad header: " + name);
    }
    request.set(name, value);
  }
  request.body() = body;
  request.prepare_payload();

  ClientResponse response;
  for (int attempt = 0;; ++attempt) {
    const bool reused = impl_->connected;
    if (!impl_->connected) ATRIUM_RETURN_IF_ERROR(impl_->Connect());
    bool got_response_bytes = false;
    beast::error_code ec = impl_->RoundTrip(request, response, got_response_bytes);
    if (!ec) return response;
    impl_->Disconnect();
    // A kept-alive connection the server has since closed fails before any
    // response byte arrives; that is worth exactly one fresh connection.
    if (reused && attempt == 0 && !got_response_bytes && IsStaleConnection(ec)) continue;
    return Error::Unavailable(method + " " + target + " to " + impl_->url.host_header +
                              " failed: " + (IsTimeout(ec) ? "timed out" : ec.message()));
  }
}

}  // namespace atrium::http
