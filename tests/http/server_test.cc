#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "http/client.h"

namespace atrium::http {
namespace {

// A plain blocking socket, for what the Client cannot send: garbage, partial
// requests, HTTP/1.0, pipelining. Reads give up after 5 s so a bug fails the
// test instead of hanging it.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // One response (header plus Content-Length bytes of body), or "" when the
  // connection closed or timed out first.
  std::string ReadResponse() {
    for (;;) {
      size_t end = pending_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        std::string lower = pending_.substr(0, end);
        for (char& c : lower) c = static_cast<char>(tolower(c));
        size_t cl = lower.find("content-length: ");
        if (cl != std::string::npos) length = std::stoul(lower.substr(cl + 16));
        if (pending_.size() >= end + 4 + length) {
          std::string response = pending_.substr(0, end + 4 + length);
          pending_.erase(0, end + 4 + length);
          return response;
        }
      }
      if (!ReadMore()) return "";
    }
  }

  // True when the peer closed the connection (and nothing else arrived).
  bool ReadEof() { return !ReadMore() && pending_.empty() && last_read_ == 0; }

 private:
  bool ReadMore() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    last_read_ = n;
    if (n <= 0) return false;
    pending_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  ssize_t last_read_ = -1;
  std::string pending_;
};

int StatusOf(const std::string& raw_response) {
  if (raw_response.size() < 12) return 0;
  return std::stoi(raw_response.substr(9, 3));
}

Response TextResponse(int status, std::string body) {
  Response response;
  response.status = status;
  response.content_type = "text/plain";
  response.body = std::move(body);
  return response;
}

Response Ok(Request&) { return TextResponse(200, "ok"); }

// A started server plus a client to it.
class RunningServer {
 public:
  explicit RunningServer(Handler handler, ServerOptions options = {})
      : server_(std::move(options), std::move(handler)) {
    auto port = server_.Start();
    EXPECT_TRUE(port.has_value()) << port.error().message;
    port_ = port.has_value() ? *port : 0;
  }

  Server& server() { return server_; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<Client> NewClient(int timeout_ms = 5'000) {
    auto client = Client::Create(url(), timeout_ms);
    EXPECT_TRUE(client.has_value());
    return std::move(client).value();
  }

 private:
  Server server_;
  int port_ = 0;
};

TEST(ServerTest, RoundTripCarriesPathQueryHeadersAndBody) {
  std::mutex mu;
  std::optional<Request> seen;
  RunningServer running([&](Request& request) {
    std::lock_guard lock(mu);
    seen = request;
    Response response = TextResponse(201, "echo:" + request.body);
    response.headers.emplace_back("X-Extra", "yes");
    return response;
  });
  auto client = running.NewClient();
  auto response =
      client->Send("POST", "/api/v1/things%20x/a+b?limit=10&name=a%2Bb+c&name=second&flag",
                   R"({"k":1})", {{"X-Custom", "Value"}});
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->body, R"(echo:{"k":1})");
  EXPECT_EQ(response->headers["content-type"], "text/plain");
  EXPECT_EQ(response->headers["x-extra"], "yes");
  EXPECT_EQ(response->headers["server"], "atrium");
  EXPECT_EQ(response->headers["content-length"], "12");

  std::lock_guard lock(mu);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->method, "POST");
  EXPECT_EQ(seen->target, "/api/v1/things%20x/a+b?limit=10&name=a%2Bb+c&name=second&flag");
  EXPECT_EQ(seen->path, "/api/v1/things x/a+b");  // '+' is only a space in the query
  EXPECT_EQ(seen->query.at("limit"), "10");
  EXPECT_EQ(seen->query.at("name"), "a+b c");  // the first of a repeated name
  EXPECT_EQ(seen->query.at("flag"), "");
  ASSERT_EQ(seen->query_all.size(), 4u);
  EXPECT_EQ(seen->query_all[2], (std::pair<std::string, std::string>("name", "second")));
  EXPECT_EQ(seen->Header("x-custom"), "Value");
  EXPECT_EQ(seen->Header("content-type"), "application/json");
  EXPECT_EQ(seen->Header("user-agent"), "atrium-cli");
  EXPECT_EQ(seen->body, R"({"k":1})");
  EXPECT_EQ(seen->remote_address, "127.0.0.1");
  EXPECT_FALSE(seen->request_id.empty());
  EXPECT_EQ(seen->request_id, response->headers["x-request-id"]);
}

TEST(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  std::atomic<int> calls{0};
  RunningServer running([&](Request& request) {
    return TextResponse(200, "call " + std::to_string(++calls) + " " + request.path);
  });
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.connected());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(connection.Send("GET /n" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string response = connection.ReadResponse();
    EXPECT_EQ(StatusOf(response), 200) << response;
    EXPECT_NE(response.find("call " + std::to_string(i) + " /n" + std::to_string(i)),
              std::string::npos);
  }
  // Two pipelined requests in one write are answered in order.
  ASSERT_TRUE(
      connection.Send("GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(connection.ReadResponse().find("/p1"), std::string::npos);
  EXPECT_NE(connection.ReadResponse().find("/p2"), std::string::npos);
  EXPECT_EQ(calls.load(), 5);
}

TEST(ServerTest, Http10ClosesAfterTheResponse) {
  RunningServer running(Ok);
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  std::string response = connection.ReadResponse();
  EXPECT_EQ(response.substr(0, 12), "HTTP/1.0 200");
  EXPECT_TRUE(connection.ReadEof());
}

TEST(ServerTest, ConnectionCloseClosesAfterTheResponse) {
  RunningServer running(Ok);
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string response = connection.ReadResponse();
  EXPECT_EQ(StatusOf(response), 200);
  EXPECT_NE(response.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(connection.ReadEof());
}

TEST(ServerTest, OversizedBodyGets413WithoutCallingTheHandler) {
  std::atomic<int> calls{0};
  ServerOptions options;
  options.max_body_bytes = 1024;
  RunningServer running(
      [&](Request& request) {
        ++calls;
        return Ok(request);
      },
      options);
  auto client = running.NewClient();
  auto response = client->Send("POST", "/upload", std::string(4096, 'x'));
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  EXPECT_NE(response->body.find(R"({"error":{"code":"payload_too_large","message":)"),
            std::string::npos)
      << response->body;
  EXPECT_NE(response->body.find(R"("request_id":")" + response->headers["x-request-id"] + "\""),
            std::string::npos);
  // A body within the limit still works (on a new connection: 413 closes).
  response = client->Send("POST", "/upload", std::string(1024, 'x'));
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(calls.load(), 1);
}

TEST(ServerTest, ChunkedBodyOverTheLimitGets413) {
  ServerOptions options;
  options.max_body_bytes = 10;
  RunningServer running(Ok, options);
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
      "8\r\n12345678\r\n0\r\n\r\n"));
  EXPECT_EQ(StatusOf(connection.ReadResponse()), 413);
}

TEST(ServerTest, HugeHeadersGet431) {
  RunningServer running(Ok);  // default limit: 16 KiB
  auto client = running.NewClient();
  auto response = client->Send("GET", "/", "", {{"X-Big", std::string(32 * 1024, 'h')}});
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->status, 431);
  EXPECT_NE(response->body.find(R"("code":"request_header_fields_too_large")"), std::string::npos);
}

TEST(ServerTest, GarbageGets400AndTheConnectionCloses) {
  RunningServer running(Ok);
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send("\x01\x02 this is not HTTP\r\n\r\n"));
  std::string response = connection.ReadResponse();
  EXPECT_EQ(StatusOf(response), 400) << response;
  EXPECT_NE(response.find(R"("code":"invalid_argument")"), std::string::npos);
  EXPECT_NE(response.find("X-Request-Id: req_"), std::string::npos);
  EXPECT_TRUE(connection.ReadEof());
}

TEST(ServerTest, BadPercentEscapeGets400) {
  std::atomic<int> calls{0};
  RunningServer running([&](Request& request) {
    ++calls;
    return Ok(request);
  });
  auto client = running.NewClient();
  for (const char* target : {"/a%zz", "/a%2", "/ok?x=%g1", "/ok?%=1", "/nul%00"}) {
    auto response = client->Send("GET", target);
    ASSERT_TRUE(response.has_value()) << response.error().message;
    EXPECT_EQ(response->status, 400) << target;
    EXPECT_NE(response->body.find(R"("code":"invalid_argument")"), std::string::npos);
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(ServerTest, EveryResponseHasADistinctRequestId) {
  RunningServer running(Ok);
  auto client = running.NewClient();
  std::set<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto response = client->Send("GET", "/");
    ASSERT_TRUE(response.has_value());
    const std::string& id = response->headers["x-request-id"];
    EXPECT_EQ(id.size(), 20u) << id;  // "req_" + 16 hex digits
    EXPECT_EQ(id.rfind("req_", 0), 0u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 5u);
}

TEST(ServerTest, ThrowingHandlerGets500) {
  RunningServer running([](Request&) -> Response { throw std::runtime_error("boom"); });
  auto response = running.NewClient()->Send("GET", "/");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 500);
  EXPECT_NE(response->body.find(R"("code":"internal")"), std::string::npos);
}

TEST(ServerTest, HandlerCannotBreakFraming) {
  RunningServer running([](Request&) {
    Response response = TextResponse(200, "abc");
    response.headers.emplace_back("Content-Length", "99");
    response.headers.emplace_back("X-Split", "a\r\nX-Injected: 1");
    response.headers.emplace_back("X-Fine", "1");
    return response;
  });
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string response = connection.ReadResponse();
  EXPECT_NE(response.find("Content-Length: 3\r\n"), std::string::npos) << response;
  EXPECT_EQ(response.find("Content-Length: 99"), std::string::npos);
  EXPECT_EQ(response.find("X-Injected"), std::string::npos);
  EXPECT_NE(response.find("X-Fine: 1"), std::string::npos);
}

TEST(ServerTest, ReadTimeoutMidRequestGets408) {
  ServerOptions options;
  options.read_timeout_ms = 100;
  RunningServer running(Ok, options);
  RawConnection connection(running.port());
  ASSERT_TRUE(connection.Send("GET / HTTP/1.1\r\nHost: x\r\n"));  // header never finished
  std::string response = connection.ReadResponse();               // arrives when the timeout fires
  EXPECT_EQ(StatusOf(response), 408) << response;
  EXPECT_NE(response.find(R"("code":"deadline_exceeded")"), std::string::npos);
}

TEST(ServerTest, ConnectionsBeyondTheMaximumAreClosedAtOnce) {
  ServerOptions options;
  options.max_connections = 1;
  RunningServer running(Ok, options);
  RawConnection first(running.port());
  ASSERT_TRUE(first.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(StatusOf(first.ReadResponse()), 200);  // admitted and kept alive
  RawConnection second(running.port());
  EXPECT_TRUE(second.ReadEof());
}

TEST(ServerTest, StartFailsWhenThePortIsTaken) {
  RunningServer running(Ok);
  ServerOptions options;
  options.port = running.port();
  Server second(options, Ok);
  auto port = second.Start();
  ASSERT_FALSE(port.has_value());
  EXPECT_EQ(port.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(port.error().message.find("127.0.0.1:" + std::to_string(running.port())),
            std::string::npos)
      << port.error().message;
}

TEST(ServerTest, StopDrainsTheRequestInFlight) {
  std::promise<void> entered;
  RunningServer running([&](Request& request) {
    if (request.path == "/slow") {
      entered.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the slow handler
    }
    return TextResponse(200, "done");
  });
  auto client = running.NewClient();
  auto pending = std::async(std::launch::async, [&] { return client->Send("GET", "/slow"); });
  entered.get_future().wait();
  running.server().Stop(5'000);
  auto response = pending.get();
  ASSERT_TRUE(response.has_value()) << response.error().message;
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "done");
  EXPECT_EQ(response->headers["connection"], "close");
  // Stopped: new connections are refused.
  EXPECT_FALSE(client->Send("GET", "/").has_value());
}

TEST(ServerTest, StopWithIdleConnectionsReturnsPromptly) {
  RunningServer running(Ok);
  auto client = running.NewClient();
  ASSERT_TRUE(client->Send("GET", "/").has_value());  // now an idle keep-alive connection
  RawConnection silent(running.port());               // connected, never sends
  RawConnection partial(running.port());
  ASSERT_TRUE(partial.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(StatusOf(partial.ReadResponse()), 200);

  auto start = std::chrono::steady_clock::now();
  running.server().Stop(10'000);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(2));
  EXPECT_TRUE(silent.ReadEof());
  EXPECT_TRUE(partial.ReadEof());
  running.server().Stop();  // idempotent
}

TEST(ServerTest, StopBeforeStartAndTwiceIsHarmless) {
  Server server(ServerOptions{}, Ok);
  server.Stop();
  server.Stop();
  EXPECT_FALSE(server.Start().has_value());  // stopped servers do not restart
}

}  // namespace
}  // namespace atrium::http
