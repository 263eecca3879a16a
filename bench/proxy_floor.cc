// The floor under the gateway's design: a reverse proxy built from the same
// pieces as src/gateway_server (Boost.Asio C++20 coroutines, one
// single-threaded io_context per thread with connections dealt round-robin,
// beast::tcp_stream on both sides with the same per-operation timeouts,
// Beast's HTTP parsers, a keep-alive pool per loop) and nothing else: no
// authentication, JSON, limits, fair queue, routing or metering. Measured
// beside nginx and the gateway (bench/gateway_wrk.sh with PROXY_FLOOR set),
// it tells how much of the gateway's distance to nginx is the I/O design
// and how much the work the gateway does per request.
//
// usage: proxy_floor LISTEN_PORT UPSTREAM_HOST:PORT [THREADS]
// prints "proxy-floor listening on http://127.0.0.1:PORT" once ready.
#include <array>
// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using net::awaitable;
using tcp = net::ip::tcp;

namespace {

constexpr auto kTimeout = std::chrono::seconds(30);

struct Upstream {
  explicit Upstream(const net::any_io_executor& executor) : stream(executor) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// One loop: its keep-alive connections to the upstream.
struct Loop {
  net::io_context io{1};
  std::vector<std::unique_ptr<Upstream>> idle;
  tcp::endpoint upstream;
};

awaitable<void> Serve(Loop& loop, tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    beast::error_code ec;
    bhttp::request_parser<bhttp::string_body> parser;
    client.expires_after(kTimeout);
    co_await bhttp::async_read(client, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    auto request = parser.release();
    std::unique_ptr<Upstream> up;
    if (!loop.idle.empty()) {
      up = std::move(loop.idle.back());
      loop.idle.pop_back();
    } else {
      up = std::make_unique<Upstream>(loop.io.get_executor());
      up->stream.expires_after(kTimeout);
      co_await up->stream.async_connect(loop.upstream, net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      up->stream.socket().set_option(tcp::no_delay(true));
    }
    std::string head = std::string(request.method_string()) + " " + std::string(request.target()) +
                       " HTTP/1.1\r\nHost: upstream\r\nContent-Type: application/json\r\n"
                       "Content-Length: " +
                       std::to_string(request.body().size()) + "\r\n\r\n";
    std::array<net::const_buffer, 2> out{net::buffer(head), net::buffer(request.body())};
    up->stream.expires_after(kTimeout);
    co_await net::async_write(up->stream, out, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    bhttp::response_parser<bhttp::string_body> response;
    co_await bhttp::async_read(up->stream, up->buffer, response,
                               net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    const std::string& body = response.get().body();
    std::string reply =
        "HTTP/1.1 " + std::to_string(response.get().result_int()) +
        " OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n";
    std::array<net::const_buffer, 2> back{net::buffer(reply), net::buffer(body)};
    client.expires_after(kTimeout);
    co_await net::async_write(client, back, net::redirect_error(net::use_awaitable, ec));
    client.expires_never();
    if (ec) break;
    loop.idle.push_back(std::move(up));
    if (!request.keep_alive()) break;
  }
  beast::error_code ignored;
  client.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

awaitable<void> Accept(tcp::acceptor& acceptor, std::vector<std::unique_ptr<Loop>>& loops) {
  size_t next = 0;
  for (;;) {
    Loop& loop = *loops[next];
    next = (next + 1) % loops.size();
    tcp::socket socket = co_await acceptor.async_accept(loop.io, net::use_awaitable);
    socket.set_option(tcp::no_delay(true));
    net::co_spawn(loop.io, Serve(loop, std::move(socket)), net::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: proxy_floor LISTEN_PORT UPSTREAM_HOST:PORT [THREADS]\n");
    return 2;
  }
  const std::string target = argv[2];
  const size_t colon = target.rfind(':');
  const tcp::endpoint upstream(net::ip::make_address(target.substr(0, colon)),
                               static_cast<unsigned short>(std::stoi(target.substr(colon + 1))));
  const int threads = argc > 3 ? std::stoi(argv[3]) : 2;
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < threads; ++i) {
    loops.push_back(std::make_unique<Loop>());
    loops.back()->upstream = upstream;
  }
  tcp::acceptor acceptor(loops[0]->io, {net::ip::make_address("127.0.0.1"),
                                        static_cast<unsigned short>(std::stoi(argv[1]))});
  std::printf("proxy-floor listening on http://127.0.0.1:%d\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  net::co_spawn(loops[0]->io, Accept(acceptor, loops), net::detached);
  std::vector<std::thread> running;
  for (auto& loop : loops) {
    running.emplace_back([&loop] {
      auto guard = net::make_work_guard(loop->io);
      loop->io.run();
    });
  }
  for (auto& t : running) t.join();
  return 0;
}
