// The gateway end to end: a real GatewayServer in front of real engine
// simulators, a policy built from rows the test controls, a usage journal
// shipping to an in-memory store. Requests go over loopback sockets.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine_sim/server.h"
#include "gateway/openai.h"
#include "gateway_server/gateway_server.h"
#include "gateway_server/upstream.h"
#include "identity/api_key.h"
#include "support/fault_injecting_file_system.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"
#include "support/wait.h"

namespace atrium::gateway_server {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;
using testing_support::ChangeSignal;
using testing_support::WaitUntil;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One HTTP exchange over a fresh socket, read until the response is complete
// (Content-Length or the last chunk) or the peer closes.
struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::vector<std::string> chunks;             // as framed on the wire
  int64_t first_body_ms = 0;                   // after sending
  int64_t last_body_ms = 0;
};

// A loopback port nothing listens on.
int DeadPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Everything the gateway logs while it lives (the operator's view).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(log_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
  }
  std::string Text() {
    spdlog::default_logger()->flush();
    return log_.str();
  }

 private:
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// A test rig's egress policy: the engine simulators run on loopback, so the
// operator of the rig opens it for tenants' dedicated deployments.
std::shared_ptr<gateway::EgressPolicy> LoopbackRig() {
  gateway::EgressRules rules;
  rules.allowed_networks = {*gateway::ParseIpNetwork("127.0.0.0/8"),
                            *gateway::ParseIpNetwork("::1/128")};
  return std::make_shared<gateway::EgressPolicy>(rules);
}

// What an https model endpoint looks like to the gateway: TLS terminated in
// front of a plain-HTTP server (as an ingress or sidecar does for vLLM), here
// bytes pumped both ways between a TLS connection and one to `backend_port`.
class TlsFront {
 public:
  TlsFront(int backend_port, const std::string& name)
      : tls_(boost::asio::ssl::context::tls_server),
        acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}),
        backend_port_(backend_port) {
    const std::string dir = ATRIUM_TEST_TLS_DIR;
    tls_.use_certificate_chain_file(dir + "/" + name + ".crt");
    tls_.use_private_key_file(dir + "/" + name + ".key", boost::asio::ssl::context::pem);
    port_ = acceptor_.local_endpoint().port();
    boost::asio::co_spawn(io_, Accept(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsFront() {
    io_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  int handshakes() const { return handshakes_.load(); }

 private:
  using Tcp = boost::asio::ip::tcp;
  using TlsStream = boost::asio::ssl::stream<Tcp::socket>;
  static auto Redirect(boost::system::error_code& ec) {
    return boost::asio::redirect_error(boost::asio::use_awaitable, ec);
  }

  boost::asio::awaitable<void> Accept() {
    for (;;) {
      boost::system::error_code ec;
      Tcp::socket socket = co_await acceptor_.async_accept(Redirect(ec));
      if (ec) co_return;
      boost::asio::co_spawn(io_, Serve(std::move(socket)), boost::asio::detached);
    }
  }

  boost::asio::awaitable<void> Serve(Tcp::socket socket) {
    auto client = std::make_shared<TlsStream>(std::move(socket), tls_);
    boost::system::error_code ec;
    co_await client->async_handshake(boost::asio::ssl::stream_base::server, Redirect(ec));
    if (ec) co_return;
    handshakes_.fetch_add(1);
    auto backend = std::make_shared<Tcp::socket>(io_);
    const Tcp::endpoint to(boost::asio::ip::make_address("127.0.0.1"),
                           static_cast<uint16_t>(backend_port_));
    co_await backend->async_connect(to, Redirect(ec));
    if (ec) co_return;
    boost::asio::co_spawn(io_, Pump(*client, *backend, client, backend), boost::asio::detached);
    co_await Pump(*backend, *client, client, backend);
  }

  // Copies from -> to until either side ends, then closes both.
  template <class From, class To>
  static boost::asio::awaitable<void> Pump(From& from, To& to, std::shared_ptr<TlsStream> client,
                                           std::shared_ptr<Tcp::socket> backend) {
    std::array<char, 16384> buf;
    for (;;) {
      boost::system::error_code ec;
      size_t n = co_await from.async_read_some(boost::asio::buffer(buf), Redirect(ec));
      if (ec) break;
      co_await boost::asio::async_write(to, boost::asio::buffer(buf.data(), n), Redirect(ec));
      if (ec) break;
    }
    boost::system::error_code ignored;
    client->next_layer().close(ignored);
    backend->close(ignored);
  }

  boost::asio::io_context io_;
  boost::asio::ssl::context tls_;
  Tcp::acceptor acceptor_;
  const int backend_port_;
  int port_ = 0;
  std::atomic<int> handshakes_{0};
  std::thread thread_;
};

// A listening TCP socket on 127.0.0.1 at a free port (written to `port`).
int ListenOnLoopback(int& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(fd, 16);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

// Reads one request from `c`: its head, then Content-Length bytes (less if
// the peer closes first).
std::string ReadOneRequest(int c) {
  std::string in;
  char buf[4096];
  for (;;) {
    size_t head_end = in.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      size_t cl = in.find("Content-Length: ");
      size_t want = cl == std::string::npos || cl > head_end ? 0 : std::stoul(in.substr(cl + 16));
      if (in.size() >= head_end + 4 + want) break;
    }
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

// A model server of the old school: answers every request with `status` and
// `body` (of `content_type`, after `extra_headers`) delimited by closing the
// connection (no Content-Length, not chunked); `body_after_ms` after the head
// when set, as a server whose head goes out before its prefill is done.
class CloseDelimitedServer {
 public:
  explicit CloseDelimitedServer(std::string body, std::string content_type = "application/json",
                                int body_after_ms = 0, std::string status = "200 OK",
                                std::string extra_headers = "")
      : body_(std::move(body)),
        content_type_(std::move(content_type)),
        body_after_ms_(body_after_ms),
        status_(std::move(status)),
        extra_headers_(std::move(extra_headers)) {
    fd_ = ListenOnLoopback(port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~CloseDelimitedServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  // The last request's head and body, as the server read them.
  std::string last_request() {
    std::lock_guard lock(mu_);
    return last_request_;
  }

 private:
  void Serve() {
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in = ReadOneRequest(c);
      {
        std::lock_guard lock(mu_);
        last_request_ = in;
      }
      const std::string head = "HTTP/1.1 " + status_ + "\r\n" + extra_headers_ +
                               "Content-Type: " + content_type_ + "\r\nConnection: close\r\n\r\n";
      ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
      if (body_after_ms_ > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(body_after_ms_));
      ::send(c, body_.data(), body_.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  const std::string body_;
  const std::string content_type_;
  const int body_after_ms_;
  const std::string status_;
  const std::string extra_headers_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::string last_request_;  // GUARDED_BY(mu_)
};

// A hostile model server: for each connection it reads the request, then
// `answer` writes whatever it likes to the socket; the connection is then
// held open (no end of body) until the gateway closes it or the server is
// destroyed, as a server that stalls would.
class HostileServer {
 public:
  explicit HostileServer(std::function<void(int fd)> answer) : answer_(std::move(answer)) {
    fd_ = ListenOnLoopback(port_);
    EXPECT_EQ(::pipe(stop_), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HostileServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    char byte = 1;
    EXPECT_EQ(::write(stop_[1], &byte, 1), 1);  // wakes a held connection
    thread_.join();
    ::close(fd_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Sends all of `bytes` (false when the gateway has gone).
  static bool SendAll(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

 private:
  void Serve() {
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ReadOneRequest(c);
      answer_(c);
      // Held until the gateway closes it or the test ends.
      for (;;) {
        pollfd p[2] = {{c, POLLIN, 0}, {stop_[0], POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 || p[1].revents != 0) {
          ::close(c);
          return;
        }
        char buf[4096];
        if (::recv(c, buf, sizeof buf, 0) <= 0) break;
      }
      ::close(c);
    }
  }

  const std::function<void(int fd)> answer_;
  int fd_ = -1;
  int port_ = 0;
  int stop_[2] = {-1, -1};
  std::thread thread_;
};

class Connection {
 public:
  explicit Connection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Connection() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }

  void Send(const std::string& method, const std::string& path, const std::string& body,
            const std::map<std::string, std::string>& headers = {}) {
    std::string text = method + " " + path + " HTTP/1.1\r\nHost: test\r\n";
    for (const auto& [k, v] : headers) text += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST") {
      text += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
              "\r\n";
    }
    text += "\r\n" + body;
    sent_ms_ = NowMs();
    ASSERT_EQ(::send(fd_, text.data(), text.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(text.size()));
  }

  void SendRaw(const std::string& text) {
    sent_ms_ = NowMs();
    ASSERT_EQ(::send(fd_, text.data(), text.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(text.size()));
  }

  // Reads until `marker` has arrived (or the timeout); returns what arrived.
  std::string ReadUntil(const std::string& marker, int timeout_ms = 5'000) {
    std::string raw;
    const int64_t deadline = NowMs() + timeout_ms;
    while (raw.find(marker) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(deadline - NowMs());
      if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
      char c;
      if (::recv(fd_, &c, 1, 0) <= 0) break;  // byte by byte: nothing past the marker is taken
      raw.push_back(c);
    }
    return raw;
  }

  // Reads `n` bytes (fewer on a timeout or the peer's close).
  std::string ReadBytes(size_t n, int timeout_ms) {
    std::string out;
    const int64_t deadline = NowMs() + timeout_ms;
    std::vector<char> buf(1 << 16);
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(deadline - NowMs());
      if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
      ssize_t got = ::recv(fd_, buf.data(), std::min(buf.size(), n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf.data(), static_cast<size_t>(got));
    }
    return out;
  }

  // Reads until `stop(bytes so far)` or the response is complete.
  RawResponse Read(int timeout_ms = 10'000, size_t stop_after_chunks = 0) {
    RawResponse r;
    std::string raw;
    size_t header_end = std::string::npos;
    const int64_t deadline = NowMs() + timeout_ms;
    for (;;) {
      if (header_end != std::string::npos && Complete(raw, header_end, r, stop_after_chunks)) break;
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(deadline - NowMs());
      if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
      char buf[8192];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<size_t>(n));
      if (header_end == std::string::npos) {
        header_end = raw.find("\r\n\r\n");
        if (header_end != std::string::npos) ParseHead(raw.substr(0, header_end), r);
      }
      if (header_end != std::string::npos && raw.size() > header_end + 4) {
        if (r.first_body_ms == 0) r.first_body_ms = NowMs() - sent_ms_;
        r.last_body_ms = NowMs() - sent_ms_;
      }
    }
    if (header_end != std::string::npos) Complete(raw, header_end, r, 0);
    return r;
  }

 private:
  static void ParseHead(const std::string& head, RawResponse& r) {
    r.status = std::stoi(head.substr(9, 3));
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos + 2 < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(c));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      pos = next;
    }
  }

  // Decodes what has arrived; true once the whole body is here.
  static bool Complete(const std::string& raw, size_t header_end, RawResponse& r,
                       size_t stop_after_chunks) {
    std::string body = raw.substr(header_end + 4);
    if (r.headers.count("content-length")) {
      size_t want = std::stoul(r.headers["content-length"]);
      r.body = body.substr(0, want);
      return body.size() >= want;
    }
    r.body.clear();
    r.chunks.clear();
    size_t pos = 0;
    for (;;) {
      size_t line_end = body.find("\r\n", pos);
      if (line_end == std::string::npos) return false;
      size_t size = std::stoul(body.substr(pos, line_end - pos), nullptr, 16);
      if (size == 0) return true;
      if (body.size() < line_end + 2 + size + 2) return false;
      std::string chunk = body.substr(line_end + 2, size);
      r.chunks.push_back(chunk);
      r.body += chunk;
      pos = line_end + 2 + size + 2;
      if (stop_after_chunks > 0 && r.chunks.size() >= stop_after_chunks) return true;
    }
  }

  int fd_ = -1;
  bool connected_ = false;
  int64_t sent_ms_ = 0;
};

// SSE "data: ..." payloads of a body.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end == std::string::npos ? body.size() : end;
  }
  return out;
}

struct MemoryStore {
  std::mutex mu;
  std::map<std::string, UsageRecord> rows;
  ChangeSignal changed;  // after every insert
  Status Insert(const std::vector<UsageRecord>& records) {
    {
      std::lock_guard lock(mu);
      for (const auto& r : records) rows.emplace(r.id, r);
    }
    changed.Notify();
    return OkStatus();
  }
  std::optional<UsageRecord> Get(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = rows.find(id);
    if (it == rows.end()) return std::nullopt;
    return it->second;
  }
  size_t size() {
    std::lock_guard lock(mu);
    return rows.size();
  }
  std::map<std::string, int64_t> refusals;  // "<tenant> <key> <reason>" -> count
  Status AddRefusals(const std::vector<RefusalCount>& counts) {
    {
      std::lock_guard lock(mu);
      for (const auto& c : counts) {
        refusals[c.tenant_id + " " + c.key_id + " " + c.reason] += c.count;
      }
    }
    changed.Notify();
    return OkStatus();
  }
  int64_t Refusals(const std::string& what) {
    std::lock_guard lock(mu);
    auto it = refusals.find(what);
    return it == refusals.end() ? 0 : it->second;
  }
};

// The port of a URL "http://127.0.0.1:PORT".
int PortOf(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("atrium-gw");
    rows_.tenants = {TenantRow("tn_a", 1), TenantRow("tn_b", 1)};
    key_a_ = AddKey("tn_a", "tenant-member");
    key_b_ = AddKey("tn_b", "tenant-member");
    viewer_ = AddKey("tn_a", "tenant-viewer");
  }

  void TearDown() override {
    if (gateway_) gateway_->Stop(1000);
    gateway_.reset();
    if (policy_) policy_->Stop();
    if (journal_) journal_->Stop();
    sims_.clear();
    std::filesystem::remove_all(dir_);
  }

  static Tenant TenantRow(const std::string& id, int64_t weight) {
    Tenant t;
    t.id = id;
    t.name = id;
    t.tier = "shared";
    t.weight = weight;
    t.state = "active";
    return t;
  }

  std::string AddKey(const std::string& tenant, const std::string& role) {
    GeneratedApiKey k = GenerateApiKey();
    GatewayKeyRow row;
    row.key.id = k.key_id;
    row.key.tenant_id = tenant;
    row.key.owner_user_id = "usr_" + k.key_id;
    row.key.role = role;
    row.key.secret_hash = k.secret_hash;
    row.owner_state = "active";
    row.owner_role = role;
    rows_.keys.push_back(row);
    key_ids_[k.text] = k.key_id;
    return k.text;
  }

  // Starts an engine simulator; returns its URL.
  std::string StartSim(const std::string& profile, int max_batch = 0) {
    engine_sim::ServerOptions o;
    o.model = "sim-model";
    o.profile = profile;
    o.max_batch = max_batch;
    auto sim = std::make_unique<engine_sim::Server>(o);
    auto port = sim->Start();
    EXPECT_TRUE(port.has_value());
    sims_.push_back(std::move(sim));
    return "http://127.0.0.1:" + std::to_string(*port);
  }

  // What the engine simulator at `url` served: its /sim/served requests.
  static Json Served(const std::string& url) {
    Connection c(PortOf(url));
    c.Send("GET", "/sim/served", "");
    return Json::parse(c.Read().body)["requests"];
  }

  void AddDeployment(const std::string& id, std::vector<DeploymentEndpoint> endpoints,
                     const std::vector<std::string>& entitled = {"tn_a", "tn_b"}) {
    DeploymentRecord d;
    d.id = id;
    d.model = "sim-model";
    d.endpoints = std::move(endpoints);
    d.region = "eu-1";
    d.latency_tier = "interactive";
    d.visibility = "shared";
    rows_.deployments.push_back(d);
    for (const auto& t : entitled) rows_.entitlements.push_back({t, "sim-model", 0});
  }

  // A dedicated deployment of `model` for `tenant`, as a tenant admin
  // would have made it (or a row that got into the store some other way).
  void AddDedicated(const std::string& id, const std::string& tenant, const std::string& url,
                    const std::string& model = "sim-model") {
    DeploymentRecord d;
    d.id = id;
    d.model = model;
    d.endpoints = {{url, 8}};
    d.region = "eu-1";
    d.latency_tier = "interactive";
    d.visibility = "dedicated";
    d.tenant_id = tenant;
    rows_.deployments.push_back(d);
  }

  // Until `n` requests wait in `dep`'s queue (the dispatcher tells of each
  // change), or a timeout only a broken run reaches.
  void AwaitQueued(const std::string& dep, size_t n) {
    EXPECT_TRUE(dispatched_.WaitUntil([&] { return gateway_->dispatcher().QueuedFor(dep) == n; }))
        << n << " waiting in " << dep;
  }

  // Until `n` requests run on `url` as an endpoint of `dep`.
  void AwaitRunning(const std::string& dep, const std::string& url, int n) {
    EXPECT_TRUE(dispatched_.WaitUntil([&] {
      return gateway_->dispatcher().OutstandingOn(dep, url) == n;
    })) << n
        << " running on " << url;
  }

  // Tenant A's stream on `busy` takes dep_1's only slot; tenant B's request
  // on a new connection, returned, then waits in the queue for it.
  std::unique_ptr<Connection> QueueBehindTheOnlySlot(Connection& busy) {
    busy.Send("POST", "/v1/chat/completions", ChatBody(50, true),
              {{"Authorization", "Bearer " + key_a_}});
    busy.Read(10'000, 1);
    auto waiting = std::make_unique<Connection>(port_);
    waiting->Send("POST", "/v1/chat/completions", ChatBody(1, false),
                  {{"Authorization", "Bearer " + key_b_}});
    AwaitQueued("dep_1", 1);
    return waiting;
  }

  void StartGateway(GatewayOptions options = {}, int health_interval_ms = 200) {
    UsageJournalOptions journal_options{dir_.string(), 10, 10, 100, 16 << 20};
    journal_options.files = journal_files_;
    journal_ = std::make_unique<UsageJournal>(
        journal_options, [this](const std::vector<UsageRecord>& r) { return store_.Insert(r); });
    journal_->SetRefusalSink(
        [this](const std::vector<RefusalCount>& c) { return store_.AddRefusals(c); });
    ASSERT_OK(journal_->Start());
    policy_ =
        std::make_unique<PolicyLoader>(PolicySource{[this]() -> Result<int64_t> {
                                                      if (store_down_)
                                                        return Error::Unavailable("store down");
                                                      return marker_.load();
                                                    },
                                                    [this]() -> Result<GatewayPolicyRows> {
                                                      std::lock_guard lock(rows_mu_);
                                                      GatewayPolicyRows rows = rows_;
                                                      rows.marker = marker_.load();
                                                      return rows;
                                                    }},
                                       20);
    ASSERT_OK(policy_->Start());
    options.health_interval_ms = health_interval_ms;
    if (!options.egress) options.egress = LoopbackRig();
    options.dispatcher.on_change = [this] { dispatched_.Notify(); };
    gateway_ =
        std::make_unique<GatewayServer>(options, *policy_, *journal_, SystemClock::Instance());
    auto port = gateway_->Start();
    ASSERT_OK(port);
    port_ = *port;
  }

  void ChangeRows(const std::function<void(GatewayPolicyRows&)>& change) {
    {
      std::lock_guard lock(rows_mu_);
      change(rows_);
    }
    marker_.fetch_add(1);
    ASSERT_OK(policy_->Refresh());
  }

  static std::string ChatBody(int max_tokens, bool stream, bool include_usage = false) {
    Json body = {{"model", "sim-model"},
                 {"messages", {{{"role", "user"}, {"content", "Tell the gateway test a story."}}}},
                 {"max_tokens", max_tokens},
                 {"custom_field", {{"kept", true}}}};
    if (stream) body["stream"] = true;
    if (include_usage) body["stream_options"] = {{"include_usage", true}};
    return body.dump();
  }

  // POSTs `body` to `path` as `key` ("" = no Authorization).
  RawResponse PostTo(const std::string& path, const std::string& key, const std::string& body,
                     std::map<std::string, std::string> headers = {}) {
    Connection c(port_);
    if (!key.empty()) headers["Authorization"] = "Bearer " + key;
    c.Send("POST", path, body, headers);
    return c.Read();
  }

  RawResponse Post(const std::string& key, const std::string& body,
                   std::map<std::string, std::string> headers = {}) {
    return PostTo("/v1/chat/completions", key, body, std::move(headers));
  }

  // Waits until the journal shipped `n` refusals of `key` (a key's text) for `reason`.
  int64_t RefusalsOf(const std::string& tenant, const std::string& key, const std::string& reason,
                     int64_t n) {
    const std::string what = tenant + " " + key_ids_[key] + " " + reason;
    store_.changed.WaitUntil([&] { return store_.Refusals(what) >= n; });
    return store_.Refusals(what);
  }

  // Waits until the journal shipped the record of request `id`.
  std::optional<UsageRecord> RecordOf(const std::string& id) {
    store_.changed.WaitUntil([&] { return store_.Get(id).has_value(); });
    return store_.Get(id);
  }

  std::filesystem::path dir_;
  std::mutex rows_mu_;
  GatewayPolicyRows rows_;
  std::atomic<int64_t> marker_{1};
  std::atomic<bool> store_down_{false};
  std::map<std::string, std::string> key_ids_;
  std::string key_a_, key_b_, viewer_;
  std::vector<std::unique_ptr<engine_sim::Server>> sims_;
  MemoryStore store_;
  ChangeSignal dispatched_;  // the gateway's dispatcher changed (on_change)
  // The journal's files: the disk, unless a test fails their writes.
  FaultInjectingFileSystem journal_disk_;
  FileSystem* journal_files_ = nullptr;  // &journal_disk_ when a test injects faults
  std::unique_ptr<UsageJournal> journal_;
  std::unique_ptr<PolicyLoader> policy_;
  std::unique_ptr<GatewayServer> gateway_;
  int port_ = 0;
};

TEST_F(GatewayTest, RelaysACompletionAndMetersItOnce) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(7, false));
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  const std::string id = r.headers["x-request-id"];
  ASSERT_FALSE(id.empty());
  auto record = RecordOf(id);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->tenant_id, "tn_a");
  EXPECT_EQ(record->key_id, key_ids_[key_a_]);
  EXPECT_EQ(record->deployment_id, "dep_1");
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 7);
  EXPECT_EQ(record->input_tokens, body["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_FALSE(record->stream);
  EXPECT_EQ(sims_[0]->Served().finished, 1);
}

TEST_F(GatewayTest, WhenItsUsageCannotBeJournaledARequestDoesNotSucceed) {
  // The journal on a full disk: every write to it fails with ENOSPC.
  journal_disk_.Inject(
      {.op = FileOp::kWrite, .path_suffix = "/usage.journal", .and_after = true, .error = ENOSPC});
  journal_files_ = &journal_disk_;
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(3, false));
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("usage_unavailable"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("completion_tokens"), std::string::npos) << "the answer is withheld";
  EXPECT_EQ(r.headers["connection"], "close");
  // A refusal bills nothing: it still goes out as it is.
  RawResponse refused =
      Post(key_a_, R"({"model":"nope","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(refused.status, 404) << refused.body;
  // A stream is cut off before its end: the client never sees [DONE].
  RawResponse s = Post(key_a_, ChatBody(3, true));
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.body.find("[DONE]"), std::string::npos) << s.body;
  EXPECT_EQ(sims_[0]->Served().finished, 2);  // the work was done; nobody got it as a success
}

TEST_F(GatewayTest, PromptsAndCompletionsAreNeitherLoggedNorStored) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  const std::string prompt = "the-secret-plan-0xC0FFEE";
  Json body = {{"model", "sim-model"},
               {"messages", {{{"role", "user"}, {"content", prompt}}}},
               {"max_tokens", 12}};
  // Everything the gateway would ever log, wherever the logger writes it.
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::trace);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  ::testing::internal::CaptureStderr();
  RawResponse plain = Post(key_a_, body.dump());
  body["stream"] = true;
  RawResponse streamed = Post(key_a_, body.dump());
  RawResponse failed =
      Post(key_a_, R"({"model":"sim-model","messages":"the-secret-plan-0xC0FFEE"})");
  spdlog::default_logger()->flush();
  const std::string logged = log.str() + ::testing::internal::GetCapturedStderr();
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::find(sinks.begin(), sinks.end(), sink));
  spdlog::set_level(level);
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  ASSERT_EQ(failed.status, 400) << failed.body;
  const std::string completion =
      Json::parse(plain.body)["choices"][0]["message"]["content"].get<std::string>();
  ASSERT_GE(completion.size(), 12u);
  ASSERT_TRUE(RecordOf(plain.headers["x-request-id"]).has_value());
  ASSERT_TRUE(RecordOf(streamed.headers["x-request-id"]).has_value());
  // The refused one is a count, whose reason is the gateway's own code.
  ASSERT_EQ(RefusalsOf("tn_a", key_a_, "invalid_request", 1), 1);
  journal_->Stop();  // everything it holds is in its files now
  std::vector<std::pair<std::string, std::string>> places = {{"the log", logged}};
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    places.emplace_back(entry.path().filename().string(), text.str());
  }
  {
    std::lock_guard lock(store_.mu);
    for (const auto& [id, r] : store_.rows) {
      places.emplace_back("record " + id, r.id + r.tenant_id + r.key_id + r.model +
                                              r.deployment_id + r.endpoint + r.api + r.status);
    }
  }
  for (const auto& [where, text] : places) {
    EXPECT_EQ(text.find(prompt), std::string::npos) << "the prompt is in " << where;
    EXPECT_EQ(text.find(completion), std::string::npos) << "the completion is in " << where;
  }
  EXPECT_GE(places.size(), 4u);  // the log, the journal's files, the records
}

TEST_F(GatewayTest, AStopWhoseDrainTimeRunsOutAnswersAndRecordsWhatItCuts) {
  // One slot, on a model server whose first token takes a minute.
  AddDeployment("dep_1", {{StartSim("idle"), 1}});
  StartGateway();
  RawResponse running, queued;
  std::thread first([&] { running = Post(key_a_, ChatBody(2, false)); });
  EXPECT_TRUE(WaitUntil([&] { return sims_[0]->Served().in_flight == 1; }));
  std::thread second([&] { queued = Post(key_b_, ChatBody(2, false)); });
  AwaitQueued("dep_1", 1);
  const auto stop_began = std::chrono::steady_clock::now();
  gateway_->Stop(200);
  EXPECT_LT(std::chrono::steady_clock::now() - stop_began, 3s);
  first.join();
  second.join();
  EXPECT_EQ(running.status, 503) << running.body;
  EXPECT_EQ(queued.status, 503) << queued.body;
  EXPECT_NE(running.body.find("the gateway is stopping"), std::string::npos) << running.body;
  auto ran = RecordOf(running.headers["x-request-id"]);
  ASSERT_TRUE(ran.has_value());
  EXPECT_EQ(ran->status, "interrupted");
  EXPECT_EQ(ran->http_status, 503);
  EXPECT_EQ(ran->endpoint, rows_.deployments[0].endpoints[0].url);
  // The queued one never reached a model server: counted, not recorded.
  EXPECT_FALSE(store_.Get(queued.headers["x-request-id"]).has_value());
  EXPECT_EQ(RefusalsOf("tn_b", key_b_, "service_unavailable", 1), 1);
}

TEST_F(GatewayTest, ANonStreamedAnswersFirstByteIsWhenTheWholeAnswerGoesOut) {
  // The engine simulator's H100 profile takes tens of milliseconds for 5 tokens.
  AddDeployment("dep_1", {{StartSim("h100-llama3-8b"), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(5, false));
  ASSERT_EQ(r.status, 200) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record);
  EXPECT_GT(record->ttft_ms, 10);
  EXPECT_LE(record->ttft_ms, record->total_ms);
}

TEST_F(GatewayTest, StreamsChunkByChunkAndHidesTheUsageChunkUnlessAsked) {
  AddDeployment("dep_1", {{StartSim("h100-llama3-8b"), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(20, true));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"].rfind("text/event-stream", 0), 0u);
  std::vector<std::string> events = Events(r.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  int content = 0;
  for (const auto& e : events) {
    if (e == "[DONE]") continue;
    Json chunk = Json::parse(e);
    EXPECT_FALSE(chunk.contains("usage") && !chunk["usage"].is_null()) << e;
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].value("content", "") != "") {
      ++content;
    }
  }
  EXPECT_EQ(content, 20);
  // Relayed as produced: the first event well before the last.
  EXPECT_GT(r.chunks.size(), 5u);
  EXPECT_LT(r.first_body_ms * 2, r.last_body_ms);
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record);
  EXPECT_TRUE(record->stream);
  EXPECT_EQ(record->output_tokens, 20);
  EXPECT_GT(record->ttft_ms, 0);

  RawResponse with_usage = Post(key_a_, ChatBody(5, true, true));
  ASSERT_EQ(with_usage.status, 200);
  events = Events(with_usage.body);
  ASSERT_GE(events.size(), 2u);
  Json usage_chunk = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 5);
}

// OpenAI's Responses API, relayed like chat: whole and streamed (typed
// response.* events, no [DONE]), metered from response.completed's usage,
// salted per tenant; what needs stored responses is refused before any
// upstream sees it.
TEST_F(GatewayTest, RelaysTheResponsesApiWholeAndStreamedAndMetersIt) {
  const std::string url = StartSim("h100-llama3-8b");
  AddDeployment("dep_1", {{url, 8}});
  StartGateway();
  const auto post = [&](const std::string& key, const Json& body) {
    return PostTo("/v1/responses", key, body.dump());
  };
  Json body = {{"model", "sim-model"},
               {"input", "Tell the gateway test a story."},
               {"max_output_tokens", 7}};
  RawResponse whole = post(key_a_, body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  Json response = Json::parse(whole.body);
  EXPECT_EQ(response["object"], "response");
  EXPECT_EQ(response["usage"]["output_tokens"], 7);
  auto record = RecordOf(whole.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->api, "responses");
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 7);
  EXPECT_EQ(record->input_tokens, response["usage"]["input_tokens"].get<int64_t>());

  body["stream"] = true;
  RawResponse streamed = post(key_b_, body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.headers["content-type"].rfind("text/event-stream", 0), 0u);
  // Stopped by max_output_tokens: the last event is response.incomplete.
  EXPECT_NE(streamed.body.find("event: response.incomplete"), std::string::npos);
  EXPECT_EQ(streamed.body.find("[DONE]"), std::string::npos);
  int deltas = 0;
  for (size_t at = 0;
       (at = streamed.body.find("response.output_text.delta", at)) != std::string::npos; ++at) {
    ++deltas;
  }
  EXPECT_EQ(deltas, 2 * 7);  // each named on its event: line and in its data
  record = RecordOf(streamed.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_TRUE(record->stream);
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 7);
  EXPECT_GT(record->ttft_ms, 0);

  body["previous_response_id"] = response["id"];  // a's response, asked for by b
  RawResponse refused = post(key_b_, body);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("previous_response_id"), std::string::npos) << refused.body;

  const Json served = Served(url);
  ASSERT_EQ(served.size(), 2u);  // the refused one never went up
  EXPECT_EQ(served[0]["endpoint"], "responses");
  EXPECT_NE(served[0]["cache_salt"], "");
  EXPECT_NE(served[0]["cache_salt"], served[1]["cache_salt"]);
}

// vLLM's rerank and score relayed and metered: all input, no output, never
// salted (a pooling request has no prefix cache to share).
TEST_F(GatewayTest, RelaysRerankAndScoreAndMetersThemAsInput) {
  const std::string url = StartSim("instant");
  AddDeployment("dep_1", {{url, 8}});
  StartGateway();
  const auto post = [&](const std::string& path, const Json& body) {
    return PostTo(path, key_a_, body.dump());
  };
  RawResponse rerank = post(
      "/v1/rerank",
      {{"model", "sim-model"}, {"query", "which GPU"}, {"documents", {"an H100", "a toaster"}}});
  ASSERT_EQ(rerank.status, 200) << rerank.body;
  const Json ranked = Json::parse(rerank.body);
  ASSERT_EQ(ranked["results"].size(), 2u);
  auto record = RecordOf(rerank.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->api, "rerank");
  EXPECT_EQ(record->input_tokens, ranked["usage"]["total_tokens"].get<int64_t>());
  EXPECT_EQ(record->output_tokens, 0);

  RawResponse score =
      post("/v1/score", {{"model", "sim-model"}, {"text_1", "which GPU"}, {"text_2", "an H100"}});
  ASSERT_EQ(score.status, 200) << score.body;
  record = RecordOf(score.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->api, "score");
  EXPECT_EQ(record->input_tokens, Json::parse(score.body)["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(record->output_tokens, 0);

  RawResponse bad = post("/v1/rerank", {{"model", "sim-model"}, {"query", "q"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("documents"), std::string::npos) << bad.body;
  const Json served = Served(url);
  ASSERT_EQ(served.size(), 2u);  // the malformed one never went up
  EXPECT_EQ(served[0]["cache_salt"], "");
}

// A transcription: a multipart body relayed as sent (its boundary with it),
// metered from the usage the model server reports, or from the text when it
// answers bare text; refused before any model server when the form is bad.
TEST_F(GatewayTest, RelaysTranscriptionFormsAndMetersThem) {
  const std::string url = StartSim("instant");
  AddDeployment("dep_1", {{url, 8}});
  StartGateway();
  const auto form = [](const std::string& format, const std::string& model) {
    std::string body = "--zz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model +
                       "\r\n--zz\r\nContent-Disposition: form-data; name=\"file\"; "
                       "filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n" +
                       std::string(32000, 'w') + "\r\n";
    if (!format.empty()) {
      body += "--zz\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\n" + format +
              "\r\n";
    }
    return body + "--zz--\r\n";
  };
  const auto post = [&](const std::string& key, const std::string& body) {
    return PostTo("/v1/audio/transcriptions", key, body,
                  {{"Content-Type", "multipart/form-data; boundary=zz"}});
  };
  RawResponse json_answer = post(key_a_, form("", "sim-model"));
  ASSERT_EQ(json_answer.status, 200) << json_answer.body;
  const Json answer = Json::parse(json_answer.body);
  auto record = RecordOf(json_answer.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->api, "audio.transcriptions");
  EXPECT_EQ(record->input_tokens, answer["usage"]["input_tokens"].get<int64_t>());
  EXPECT_EQ(record->output_tokens, answer["usage"]["output_tokens"].get<int64_t>());

  RawResponse text_answer = post(key_a_, form("text", "sim-model"));
  ASSERT_EQ(text_answer.status, 200) << text_answer.body;
  EXPECT_EQ(text_answer.body, answer["text"]);
  record = RecordOf(text_answer.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, static_cast<int64_t>(text_answer.body.size() + 3) / 4);

  EXPECT_EQ(post("", form("", "sim-model")).status, 401);
  EXPECT_EQ(post(key_a_, form("", "no-such-model")).status, 404);
  EXPECT_EQ(post(key_a_, "--zz--\r\n").status, 400);  // no model, no file
  EXPECT_EQ(Served(url).size(), 2u);
}

// Prefix-cache isolation: the gateway salts every request with its
// tenant's own cache_salt, so a tenant's repeated prompt is served from its
// cache and another tenant's identical prompt is not — even when that
// tenant names the first one's salt itself, twice, or under an escaped key.
TEST_F(GatewayTest, EachTenantHasItsOwnPrefixCacheWhateverItSends) {
  const std::string url = StartSim("instant");
  AddDeployment("dep_1", {{url, 8}});
  StartGateway();
  const auto ask = [&](const std::string& key, const std::string& prompt,
                       const std::string& extra = "") {
    Json body = {{"model", "sim-model"},
                 {"messages", {{{"role", "user"}, {"content", prompt}}}},
                 {"max_tokens", 1}};
    std::string text = body.dump();
    if (!extra.empty()) text = "{" + extra + "," + text.substr(1);
    RawResponse r = Post(key, text);
    EXPECT_EQ(r.status, 200) << r.body;
    Json answer = Json::parse(r.body, nullptr, false);
    auto record = RecordOf(r.headers["x-request-id"]);
    const int64_t cached = answer["usage"]["prompt_tokens_details"].value("cached_tokens", -1);
    EXPECT_TRUE(record.has_value());
    if (record) {
      EXPECT_EQ(record->cached_tokens, cached);  // metered as the engine said
    }
    return cached;
  };
  const std::string story(2000, 's');
  EXPECT_EQ(ask(key_a_, story), 0);
  EXPECT_GT(ask(key_a_, story), 400);  // a's own prefix: served from its cache
  EXPECT_EQ(ask(key_b_, story), 0);    // the same prompt from b: nothing of a's

  // The salt a's requests carried, as the engine saw them.
  const auto salts = [&] {
    std::vector<std::string> out;
    const Json served = Served(url);
    for (const Json& r : served) {
      out.push_back(r["cache_salt"]);
    }
    return out;
  }();
  ASSERT_EQ(salts.size(), 3u);
  EXPECT_EQ(salts[0], salts[1]);
  EXPECT_NE(salts[0], salts[2]);
  EXPECT_FALSE(salts[0].empty());
  const std::string a_salt = salts[0];

  // b names a's salt (as it is, twice, and under an escaped key) for a
  // prompt a has cached: b still gets nothing from a's cache.
  const std::string secret(2000, 'p');
  EXPECT_EQ(ask(key_a_, secret), 0);
  EXPECT_EQ(ask(key_b_, secret,
                "\"cache_salt\":\"" + a_salt + "\",\"cache\\u005fsalt\":\"" + a_salt +
                    "\",\"cache_salt\":\"" + a_salt + "\""),
            0);
  EXPECT_GT(ask(key_a_, secret), 400);
  const Json served = Served(url);
  ASSERT_EQ(served.size(), 6u);
  EXPECT_EQ(served[4]["cache_salt"], salts[2]);  // b's own, not a's
}

// Turned off (for engines that refuse the field), the body goes up as the
// client wrote it.
TEST_F(GatewayTest, WithoutCacheSaltsTheClientsBodyGoesUpAsItIs) {
  const std::string url = StartSim("instant");
  AddDeployment("dep_1", {{url, 8}});
  GatewayOptions options;
  options.set_cache_salt = false;
  StartGateway(options);
  Json body = Json::parse(ChatBody(1, false));
  ASSERT_EQ(Post(key_a_, body.dump()).status, 200);
  body["cache_salt"] = "clients-own";
  ASSERT_EQ(Post(key_a_, body.dump()).status, 200);
  const Json served = Served(url);
  ASSERT_EQ(served.size(), 2u);
  EXPECT_EQ(served[0]["cache_salt"], "");
  EXPECT_EQ(served[1]["cache_salt"], "clients-own");
}

TEST_F(GatewayTest, RefusesBadCredentialsInOpenAIsShape) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  RawResponse none = Post("", ChatBody(1, false));
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(Json::parse(none.body)["error"].contains("message"));
  EXPECT_EQ(Post("atr_garbage", ChatBody(1, false)).status, 401);
  EXPECT_EQ(Post(viewer_, ChatBody(1, false)).status, 403);
  // No tenant, or no right to call: nothing to bill. The journal ships in
  // order, so once a later request's record is in, an earlier one would be.
  RawResponse billed = Post(key_a_, ChatBody(1, false));
  ASSERT_EQ(billed.status, 200);
  ASSERT_TRUE(RecordOf(billed.headers["x-request-id"]).has_value());
  EXPECT_EQ(store_.size(), 1u);
}

TEST_F(GatewayTest, UnknownAndUnentitledModelsLookTheSame) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}}, {"tn_a"});
  StartGateway();
  RawResponse unknown =
      Post(key_a_, R"({"model":"nope","messages":[{"role":"user","content":"hi"}]})");
  RawResponse unentitled = Post(key_b_, ChatBody(1, false));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unentitled.status, 404);
  EXPECT_EQ(Json::parse(unknown.body)["error"]["code"], "model_not_found");
  std::string a = Json::parse(unknown.body)["error"]["message"];
  std::string b = Json::parse(unentitled.body)["error"]["message"];
  EXPECT_EQ(a.replace(a.find("nope"), 4, "sim-model"), b);
}

// Every inference path, not only chat: no key, a forged key, a foreign
// tenant's model, a viewer's key, a key scoped to another model, a wrong
// method — each refused before any model server sees it; and numbers the
// caller chose at their largest are the model server's to refuse, with
// nothing overflowing on the way.
TEST_F(GatewayTest, EveryInferencePathAuthenticatesAndEntitlesBeforeRelaying) {
  const std::string url = StartSim("instant");
  AddDeployment("dep_1", {{url, 8}}, {"tn_a"});  // tn_b is not entitled
  const std::string scoped = AddKey("tn_a", "tenant-member");
  rows_.keys.back().key.scopes = {"another-model"};
  StartGateway();
  const std::map<gateway::Api, Json> bodies = {
      {gateway::Api::kChatCompletions,
       {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}}},
      {gateway::Api::kCompletions, {{"prompt", "hi"}, {"max_tokens", 1}}},
      {gateway::Api::kEmbeddings, {{"input", "hi"}}},
      {gateway::Api::kResponses, {{"input", "hi"}, {"max_output_tokens", 1}}},
      {gateway::Api::kRerank, {{"query", "hi"}, {"documents", {"a"}}}},
      {gateway::Api::kScore, {{"text_1", "hi"}, {"text_2", "a"}}}};
  for (auto [api, body] : bodies) {
    body["model"] = "sim-model";
    const std::string path(gateway::PathOf(api));
    const auto send = [&](const std::string& method, const std::string& key) {
      Connection c(port_);
      std::map<std::string, std::string> headers;
      if (!key.empty()) headers["Authorization"] = "Bearer " + key;
      c.Send(method, path, method == "POST" ? body.dump() : "", headers);
      return c.Read();
    };
    EXPECT_EQ(send("POST", "").status, 401) << path;
    EXPECT_EQ(send("POST", "atr_forged").status, 401) << path;
    EXPECT_EQ(send("POST", key_b_).status, 404) << path;  // not entitled: no such model for b
    EXPECT_EQ(send("POST", viewer_).status, 403) << path;
    EXPECT_EQ(send("POST", scoped).status, 404) << path;  // outside the key's scope
    EXPECT_EQ(send("GET", key_a_).status, 405) << path;
    EXPECT_EQ(send("POST", key_a_).status, 200) << path;
  }
  EXPECT_EQ(Served(url).size(), bodies.size());  // a's only

  const int64_t most = std::numeric_limits<int64_t>::max();
  const auto post = [&](gateway::Api api, Json body) {
    body["model"] = "sim-model";
    return PostTo(std::string(gateway::PathOf(api)), key_a_, body.dump());
  };
  Json chat = bodies.at(gateway::Api::kChatCompletions);
  chat["max_tokens"] = most;
  RawResponse huge_chat = post(gateway::Api::kChatCompletions, chat);
  EXPECT_EQ(huge_chat.status, 400) << huge_chat.body;  // the context is the limit
  Json responses = bodies.at(gateway::Api::kResponses);
  responses["max_output_tokens"] = most;
  EXPECT_EQ(post(gateway::Api::kResponses, responses).status, 400);
  Json rerank = bodies.at(gateway::Api::kRerank);
  rerank["top_n"] = most;
  RawResponse all = post(gateway::Api::kRerank, rerank);
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(Json::parse(all.body)["results"].size(), 1u);
  auto record = RecordOf(huge_chat.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_GE(record->input_tokens, 0);
  EXPECT_GE(record->output_tokens, 0);
}

TEST_F(GatewayTest, BadRequestsGet400AndTheControlPlaneIsNotReachable) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  EXPECT_EQ(Post(key_a_, "{not json").status, 400);
  EXPECT_EQ(Post(key_a_, R"({"model":5,"messages":[]})").status, 400);
  EXPECT_EQ(Post(key_a_, ChatBody(1, false), {{"X-Atrium-Priority", "urgent"}}).status, 400);
  Connection c(port_);
  c.Send("GET", "/api/v1/tenants", "", {{"Authorization", "Bearer " + key_a_}});
  EXPECT_EQ(c.Read().status, 404);
  Connection m(port_);
  m.Send("GET", "/v1/models", "", {{"Authorization", "Bearer " + key_a_}});
  RawResponse models = m.Read();
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(Json::parse(models.body)["data"][0]["id"], "sim-model");
}

TEST_F(GatewayTest, ARequestThatArrivesTooSlowlyGets408) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  GatewayOptions options;
  options.read_timeout_ms = 300;
  StartGateway(options);
  Connection slow(port_);
  slow.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n");
  RawResponse r = slow.Read(5'000);
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "request_timeout");
  EXPECT_EQ(r.headers["connection"], "close");
  // A connection that sends nothing is closed without an answer.
  Connection quiet(port_);
  RawResponse none = quiet.Read(5'000);
  EXPECT_EQ(none.status, 0);
}

TEST_F(GatewayTest, AKeptAliveConnectionsShorterIdleTimeoutStillEndsASlowRequest) {
  // The connection's read timer was armed for the first request's longer
  // deadline; the second request's earlier one must still hold.
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  GatewayOptions options;
  options.read_timeout_ms = 20'000;
  options.idle_timeout_ms = 300;
  StartGateway(options);
  Connection c(port_);
  c.Send("POST", "/v1/chat/completions", ChatBody(2, false),
         {{"Authorization", "Bearer " + key_a_}});
  RawResponse first = c.Read(5'000);
  ASSERT_EQ(first.status, 200) << first.body;
  const int64_t start = NowMs();
  c.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n");
  RawResponse slow = c.Read(10'000);
  EXPECT_EQ(slow.status, 408);
  EXPECT_LT(NowMs() - start, 5'000);
}

TEST_F(GatewayTest, RateLimitAnswers429WithRetryAfterAndIsMetered) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  GatewayLimitRecord limit;
  limit.tenant_id = "tn_a";
  limit.limits.requests_per_minute = 2;
  rows_.limits.push_back(limit);
  StartGateway();
  EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 200);
  EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 200);
  RawResponse third = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(third.status, 429);
  EXPECT_FALSE(third.headers["retry-after"].empty());
  EXPECT_EQ(Post(key_b_, ChatBody(1, false)).status, 200);  // another tenant is not affected
  EXPECT_EQ(RefusalsOf("tn_a", key_a_, "rate_limit_exceeded", 1), 1);
}

// Issue 15 #10: one key flooding the gateway got 535,000 refusals in 35 s,
// each stored as a usage record of its own (~5 MB/s of database). Refusals
// are counted per key, reason and minute: served requests keep their
// records, refused ones make none.
TEST_F(GatewayTest, RefusedRequestsAreCountedNotRecordedOneByOne) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  GatewayLimitRecord limit;
  limit.tenant_id = "tn_a";
  limit.limits.requests_per_minute = 1;
  rows_.limits.push_back(limit);
  StartGateway();
  RawResponse served = Post(key_a_, ChatBody(1, false));
  ASSERT_EQ(served.status, 200);
  ASSERT_TRUE(RecordOf(served.headers["x-request-id"]).has_value());
  Connection c(port_);
  const std::string body = ChatBody(1, false);
  for (int i = 0; i < 200; ++i) {
    c.Send("POST", "/v1/chat/completions", body, {{"Authorization", "Bearer " + key_a_}});
    RawResponse r = c.Read();
    ASSERT_EQ(r.status, 429) << i;
  }
  RawResponse unknown =
      Post(key_a_, R"({"model":"nope","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(unknown.status, 404);
  EXPECT_EQ(RefusalsOf("tn_a", key_a_, "rate_limit_exceeded", 200), 200);
  EXPECT_EQ(RefusalsOf("tn_a", key_a_, "model_not_found", 1), 1);
  EXPECT_EQ(store_.size(), 1u) << "only the served request has a record";
  EXPECT_EQ(journal_->appended(), 1);
}

TEST_F(GatewayTest, AWaitingRequestPastItsDeadlineGets504) {
  AddDeployment("dep_1", {{StartSim("slow"), 1}});
  StartGateway();
  Connection busy(port_);
  busy.Send("POST", "/v1/chat/completions", ChatBody(50, true),
            {{"Authorization", "Bearer " + key_a_}});
  busy.Read(10'000, 1);  // it holds the only slot
  auto start = NowMs();
  RawResponse late = Post(key_b_, ChatBody(1, false), {{"X-Atrium-Deadline-Ms", "300"}});
  EXPECT_EQ(late.status, 504);
  EXPECT_GE(NowMs() - start, 250);
  EXPECT_LT(NowMs() - start, 3000);
}

TEST_F(GatewayTest, AClientThatLeavesTheQueueFreesItsPlace) {
  AddDeployment("dep_1", {{StartSim("slow"), 1}});
  StartGateway();
  Connection busy(port_);
  std::unique_ptr<Connection> waiting = QueueBehindTheOnlySlot(busy);
  ASSERT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 1u);
  waiting->Close();
  AwaitQueued("dep_1", 0);
  EXPECT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 0u);
}

TEST_F(GatewayTest, AClientThatLeavesDuringANonStreamedAnswerIsBilledItsInput) {
  // The model server has the request (its answer would take a minute).
  AddDeployment("dep_1", {{StartSim("idle"), 4}});
  StartGateway();
  auto c = std::make_unique<Connection>(port_);
  c->Send("POST", "/v1/chat/completions", ChatBody(5, false),
          {{"Authorization", "Bearer " + key_a_}});
  ASSERT_TRUE(WaitUntil([&] { return sims_[0]->Served().in_flight == 1; }));
  c->Close();
  store_.changed.WaitUntil([&] { return store_.size() > 0; });
  ASSERT_EQ(store_.size(), 1u);
  const UsageRecord r = store_.rows.begin()->second;
  EXPECT_EQ(r.status, "cancelled");
  EXPECT_GT(r.input_tokens, 0);  // the admission estimate: the server took it on
  EXPECT_EQ(r.output_tokens, 0);
}

TEST_F(GatewayTest, AClientThatLeavesMidStreamAbortsTheUpstreamRequest) {
  AddDeployment("dep_1", {{StartSim("slow"), 4}});
  StartGateway();
  auto c = std::make_unique<Connection>(port_);
  c->Send("POST", "/v1/chat/completions", ChatBody(100, true),
          {{"Authorization", "Bearer " + key_a_}});
  RawResponse head = c->Read(3000, 1);
  ASSERT_EQ(head.status, 200);
  const std::string id = head.headers["x-request-id"];
  c->Close();
  WaitUntil([&] { return sims_[0]->Served().cancelled > 0; });
  EXPECT_EQ(sims_[0]->Served().cancelled, 1);
  auto record = RecordOf(id);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->status, "cancelled");
  // Cut before its usage chunk: billed the 100 tokens it reserved, not the
  // chunks relayed so far (issue 15 #17: a client closing just before the
  // usage chunk was billed a chunk count for the whole answer).
  EXPECT_EQ(record->output_tokens, 100);
}

TEST_F(GatewayTest, RetriesAnotherEndpointWhenOneIsDown) {
  const int dead_port = DeadPort();
  AddDeployment("dep_1",
                {{"http://127.0.0.1:" + std::to_string(dead_port), 8}, {StartSim("instant"), 8}});
  StartGateway();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 200);
  // The simulator counts a request once its answer is written, which may be
  // just after the gateway has relayed it.
  WaitUntil([&] { return sims_[0]->Served().finished >= 10; });
  EXPECT_EQ(sims_[0]->Served().finished, 10);
}

TEST_F(GatewayTest, FallsOverFromADedicatedDeploymentWhoseEndpointsAreAllDown) {
  const int dead_port = DeadPort();
  AddDeployment("dep_shared", {{StartSim("instant"), 8}});
  DeploymentRecord dedicated;
  dedicated.id = "dep_dedicated";
  dedicated.model = "sim-model";
  dedicated.endpoints = {{"http://127.0.0.1:" + std::to_string(dead_port), 8}};
  dedicated.region = "eu-1";
  dedicated.latency_tier = "interactive";
  dedicated.visibility = "dedicated";
  dedicated.tenant_id = "tn_a";
  rows_.deployments.push_back(dedicated);
  StartGateway();
  // Until the checks find the dedicated endpoint down, tn_a's requests go to
  // it (and fail: it has no other endpoint); then to the shared deployment.
  int64_t deadline = NowMs() + 10'000;
  while (NowMs() < deadline && Post(key_a_, ChatBody(1, false)).status != 200) usleep(50'000);
  for (int i = 0; i < 5; ++i) {
    RawResponse r = Post(key_a_, ChatBody(1, false));
    ASSERT_EQ(r.status, 200);
    auto record = RecordOf(r.headers["x-request-id"]);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->deployment_id, "dep_shared");
  }
}

TEST_F(GatewayTest, RelaysToAnHttpsEndpointWhoseCertificateItTrusts) {
  TlsFront front(PortOf(StartSim("instant")), "localhost");
  // By name first (SNI and the name check), then by address (the IP check).
  AddDeployment("dep_1", {{"https://localhost:" + std::to_string(front.port()), 8}});
  GatewayOptions options;
  options.upstream_ca_file = std::string(ATRIUM_TEST_TLS_DIR) + "/ca.crt";
  StartGateway(options);
  for (int i = 0; i < 6; ++i) {
    RawResponse r = Post(key_a_, ChatBody(5, false));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 5);
  }
  RawResponse streamed = Post(key_b_, ChatBody(4, true));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_NE(streamed.body.find("data: [DONE]"), std::string::npos);
  auto record = RecordOf(streamed.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 4);
  EXPECT_EQ(record->endpoint.rfind("https://localhost:", 0), 0u) << record->endpoint;
  EXPECT_GE(front.handshakes(), 1);

  const std::string by_address = "https://127.0.0.1:" + std::to_string(front.port()) + "/";
  ChangeRows([&](GatewayPolicyRows& rows) { rows.deployments[0].endpoints = {{by_address, 8}}; });
  RawResponse r = Post(key_a_, ChatBody(2, false));
  ASSERT_EQ(r.status, 200) << r.body;
  record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->endpoint, by_address);
}

TEST_F(GatewayTest, TakesTheCloseOfAnHttpsConnectionAsTheEndOfABodyWithoutALength) {
  // The TLS front closes without a close_notify, as many servers do.
  const std::string body =
      R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":)"
      R"({"role":"assistant","content":"old school"},"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}})";
  CloseDelimitedServer server(body);
  TlsFront front(server.port(), "localhost");
  AddDeployment("dep_1", {{"https://localhost:" + std::to_string(front.port()), 8}});
  GatewayOptions options;
  options.upstream_ca_file = std::string(ATRIUM_TEST_TLS_DIR) + "/ca.crt";
  StartGateway(options);
  RawResponse r = Post(key_a_, ChatBody(2, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, body);
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 2);
  EXPECT_EQ(record->input_tokens, 11);
}

TEST_F(GatewayTest, AStreamsTimeToFirstTokenIsItsFirstChunkNotTheResponseHead) {
  const std::string events =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\n\n"
      "data: [DONE]\n\n";
  CloseDelimitedServer server(events, "text/event-stream", 300);
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(1, true));
  ASSERT_EQ(r.status, 200) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 1);
  EXPECT_GE(record->ttft_ms, 300);  // the head came at once, the first token 300 ms later
}

// Issue 15, item 18: one SSE event over 1 MiB switched metering off for the
// rest of the stream: 50 chunks and the upstream's usage after it were billed
// 0 output tokens, and the usage-only chunk reached a client that had not
// asked for it.
TEST_F(GatewayTest, AnOversizedStreamEventIsRelayedAndTheRestOfTheStreamIsMetered) {
  const std::string huge =
      "data: {\"choices\":[{\"index\":0,\"text\":\"" + std::string(1'100'000, 'x') + "\"}]}\n\n";
  std::string events = huge;
  for (int i = 0; i < 50; ++i) {
    events += "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t\"}}]}\n\n";
  }
  events += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":50}}\n\n";
  events += "data: [DONE]\n\n";
  CloseDelimitedServer server(events, "text/event-stream");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(100, true));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.substr(0, huge.size()), huge);  // relayed byte for byte
  EXPECT_EQ(r.body.find("\"usage\""), std::string::npos);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "completed");
  EXPECT_EQ(record->output_tokens, 50);
}

// Issue 15, item 19: a non-streamed body was zero-filled up to its announced
// Content-Length on every read: an upstream announcing 64 MiB and sending 10
// bytes cost the gateway 64 MiB a request (and an honest large body cost
// time quadratic in its size).
TEST_F(GatewayTest, AnUpstreamThatAnnouncesAHugeBodyAndSendsLittleCostsLittleMemory) {
  constexpr int64_t kAnnounced = int64_t{1} << 30;
  HostileServer liar([&](int fd) {
    HostileServer::SendAll(fd,
                           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           "Content-Length: " +
                               std::to_string(kAnnounced) + "\r\n\r\n{\"id\":\"x\"}");
    ::shutdown(fd, SHUT_WR);  // and no more
  });
  AddDeployment("dep_1", {{liar.url(), 8}});
  GatewayOptions options;
  options.max_upstream_body_bytes = 2 * static_cast<size_t>(kAnnounced);
  StartGateway(options);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  ASSERT_LT(before.ru_maxrss, 512 * 1024) << "the test process already peaked too high to tell";
  RawResponse r = Post(key_a_, ChatBody(2, false));
  EXPECT_EQ(r.status, 502);  // the body broke off
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak memory grown";
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "failed");
}

TEST_F(GatewayTest, AnHonestLargeBodyIsRelayedWhole) {
  std::string body = R"({"object":"list","data":[)";
  while (body.size() < (16u << 20)) body += R"({"object":"embedding","embedding":[0.125,-0.5]},)";
  body +=
      R"({"object":"embedding","embedding":[1]}],"usage":{"prompt_tokens":7,"total_tokens":7}})";
  CloseDelimitedServer server(body, "application/json", 0, "200 OK",
                              "Content-Length: " + std::to_string(body.size()) + "\r\n");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  Connection c(port_);
  c.Send("POST", "/v1/chat/completions", ChatBody(2, false),
         {{"Authorization", "Bearer " + key_a_}});
  const std::string head = c.ReadUntil("\r\n\r\n", 20'000);
  ASSERT_EQ(head.substr(0, 12), "HTTP/1.1 200") << head;
  EXPECT_NE(head.find("Content-Length: " + std::to_string(body.size()) + "\r\n"),
            std::string::npos);
  const std::string relayed = c.ReadBytes(body.size(), 20'000);
  EXPECT_TRUE(relayed == body) << relayed.size() << " bytes of " << body.size();
}

// Issue 15, item 23: a non-streamed body dripped slowly had no deadline as a
// whole, only one per silence.
TEST_F(GatewayTest, ANonStreamedBodyMustArriveWholeWithinItsDeadline) {
  HostileServer dripper([](int fd) {
    HostileServer::SendAll(fd,
                           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           "Content-Length: 100\r\n\r\n{\"id\":");
  });
  AddDeployment("dep_1", {{dripper.url(), 8}});
  GatewayOptions options;
  options.upstream_body_timeout_ms = 300;
  options.stream_idle_timeout_ms = 30'000;
  StartGateway(options);
  const int64_t start = NowMs();
  RawResponse r = Post(key_a_, ChatBody(2, false));
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_LT(NowMs() - start, 10'000);
  EXPECT_NE(r.body.find("upstream_timeout"), std::string::npos) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "failed");
  EXPECT_EQ(record->http_status, 504);
}

// Issue 15, item 22: bodies were read before authentication, so 100
// unauthenticated connections held 400 MB for the read timeout. The key is
// checked on the headers; a bad one is answered at once, its body unread.
TEST_F(GatewayTest, ABadKeyIsRefusedOnTheHeadersBeforeTheBodyIsRead) {
  AddDeployment("dep_1", {{StartSim("idle"), 4}});
  GatewayOptions options;
  options.read_timeout_ms = 60'000;
  StartGateway(options);
  for (const std::string auth :
       {std::string("Authorization: Bearer sk-not-a-key\r\n"), std::string()}) {
    Connection c(port_);
    c.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\n" + auth +
              "Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n");
    RawResponse r = c.Read(5'000);
    EXPECT_EQ(r.status, 401) << (auth.empty() ? "no key" : "bad key");
    EXPECT_EQ(r.headers["connection"], "close");
  }
}

// Issue 15, items 22 and 23: bodies in memory had no overall bound, and
// `Expect: 100-continue` went unanswered (curl waited a second).
TEST_F(GatewayTest, BodiesInMemoryHaveABudgetAndContinueIsAnsweredAfterTheHeaders) {
  // A model server that answers at once, however long the prompt.
  CloseDelimitedServer server(
      R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}})");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  GatewayOptions options;
  options.body_memory_bytes = 100'000;
  StartGateway(options);
  std::string body = ChatBody(1, false);
  body.insert(body.size() - 1, ",\"pad\":\"" + std::string(70'000 - body.size(), 'p') + "\"");
  ASSERT_GT(2 * body.size(), options.body_memory_bytes);  // room for one at a time
  ASSERT_LT(body.size(), options.body_memory_bytes);
  auto head = [&](const std::string& key) {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer " + key +
           "\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n";
  };
  // A bad key is told so, not to continue.
  Connection bad(port_);
  bad.SendRaw(head("sk-wrong"));
  EXPECT_EQ(bad.Read(5'000).status, 401);
  // The first body fits: the client is told to send it.
  Connection first(port_);
  first.SendRaw(head(key_a_));
  EXPECT_EQ(first.ReadUntil("\r\n\r\n", 5'000), "HTTP/1.1 100 Continue\r\n\r\n");
  // The second would pass the budget while the first is held: refused at
  // once, with advice on when to come back.
  Connection second(port_);
  second.SendRaw(head(key_b_));
  RawResponse refused = second.Read(5'000);
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_NE(refused.body.find("request bodies"), std::string::npos) << refused.body;
  first.SendRaw(body);
  EXPECT_EQ(first.Read().status, 200);
  // Served and gone: its room is free again.
  Connection third(port_);
  third.SendRaw(head(key_b_));
  EXPECT_EQ(third.ReadUntil("\r\n\r\n", 5'000), "HTTP/1.1 100 Continue\r\n\r\n");
  third.SendRaw(body);
  EXPECT_EQ(third.Read().status, 200);
}

TEST_F(GatewayTest, EachTenantsQueuedBodiesHaveABudget) {
  const std::string url = StartSim("slow");
  AddDeployment("dep_1", {{url, 1}});
  const std::string body = ChatBody(1, false);
  GatewayOptions options;
  options.queued_body_bytes_per_tenant = body.size() + body.size() / 2;  // room for one
  StartGateway(options);
  Connection busy(port_);
  busy.Send("POST", "/v1/chat/completions", ChatBody(50, true),
            {{"Authorization", "Bearer " + key_a_}});
  AwaitRunning("dep_1", url, 1);  // it holds the only slot (for 50 s)
  Connection waiting(port_);
  waiting.Send("POST", "/v1/chat/completions", body, {{"Authorization", "Bearer " + key_a_}});
  AwaitQueued("dep_1", 1);
  ASSERT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 1u);
  // Its body takes its place in the budget just after it takes its place in
  // the queue.
  EXPECT_TRUE(WaitUntil([&] { return gateway_->body_budget().queued("tn_a") > 0; }));
  RawResponse over = Post(key_a_, body);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(over.headers["retry-after"], "1");
  EXPECT_EQ(RefusalsOf("tn_a", key_a_, "rate_limit_exceeded", 1), 1);
  // Another tenant's requests still wait their turn.
  Connection other(port_);
  other.Send("POST", "/v1/chat/completions", body, {{"Authorization", "Bearer " + key_b_}});
  AwaitQueued("dep_1", 2);
  EXPECT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 2u);
}

// Issue 15, item 23: two Authorization headers were taken as the first.
TEST_F(GatewayTest, TwoAuthorizationHeadersAreRefused) {
  AddDeployment("dep_1", {{StartSim("idle"), 4}});
  StartGateway();
  const std::string body = ChatBody(1, false);
  Connection c(port_);
  c.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer " + key_a_ +
            "\r\nAuthorization: Bearer " + key_b_ +
            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n\r\n" + body);
  RawResponse r = c.Read(5'000);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("more than one Authorization header"), std::string::npos) << r.body;
}

// Issue 15, item 23: the disconnect watch ended at the first byte the client
// sent after its request, so a client that pipelined a byte and left was
// not noticed: its request stayed queued, went upstream and was billed.
TEST_F(GatewayTest, AClientThatSentMoreAndLeftStillLeavesTheQueue) {
  AddDeployment("dep_1", {{StartSim("slow"), 1}});
  StartGateway();
  Connection busy(port_);
  std::unique_ptr<Connection> waiting = QueueBehindTheOnlySlot(busy);
  ASSERT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 1u);
  waiting->SendRaw("GET /healthz HTTP/1.1\r\n");  // the start of a next request
  std::this_thread::sleep_for(50ms);              // seen by the watch, alone
  waiting->Close();
  AwaitQueued("dep_1", 0);
  EXPECT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 0u);
}

TEST_F(GatewayTest, ARequestSentAheadWhileTheLastOneWaitedIsServedNext) {
  AddDeployment("dep_1", {{StartSim("slow"), 1}});
  StartGateway();
  Connection busy(port_);
  busy.Send("POST", "/v1/chat/completions", ChatBody(3, true),
            {{"Authorization", "Bearer " + key_a_}});
  busy.Read(10'000, 1);
  Connection c(port_);
  c.Send("POST", "/v1/chat/completions", ChatBody(1, false),
         {{"Authorization", "Bearer " + key_b_}});
  AwaitQueued("dep_1", 1);
  ASSERT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 1u);
  c.SendRaw("GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n");  // taken in by the watch
  const std::string first = c.ReadUntil("\r\n\r\n", 20'000);
  ASSERT_EQ(first.substr(0, 12), "HTTP/1.1 200") << first;
  const size_t at = first.find("Content-Length: ");
  ASSERT_NE(at, std::string::npos);
  const size_t length = std::stoul(first.substr(at + 16));
  std::string body;
  while (body.size() < length) {
    const std::string more = c.ReadUntil(std::string(1, '}'), 5'000);
    if (more.empty()) break;
    body += more;
  }
  ASSERT_EQ(body.size(), length);
  RawResponse health = c.Read();
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");
}

TEST_F(GatewayTest, AnOverloadedModelServersAdviceOnWhenToRetryReachesTheClient) {
  const std::string busy = R"({"error":{"message":"busy","type":"server_error"}})";
  CloseDelimitedServer overloaded(busy, "application/json", 0, "503 Service Unavailable",
                                  "Retry-After: 7\r\n");
  CloseDelimitedServer limited(busy, "application/json", 0, "429 Too Many Requests",
                               "Retry-After: 3\r\nretry-after-ms: 2500\r\n");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(overloaded.port()), 8}});
  StartGateway();
  // A 503 (retried elsewhere when there is an elsewhere): still a 503.
  RawResponse r = Post(key_a_, ChatBody(2, false));
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.headers["retry-after"], "7");
  EXPECT_NE(r.body.find("service_unavailable"), std::string::npos) << r.body;
  // The issue: the tenant was told "upstream http://127.0.0.1:PORT answered
  // 503", the operator's server's URL.
  EXPECT_EQ(r.body.find(std::to_string(overloaded.port())), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  // A 429 is the server's answer: relayed with its advice.
  ChangeRows([&](GatewayPolicyRows& rows) {
    rows.deployments[0].endpoints = {{"http://127.0.0.1:" + std::to_string(limited.port()), 8}};
  });
  RawResponse l = Post(key_a_, ChatBody(2, false));
  EXPECT_EQ(l.status, 429) << l.body;
  EXPECT_EQ(l.headers["retry-after"], "3");
  EXPECT_EQ(l.headers["retry-after-ms"], "2500");
  EXPECT_EQ(l.body, busy);
}

TEST_F(GatewayTest, AnAnswerWithoutUsageIsBilledForWhatWasGeneratedAndARefusalForNothing) {
  // 24 bytes of content: 6 tokens; not the whole body's ~50.
  const std::string body =
      R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":)"
      R"({"role":"assistant","content":"abcdefghijklmnopqrstuvwx"},"finish_reason":"stop"}],)"
      R"("system_fingerprint":"a-server-that-reports-no-usage-at-all"})";
  CloseDelimitedServer server(body);
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(2, false));
  ASSERT_EQ(r.status, 200) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 6);
  EXPECT_GT(record->input_tokens, 0);  // the admission estimate stands for it
  // A model the tenant may not use: refused, recorded, and nothing billed.
  RawResponse refused =
      Post(key_a_, R"({"model":"nope","messages":[{"role":"user","content":"hello there"}]})");
  ASSERT_EQ(refused.status, 404) << refused.body;
  EXPECT_EQ(RefusalsOf("tn_a", key_a_, "model_not_found", 1), 1);
  EXPECT_FALSE(store_.Get(refused.headers["x-request-id"]).has_value());
}

TEST_F(GatewayTest, RefusesAnHttpsEndpointWhoseCertificateItCannotTrust) {
  TlsFront untrusted(PortOf(StartSim("instant")), "localhost");
  TlsFront elsewhere(PortOf(StartSim("instant")), "elsewhere");
  AddDeployment("dep_1", {{"https://localhost:" + std::to_string(untrusted.port()), 8}});
  // Health checks rarely, so that they cannot mark the endpoint down before
  // the request sees why it fails.
  StartGateway({}, 60'000);  // no extra CA: the test CA is unknown
  LogCapture log;
  RawResponse r = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(r.status, 502);
  // The operator's log says which check failed; the tenant's answer does not
  // name the endpoint.
  EXPECT_NE(log.Text().find("certificate verify failed"), std::string::npos) << log.Text();
  EXPECT_NE(log.Text().find("unable to get local issuer certificate"), std::string::npos);
  EXPECT_EQ(r.body.find("localhost"), std::string::npos) << r.body;
  EXPECT_EQ(sims_[0]->Served().finished, 0);
  gateway_->Stop(1000);
  gateway_.reset();
  policy_->Stop();
  journal_->Stop();

  // A CA it trusts, but a certificate for another host: by name, by address.
  rows_.deployments.clear();
  rows_.entitlements.clear();
  AddDeployment("dep_2", {{"https://localhost:" + std::to_string(elsewhere.port()), 8}});
  GatewayOptions options;
  options.upstream_ca_file = std::string(ATRIUM_TEST_TLS_DIR) + "/ca.crt";
  StartGateway(options, 60'000);
  r = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(log.Text().find("hostname mismatch"), std::string::npos) << log.Text();
  ChangeRows([&](GatewayPolicyRows& rows) {
    rows.deployments[0].endpoints = {{"https://127.0.0.1:" + std::to_string(elsewhere.port()), 8}};
  });
  r = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(log.Text().find("IP address mismatch"), std::string::npos) << log.Text();
  EXPECT_EQ(sims_[1]->Served().finished, 0);
}

TEST_F(GatewayTest, DoesNotStartWithAnUnreadableUpstreamCaFile) {
  journal_ = std::make_unique<UsageJournal>(
      UsageJournalOptions{dir_.string(), 10, 10, 100, 16 << 20},
      [this](const std::vector<UsageRecord>& r) { return store_.Insert(r); });
  policy_ = std::make_unique<PolicyLoader>(
      PolicySource{[] { return Result<int64_t>(1); },
                   [this]() -> Result<GatewayPolicyRows> { return rows_; }},
      20);
  GatewayOptions options;
  options.upstream_ca_file = (dir_ / "missing.pem").string();
  GatewayServer gateway(options, *policy_, *journal_, SystemClock::Instance());
  auto started = gateway.Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("missing.pem"), std::string::npos);
}

// The issue: gateway errors showed tenants the operator's upstream URLs
// ("upstream http://... answered 503", "cannot connect to http://..."); the
// operator's log keeps them.
TEST_F(GatewayTest, ATenantIsNotShownTheOperatorsUpstreamUrlsTheLogIs) {
  const int dead_port = DeadPort();
  const std::string url = "http://127.0.0.1:" + std::to_string(dead_port);
  AddDeployment("dep_1", {{url, 8}});
  StartGateway({}, 60'000);
  LogCapture log;
  RawResponse r = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find(std::to_string(dead_port)), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("could not be reached"), std::string::npos) << r.body;
  const std::string logged = log.Text();
  EXPECT_NE(logged.find(url), std::string::npos) << logged;
  EXPECT_NE(logged.find(r.headers["x-request-id"]), std::string::npos) << logged;
}

// The issue: a tenant admin aimed its dedicated deployment at loopback. A
// row that reached the store without the API's check (or a name that
// resolves to loopback later) is refused by the gateway itself: nothing is
// sent there, neither requests nor health probes.
TEST_F(GatewayTest, ADedicatedDeploymentAimedAtLoopbackIsRefusedEvenFromTheStore) {
  // A listener that never accepts: any connection would wait in its backlog.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  AddDedicated("dep_mine", "tn_a", "http://localhost:" + std::to_string(ntohs(addr.sin_port)));
  GatewayOptions options;
  options.egress = std::make_shared<gateway::EgressPolicy>();  // the default rules
  options.first_byte_timeout_ms = 500;
  StartGateway(options, 100);
  LogCapture log;
  for (int i = 0; i < 3; ++i) {
    RawResponse r = Post(key_a_, ChatBody(1, false));
    EXPECT_TRUE(r.status == 502 || r.status == 503) << r.status << " " << r.body;
    EXPECT_EQ(r.body.find("localhost"), std::string::npos) << r.body;
    usleep(150'000);  // a health check runs meanwhile
  }
  // Neither a request nor a health probe connected.
  ASSERT_EQ(::fcntl(fd, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(::accept(fd, nullptr, nullptr), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
  ::close(fd);
  EXPECT_NE(log.Text().find("loopback"), std::string::npos) << log.Text();
}

// The issue: pointing a dedicated deployment at the platform's own
// listener returned the platform's own answer.
TEST_F(GatewayTest, ADedicatedDeploymentCannotAimTheGatewayAtItself) {
  AddDeployment("dep_shared", {{StartSim("instant"), 8}}, {"tn_b"});
  StartGateway({}, 60'000);  // the rig opens loopback
  ChangeRows([&](GatewayPolicyRows& rows) {
    DeploymentRecord d = rows.deployments[0];
    d.id = "dep_loop";
    d.visibility = "dedicated";
    d.tenant_id = "tn_a";
    d.endpoints = {{"http://127.0.0.1:" + std::to_string(port_), 8}};
    rows.deployments.push_back(d);
  });
  LogCapture log;
  RawResponse r = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(log.Text().find("reserved for the platform"), std::string::npos) << log.Text();
}

// The issue: a tenant not entitled to a shared model got it served by
// pointing its dedicated deployment at the shared server's URL.
TEST_F(GatewayTest, ADedicatedDeploymentNamingASharedEndpointIsNotServedThere) {
  const std::string sim = StartSim("instant");
  AddDeployment("dep_shared", {{sim, 8}}, {"tn_b"});  // tn_a is not entitled
  AddDedicated("dep_mine", "tn_a", sim);
  StartGateway({}, 60'000);  // the rig opens loopback: only the shared rule stands
  LogCapture log;
  RawResponse mine = Post(key_a_, ChatBody(1, false));
  EXPECT_EQ(mine.status, 502) << mine.body;
  EXPECT_EQ(sims_[0]->Served().finished, 0);
  EXPECT_NE(log.Text().find("reserved for the platform"), std::string::npos) << log.Text();
  // The entitled tenant is served there as before.
  EXPECT_EQ(Post(key_b_, ChatBody(1, false)).status, 200);
}

// DNS rebinding: what ConnectUpstream judges is each address the name
// resolves to, after resolution and before any connection, cached or not.
TEST(UpstreamEgressTest, ANameThatResolvesToARefusedAddressIsNeverConnected) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor listener(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  const std::string url = "http://localhost:" + std::to_string(listener.local_endpoint().port());
  auto address = ParseUpstreamUrl(url);
  ASSERT_OK(address);
  std::vector<std::string> judged;
  AddressCheck refuse_loopback = [&](const boost::asio::ip::tcp::endpoint& e) -> std::string {
    judged.push_back(e.address().to_string());
    return e.address().is_loopback() ? "loopback" : "";
  };
  UpstreamPool pool(0);
  for (int attempt = 0; attempt < 2; ++attempt) {  // resolved, then from the cache
    std::string why;
    bool connected = true;
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
          auto c =
              co_await ConnectUpstream(pool, url, *address, nullptr, 1000, why, &refuse_loopback);
          connected = c != nullptr;
        },
        boost::asio::detached);
    io.run();
    io.restart();
    EXPECT_FALSE(connected) << attempt;
    EXPECT_EQ(why, "loopback") << attempt;
  }
  EXPECT_GE(judged.size(), 2u);
  // Nothing reached the listener.
  listener.non_blocking(true);
  boost::system::error_code ec;
  boost::asio::ip::tcp::socket accepted(io);
  listener.accept(accepted, ec);
  EXPECT_EQ(ec, boost::asio::error::would_block);
  // Without a check the same name connects (the test would pass vacuously otherwise).
  bool connected = false;
  std::string why;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        auto c = co_await ConnectUpstream(pool, url, *address, nullptr, 1000, why);
        connected = c != nullptr;
      },
      boost::asio::detached);
  io.run();
  EXPECT_TRUE(connected) << why;
}

TEST(UpstreamUrlTest, ParsesHttpAndHttpsWithTheirDefaultPorts) {
  auto plain = ParseUpstreamUrl("http://gpu-1.internal/v1prefix/");
  ASSERT_OK(plain);
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->port, "80");
  EXPECT_EQ(plain->base_path, "/v1prefix");
  auto secure = ParseUpstreamUrl("https://gpu-1.internal");
  ASSERT_OK(secure);
  EXPECT_TRUE(secure->tls);
  EXPECT_EQ(secure->host, "gpu-1.internal");
  EXPECT_EQ(secure->port, "443");
  auto v6 = ParseUpstreamUrl("https://[::1]:8443");
  ASSERT_OK(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "8443");
  EXPECT_EQ(v6->host_header, "[::1]:8443");
  EXPECT_FALSE(ParseUpstreamUrl("ftp://h").has_value());
  EXPECT_FALSE(ParseUpstreamUrl("https://").has_value());
  EXPECT_FALSE(ParseUpstreamUrl("https://user@h").has_value());
}

TEST_F(GatewayTest, ARevokedKeyStopsWorkingOnTheNextPolicy) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 200);
  ChangeRows([&](GatewayPolicyRows& rows) {
    std::erase_if(rows.keys, [&](const GatewayKeyRow& k) { return k.key.id == key_ids_[key_a_]; });
  });
  EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 401);
  ChangeRows([&](GatewayPolicyRows& rows) { rows.tenants[1].state = "suspended"; });
  EXPECT_EQ(Post(key_b_, ChatBody(1, false)).status, 401);
}

TEST_F(GatewayTest, KeepsServingOnTheLastGoodPolicyWhileTheStoreIsUnreachable) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  StartGateway();
  store_down_ = true;
  marker_.fetch_add(1);
  EXPECT_FALSE(policy_->Refresh().has_value());
  WaitUntil([&] { return policy_->failures() > 1; });  // several failed polls
  EXPECT_GT(policy_->failures(), 1);
  EXPECT_EQ(Post(key_a_, ChatBody(2, false)).status, 200);
  EXPECT_EQ(Post("atr_garbage", ChatBody(1, false)).status, 401);
  // Back: the change made meanwhile (a revoked key) takes effect.
  {
    std::lock_guard lock(rows_mu_);
    std::erase_if(rows_.keys, [&](const GatewayKeyRow& k) { return k.key.id == key_ids_[key_a_]; });
  }
  store_down_ = false;
  ASSERT_OK(policy_->Refresh());
  EXPECT_EQ(Post(key_a_, ChatBody(1, false)).status, 401);
}

TEST_F(GatewayTest, APacedStreamStartsWhenTheEndpointsPrefillsHaveTheirFirstTokens) {
  // An engine whose steps take 2 s: a stream's first token comes at the end
  // of the step it joined, its last 4 steps later.
  engine_sim::ServerOptions o;
  o.model = "sim-model";
  o.custom_profile = engine_sim::Profile{
      .name = "two-second-steps", .max_batch = 8, .decode_base_ms = 2000, .max_context = 8192};
  sims_.push_back(std::make_unique<engine_sim::Server>(o));
  auto port = sims_.back()->Start();
  ASSERT_OK(port);
  const std::string url = "http://127.0.0.1:" + std::to_string(*port);
  AddDeployment("dep_1", {{url, 4, 1}});
  StartGateway();
  auto stream = [&](const std::string& key) {
    auto c = std::make_unique<Connection>(port_);
    c->Send("POST", "/v1/chat/completions", ChatBody(4, true),
            {{"Authorization", "Bearer " + key}});
    return c;
  };
  // a and b each run a stream; both are in prefill until their first token.
  auto a1 = stream(key_a_);
  AwaitRunning("dep_1", url, 1);
  auto b1 = stream(key_b_);
  AwaitRunning("dep_1", url, 2);
  // a asks for its share of the 4 slots with its next stream (2), b for
  // less: a's stream waits for the endpoint's prefills (max_prefill 1),
  // although 2 slots are free.
  auto a2 = stream(key_a_);
  AwaitQueued("dep_1", 1);
  ASSERT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 1u);
  // The first tokens come back at ~2 s and end the prefills: a's stream
  // starts then, long before a1 and b1 end (~10 s) and free their slots.
  RawResponse first_a = a1->Read(5000, 1);
  RawResponse first_b = b1->Read(5000, 1);
  ASSERT_EQ(first_a.status, 200);
  ASSERT_EQ(first_b.status, 200);
  AwaitQueued("dep_1", 0);
  EXPECT_EQ(gateway_->dispatcher().QueuedFor("dep_1"), 0u);
  EXPECT_EQ(sims_.back()->Served().finished, 0) << "started before any slot freed";
  for (auto* c : {a1.get(), b1.get(), a2.get()}) c->Close();
}

TEST_F(GatewayTest, ServesTheTenantWithTheSmallerCounterFirst) {
  const std::string url = StartSim("h100-llama3-8b", 1);
  AddDeployment("dep_1", {{url, 1}});
  StartGateway();
  // Tenant A runs one long request (~1.8 s on this profile, so everything
  // below happens while it runs) and queues five short ones; tenant B
  // arrives last with one.
  std::vector<std::unique_ptr<Connection>> a;
  for (int i = 0; i < 6; ++i) {
    a.push_back(std::make_unique<Connection>(port_));
    a.back()->Send("POST", "/v1/chat/completions", ChatBody(i == 0 ? 150 : 4, false),
                   {{"Authorization", "Bearer " + key_a_}});
    if (i == 0) AwaitRunning("dep_1", url, 1);
  }
  AwaitQueued("dep_1", 5);
  Connection b(port_);
  b.Send("POST", "/v1/chat/completions", ChatBody(4, false),
         {{"Authorization", "Bearer " + key_b_}});
  RawResponse rb = b.Read();
  ASSERT_EQ(rb.status, 200);
  // B was served right after the request running, not after A's backlog.
  int a_done = 0;
  for (auto& c : a) {
    RawResponse ra = c->Read();
    EXPECT_EQ(ra.status, 200);
    auto rec = RecordOf(ra.headers["x-request-id"]);
    auto recb = RecordOf(rb.headers["x-request-id"]);
    ASSERT_TRUE(rec && recb);
    if (rec->created_at + rec->total_ms <= recb->created_at + recb->total_ms) ++a_done;
  }
  EXPECT_EQ(a_done, 1);
}

// --- Hostile model servers and clients (issue 15)

std::string ContentEvent(const std::string& text) {
  return "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\n";
}

// Issue 15 #20: a server answered 3 chunks to a request of max_tokens 3 and
// claimed 1,000,000 completion tokens: the tenant was billed as claimed and
// then refused on every model for 8.3 hours (Retry-After) by its token
// limit. The claim is bounded by max_tokens, flagged, and locks nobody out.
TEST_F(GatewayTest, AServerClaimingTokensItNeverDeliveredCannotBillOrLockOutTheTenant) {
  const std::string events =
      ContentEvent("a") + ContentEvent("b") + ContentEvent("c") +
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615,"
      "\"completion_tokens\":1000000}}\n\n"
      "data: [DONE]\n\n";
  CloseDelimitedServer liar(events, "text/event-stream");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(liar.port()), 8}});
  GatewayLimitRecord limit;
  limit.tenant_id = "tn_a";
  limit.limits.tokens_per_minute = 2000;
  rows_.limits.push_back(limit);
  StartGateway();
  const std::string body = ChatBody(3, true);
  RawResponse r = Post(key_a_, body);
  ASSERT_EQ(r.status, 200) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 3 + gateway::kOutputMarginTokens);
  EXPECT_LE(record->input_tokens, static_cast<int64_t>(body.size()) + gateway::kUsageMarginTokens);
  EXPECT_EQ(record->flag, kUsageOverBound);
  // The tenant is not locked out.
  RawResponse next = Post(key_a_, body);
  EXPECT_EQ(next.status, 200) << next.body;
}

// Issue 15 #17: a 337 KB prompt in `tools` (~84K tokens) was estimated at 5
// tokens; six such requests passed a 2,000 tokens/minute limit that refused
// the same text as a message.
TEST_F(GatewayTest, APromptInToolsCountsAgainstTheTokenLimit) {
  AddDeployment("dep_1", {{StartSim("instant"), 8}});
  GatewayLimitRecord limit;
  limit.tenant_id = "tn_a";
  limit.limits.tokens_per_minute = 2000;
  rows_.limits.push_back(limit);
  StartGateway();
  Json body = {{"model", "sim-model"},
               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"max_tokens", 1},
               {"tools",
                {{{"type", "function"},
                  {"function",
                   {{"name", "f"},
                    {"description", std::string(337'000, 'a')},
                    {"parameters", {{"type", "object"}}}}}}}}};
  RawResponse r = Post(key_a_, body.dump());
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_NE(r.body.find("tokens per minute"), std::string::npos) << r.body;
}

// Issue 15 #17: one chunk may carry many tokens. A stream whose server
// sends no usage is billed the text it relayed, not its chunk count.
TEST_F(GatewayTest, AStreamWithoutUsageIsBilledItsTextNotItsChunks) {
  CloseDelimitedServer server(ContentEvent(std::string(400, 'x')) + "data: [DONE]\n\n",
                              "text/event-stream");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(500, true));
  ASSERT_EQ(r.status, 200) << r.body;
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 100);
}

// Issue 15 #20: a server sent [DONE] first, then 200 tokens; the client got
// them all and the request was billed 0. The stream ends at [DONE].
TEST_F(GatewayTest, NothingAServerSendsAfterDoneReachesTheClient) {
  std::string after;
  for (int i = 0; i < 200; ++i) after += ContentEvent("free");
  CloseDelimitedServer server(
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":0}}\n\n"
      "data: [DONE]\n\n" +
          after,
      "text/event-stream");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(300, true));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "data: [DONE]\n\n");
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 0);
}

// Issue 15 #20: a gzip answer lost its Content-Encoding on the way to the
// client and was billed on its compressed bytes. The gateway asks for
// identity; a server that compresses anyway has its encoding relayed and
// is billed what the request reserved, not an estimate from compressed
// bytes.
TEST_F(GatewayTest, ACompressedAnswerKeepsItsEncodingAndIsNotEstimatedFromItsBytes) {
  const std::string gzipped("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\x4c\x4a\x06\x00", 15);
  CloseDelimitedServer server(gzipped, "application/json", 0, "200 OK",
                              "Content-Encoding: gzip\r\n");
  AddDeployment("dep_1", {{"http://127.0.0.1:" + std::to_string(server.port()), 8}});
  StartGateway();
  RawResponse r = Post(key_a_, ChatBody(40, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-encoding"], "gzip");
  EXPECT_EQ(r.body, gzipped);
  EXPECT_NE(server.last_request().find("Accept-Encoding: identity\r\n"), std::string::npos)
      << server.last_request();
  auto record = RecordOf(r.headers["x-request-id"]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->output_tokens, 40);
}

}  // namespace
}  // namespace atrium::gateway_server
