// Server: one io_context run on `threads` threads, an accept loop on its own
// strand, and one Session per connection on a strand of its own. A session
// alternates between waiting for the first bytes of a request (idle timeout
// on the tcp_stream), reading the rest of it (read timeout on a timer that
// cancels the read, so that a 408 can still be written), calling the handler
// and writing the response.

#include "http/server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crypto/crypto.h"
#include "http/beast_request.h"
#include "http/network_shell.h"
#include "threads/thread_name.h"

namespace atrium::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using BeastResponse = bhttp::response<bhttp::string_body>;
using Millis = std::chrono::milliseconds;

constexpr size_t kReadChunk = 4096;
// After an error response the server stops reading requests but keeps
// discarding what the client still sends for this long, so that closing does
// not reset the connection before the client has read the response.
constexpr int kMaxLingerMs = 2000;
// After the drain deadline, connections are closed; this is how long Stop()
// then waits for their handlers to notice before stopping the loop.
constexpr int kForceCloseGraceMs = 1000;

std::string NewRequestId() { return "req_" + crypto::HexEncode(crypto::RandomBytes(8)); }

void AppendJsonString(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      out += "\\u00";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// The project's one error shape: {"error":{"code":..,"message":..,"request_id":..}}.
std::string ErrorBody(std::string_view code, std::string_view message,
                      std::string_view request_id) {
  std::string body = R"({"error":{"code":)";
  AppendJsonString(code, body);
  body += R"(,"message":)";
  AppendJsonString(message, body);
  body += R"(,"request_id":)";
  AppendJsonString(request_id, body);
  body += "}}";
  return body;
}

Response ErrorResponse(int status, std::string_view code, std::string_view message,
                       std::string_view request_id) {
  Response response;
  response.status = status;
  response.body = ErrorBody(code, message, request_id);
  return response;
}

Response ErrorResponse(const Error& error, std::string_view request_id) {
  return ErrorResponse(HttpStatusOf(error.code), WireNameOf(error.code), error.message, request_id);
}

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsValidFieldName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), IsTokenChar);
}

// No CR, LF or NUL: a handler must not be able to split the response.
bool IsValidFieldValue(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

// Framing is the server's business; a handler cannot set these.
bool IsReservedHeader(std::string_view name) {
  return EqualsIgnoreCase(name, "content-length") || EqualsIgnoreCase(name, "transfer-encoding") ||
         EqualsIgnoreCase(name, "connection");
}

std::string PeerAddress(const tcp::socket& socket) {
  beast::error_code ec;
  auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "";
  auto address = endpoint.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()).to_string();
  }
  return address.to_string();
}

class Session;

// What the server and its sessions share. Sessions hold it by shared_ptr so
// that a session destroyed late (with the io_context) still finds it.
struct ServerState {
  ServerState(ServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  // Registers a new connection unless the server is stopping or full.
  bool Admit(const std::shared_ptr<Session>& session) {
    std::lock_guard lock(mu);
    if (stopping || sessions.size() >= static_cast<size_t>(std::max(0, options.max_connections))) {
      return false;
    }
    sessions.emplace(session.get(), session);
    return true;
  }

  void Unregister(Session* session) {
    std::lock_guard lock(mu);
    if (sessions.erase(session) > 0 && sessions.empty()) all_closed.notify_all();
  }

  // Live sessions. The caller must drop the result without holding `mu`.
  std::vector<std::shared_ptr<Session>> Snapshot() {
    std::vector<std::shared_ptr<Session>> out;
    std::lock_guard lock(mu);
    for (auto& [ptr, weak] : sessions) {
      if (auto session = weak.lock()) out.push_back(std::move(session));
    }
    return out;
  }

  bool WaitUntilNoSessions(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu);
    return all_closed.wait_until(lock, deadline, [this] { return sessions.empty(); });
  }

  const ServerOptions options;
  const Handler handler;

  // Set when Stop() begins; sessions read it without waiting for their strand.
  std::atomic<bool> draining{false};

  std::mutex mu;
  std::condition_variable all_closed;
  bool stopping = false;                                          // GUARDED_BY(mu)
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // GUARDED_BY(mu)
};

// One connection. All members are touched only on the session's strand,
// except through the public methods, which post onto it.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<ServerState> state)
      : state_(std::move(state)),
        remote_address_(PeerAddress(socket)),
        stream_(std::move(socket)),
        executor_(stream_.get_executor()),
        read_timer_(executor_) {
    beast::error_code ignored;
    stream_.socket().set_option(tcp::no_delay(true), ignored);
  }
  ~Session() { state_->Unregister(this); }

  void Start() {
    net::post(executor_, [self = shared_from_this()] { self->WaitForRequest(); });
  }

  // Finish the request in flight (if any), then close; close at once if idle.
  void BeginShutdown() {
    net::post(executor_, [self = shared_from_this()] {
      self->draining_ = true;
      if (self->phase_ == Phase::kWaiting || self->phase_ == Phase::kLingering) self->Close();
    });
  }

  void ForceClose() {
    net::post(executor_, [self = shared_from_this()] { self->Close(); });
  }

  // Only when no thread runs the io_context any more.
  void CloseWhileLoopStopped() { Close(); }

 private:
  enum class Phase { kWaiting, kReading, kWriting, kLingering, kClosed };

  const ServerOptions& options() const { return state_->options; }

  void WaitForRequest() {
    if (closed_) return;
    if (draining_) return Close();
    if (buffer_.size() > 0) return ReadRequest();  // pipelined bytes already here
    phase_ = Phase::kWaiting;
    stream_.expires_after(
        Millis(first_request_ ? options().read_timeout_ms : options().idle_timeout_ms));
    stream_.async_read_some(
        buffer_.prepare(kReadChunk),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnFirstBytes(ec, n); });
  }

  void OnFirstBytes(beast::error_code ec, size_t n) {
    if (closed_) return;
    if (ec) return Close();  // idle timeout, peer closed, or shutdown
    buffer_.commit(n);
    ReadRequest();
  }

  void ReadRequest() {
    phase_ = Phase::kReading;
    stream_.expires_never();
    parser_.emplace();
    internal::ApplyLimits(options(), *parser_);
    body_limit_ = options().max_body_bytes;
    timed_out_ = false;
    ArmReadTimer(++read_generation_, Millis(options().read_timeout_ms));
    if (!options().body_limit_for) {
      bhttp::async_read(
          stream_, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
      return;
    }
    // The route decides the body limit: no limit while the header is read
    // (Beast checks Content-Length at the header's end), then the route's.
    // (Not boost::none: Boost 1.74's parser compares Content-Length with
    // the optional itself, and any length is "more than" an empty one.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnRequest(ec);
    const auto& header = parser_->get();
    const auto raw_target = header.target();
    const auto raw_method = header.method_string();
    const std::string_view target(raw_target.data(), raw_target.size());
    const size_t route_limit = options().body_limit_for(
        std::string_view(raw_method.data(), raw_method.size()), target.substr(0, target.find('?')));
    body_limit_ = route_limit > 0 ? route_limit : options().max_body_bytes;
    const auto length = parser_->content_length();
    if (length && *length > body_limit_) return OnRequest(bhttp::error::body_limit);
    parser_->body_limit(static_cast<std::uint64_t>(body_limit_));
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void ArmReadTimer(uint64_t generation, Millis after) {
    read_timer_.expires_after(after);
    read_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      self->OnReadTimeout(ec, generation);
    });
  }

  void OnReadTimeout(beast::error_code ec, uint64_t generation) {
    if (ec || closed_ || generation != read_generation_ || phase_ != Phase::kReading) return;
    timed_out_ = true;
    stream_.cancel();
    // The read may have been between two socket reads, where cancel() does
    // not reach it; keep cancelling until it gives up.
    ArmReadTimer(generation, Millis(20));
  }

  void OnRequest(beast::error_code ec) {
    read_timer_.cancel();
    if (closed_) return;
    if (!ec) return Dispatch();
    if (timed_out_) {
      return SendError(
          408, "deadline_exceeded",
          "request not received within " + std::to_string(options().read_timeout_ms) + " ms");
    }
    if (ec == bhttp::error::body_limit) {
      return SendError(413, "payload_too_large",
                       "request body is larger than " + std::to_string(body_limit_) + " bytes");
    }
    if (ec == bhttp::error::header_limit) {
      return SendError(431, "request_header_fields_too_large",
                       "request header fields are larger than " +
                           std::to_string(options().max_header_bytes) + " bytes");
    }
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) {
      return Close();  // the peer went away mid-request: nobody to answer
    }
    if (internal::IsParseError(ec)) {
      return SendError(400, "invalid_argument", "malformed HTTP request: " + ec.message());
    }
    Close();
  }

  void Dispatch() {
    std::string request_id = NewRequestId();
    const internal::BeastRequest& beast_request = parser_->get();
    const unsigned version = beast_request.version();
    const bool head = beast_request.method() == bhttp::verb::head;
    // HTTP/1.0 always closes, even with "Connection: keep-alive".
    bool keep_alive = version >= 11 && beast_request.keep_alive();
    Response response;
    Result<Request> request = internal::ConvertRequest(beast_request, remote_address_);
    if (!request.has_value()) {
      response = ErrorResponse(request.error(), request_id);
    } else {
      request->request_id = request_id;
      try {
        response = state_->handler(*request);
      } catch (...) {  // a handler bug must not take the I/O thread down
        response =
            ErrorResponse(500, WireNameOf(ErrorCode::kInternal), "internal error", request_id);
      }
    }
    parser_.reset();
    // Read after the handler: a Stop() during it should announce the close.
    keep_alive = keep_alive && !draining_ && !state_->draining.load();
    BuildResponse(std::move(response), version, head, request_id, keep_alive);
    Write(/*close_after=*/!keep_alive, /*linger=*/false);
  }

  void SendError(int status, std::string_view code, const std::string& message) {
    std::string request_id = NewRequestId();
    BuildResponse(ErrorResponse(status, code, message, request_id), 11, /*head=*/false, request_id,
                  /*keep_alive=*/false);
    Write(/*close_after=*/true, /*linger=*/true);
  }

  void BuildResponse(Response response, unsigned version, bool head, const std::string& request_id,
                     bool keep_alive) {
    if (response.status < 200 || response.status > 599) {
      response = ErrorResponse(500, WireNameOf(ErrorCode::kInternal),
                               "handler returned an invalid status", request_id);
    }
    response_ = BeastResponse();
    response_.version(version >= 11 ? 11 : 10);
    response_.result(static_cast<unsigned>(response.status));
    response_.set(bhttp::field::server, "atrium");
    if (!response.content_type.empty() && IsValidFieldValue(response.content_type)) {
      response_.set(bhttp::field::content_type, response.content_type);
    }
    for (const auto& [name, value] : response.headers) {
      if (IsValidFieldName(name) && IsValidFieldValue(value) && !IsReservedHeader(name)) {
        response_.insert(name, value);
      }
    }
    response_.set("X-Request-Id", request_id);
    response_.keep_alive(keep_alive);
    const bool no_body = response.status == 204 || response.status == 304;
    if (!no_body) {
      response_.content_length(response.body.size());
      if (!head) response_.body() = std::move(response.body);
    }
  }

  void Write(bool close_after, bool linger) {
    phase_ = Phase::kWriting;
    close_after_write_ = close_after;
    linger_after_write_ = linger;
    stream_.expires_after(Millis(options().read_timeout_ms));
    bhttp::async_write(
        stream_, response_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (closed_) return;
    if (ec) return Close();
    response_ = BeastResponse();
    if (close_after_write_ || draining_) {
      if (linger_after_write_ && !draining_) return Linger();
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return Close();
    }
    first_request_ = false;
    WaitForRequest();
  }

  void Linger() {
    phase_ = Phase::kLingering;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(Millis(std::min(kMaxLingerMs, options().read_timeout_ms)));
    buffer_.clear();
    DiscardInput();
  }

  void DiscardInput() {
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->DiscardInput();  // nothing committed: the bytes are dropped
                            });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    phase_ = Phase::kClosed;
    read_timer_.cancel();
    stream_.close();
  }

  const std::shared_ptr<ServerState> state_;
  const std::string remote_address_;
  beast::tcp_stream stream_;
  const net::any_io_executor executor_;  // the connection's strand
  net::steady_timer read_timer_;
  beast::flat_buffer buffer_;
  std::optional<internal::BeastRequestParser> parser_;
  size_t body_limit_ = 0;  // of the request being read
  BeastResponse response_;

  Phase phase_ = Phase::kWaiting;
  bool first_request_ = true;
  bool draining_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool linger_after_write_ = false;
  uint64_t read_generation_ = 0;
};

}  // namespace

struct Server::Impl {
  Impl(ServerOptions options, Handler handler)
      : io_context(std::max(1, options.threads)),
        state(std::make_shared<ServerState>(std::move(options), std::move(handler))),
        acceptor(net::make_strand(io_context)),
        accept_retry_timer(acceptor.get_executor()) {}

  void DoAccept() {
    acceptor.async_accept(
        net::make_strand(io_context),
        [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      accept_retry_timer.expires_after(Millis(50));
      accept_retry_timer.async_wait([this](beast::error_code ec) {
        if (!ec && acceptor.is_open()) DoAccept();
      });
      return;
    }
    auto session = std::make_shared<Session>(std::move(socket), state);
    if (state->Admit(session)) session->Start();
    // Otherwise `session` goes out of scope here and closes the connection.
    DoAccept();
  }

  void RunLoop() {
    for (;;) {
      try {
        io_context.run();
        return;
      } catch (...) {  // keep serving; a throwing completion handler is a bug
      }
    }
  }

  // Declared first so that it is destroyed last: everything below uses it.
  net::io_context io_context;
  const std::shared_ptr<ServerState> state;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry_timer;
  std::vector<std::thread> threads;

  std::mutex lifecycle_mu;  // serialises Start and Stop
  enum class Lifecycle { kNew, kRunning, kStopped } lifecycle = Lifecycle::kNew;
};

Server::Server(ServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

Server::~Server() { Stop(); }

Result<int> Server::Start() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->lifecycle != Impl::Lifecycle::kNew) {
    return Error::FailedPrecondition("server was already started");
  }
  const ServerOptions& options = impl_->state->options;
  ATRIUM_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ListenEndpoint(options.host, options.port));
  auto& acceptor = impl_->acceptor;
  beast::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = acceptor.local_endpoint(ec);
  if (ec) {
    beast::error_code ignored;
    acceptor.close(ignored);
    return Error::Unavailable("cannot listen on " + options.host + ":" +
                              std::to_string(options.port) + ": " + ec.message());
  }
  crypto::InitCrypto();  // request ids; keeps libsodium's set-up off the I/O threads
  impl_->DoAccept();     // no thread runs the loop yet, so no strand is needed here
  const int threads = std::max(1, options.threads);
  for (int i = 0; i < threads; ++i)
    impl_->threads.emplace_back([impl = impl_.get(), i] {
      NameThisThread("api-http-" + std::to_string(i));
      impl->RunLoop();
    });
  impl_->lifecycle = Impl::Lifecycle::kRunning;
  return static_cast<int>(bound.port());
}

void Server::Stop(int drain_timeout_ms) {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->lifecycle != Impl::Lifecycle::kRunning) {
    impl_->lifecycle = Impl::Lifecycle::kStopped;
    return;
  }
  impl_->lifecycle = Impl::Lifecycle::kStopped;
  const auto deadline = std::chrono::steady_clock::now() + Millis(std::max(0, drain_timeout_ms));
  ServerState& state = *impl_->state;
  {
    std::lock_guard state_lock(state.mu);
    state.stopping = true;  // no new sessions from here on
  }
  state.draining = true;
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry_timer.cancel();
  });
  for (const auto& session : state.Snapshot()) session->BeginShutdown();
  if (!state.WaitUntilNoSessions(deadline)) {
    for (const auto& session : state.Snapshot()) session->ForceClose();
    (void)state.WaitUntilNoSessions(std::chrono::steady_clock::now() + Millis(kForceCloseGraceMs));
  }
  impl_->io_context.stop();
  for (auto& thread : impl_->threads) thread.join();
  impl_->threads.clear();

  // The loop is stopped: what is left may be touched from this thread. Close
  // the remaining connections and let their aborted operations unwind.
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  impl_->accept_retry_timer.cancel();
  for (const auto& session : state.Snapshot()) session->CloseWhileLoopStopped();
  impl_->io_context.restart();
  impl_->io_context.run_for(Millis(100));
}

}  // namespace atrium::http
