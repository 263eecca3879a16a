#include "gateway_server/session.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "crypto/crypto.h"
#include "http/network_shell.h"

namespace atrium::gateway_server {
namespace {

// Request ids: a random per-process prefix (ids from different processes
// and restarts never collide; they are the usage records' keys) and a
// counter, so that the hot path makes no system call for randomness.
std::string NewRequestId() {
  static const std::string prefix = "req_" + crypto::HexEncode(crypto::RandomBytes(8));
  static std::atomic<uint64_t> counter{0};
  static constexpr char kHex[] = "0123456789abcdef";
  const uint64_t n = counter.fetch_add(1) + 1;
  std::string id(prefix.size() + 16, '0');  // fixed width: ids sort in issue order
  std::copy(prefix.begin(), prefix.end(), id.begin());
  for (size_t i = 0; i < 16; ++i) id[id.size() - 1 - i] = kHex[(n >> (4 * i)) & 0xf];
  return id;
}

// How long a connection whose request body went unread is drained before
// it is closed.
constexpr int kLingerMs = 2000;
// The most a client may send ahead (a pipelined request) while its request is
// watched for a disconnect: taken into the read buffer, it stays in memory.
constexpr size_t kMaxWatchedBytes = 64 * 1024;

}  // namespace

std::string ResponseHead(int status, std::string_view content_type, int64_t content_length,
                         bool keep_alive, std::string_view request_id,
                         std::string_view extra_headers) {
  std::string head;
  head.reserve(256);
  head += "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  head += http::ReasonPhrase(status);
  head += "\r\nServer: atrium-gateway\r\nContent-Type: ";
  head += content_type;
  if (content_length >= 0) {
    head += "\r\nContent-Length: ";
    head += std::to_string(content_length);
  } else {
    head += "\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache";
  }
  head += "\r\nX-Request-Id: ";
  head += request_id;
  head += keep_alive ? "\r\n" : "\r\nConnection: close\r\n";
  head += extra_headers;
  head += "\r\n";
  return head;
}

Session::~Session() {
  std::lock_guard lock(server_.sessions_mu);
  server_.closers.erase(this);
  if (--server_.sessions == 0) server_.sessions_done.notify_all();
}

void Session::Start() {
  {
    std::lock_guard lock(server_.sessions_mu);
    server_.closers[this] = [weak = weak_from_this()](bool cut) {
      if (auto self = weak.lock()) {
        net::post(self->executor_, [self, cut] {
          if (self->idle_) self->stream_.cancel();
          auto running = self->running_.lock();
          if (cut && running && !running->done) {
            running->shutting_down = true;
            running->Interrupt();
          }
        });
      }
    };
  }
  net::co_spawn(
      executor_, [self = shared_from_this()]() { return self->Run(); }, net::detached);
}

awaitable<bool> Session::WriteAll(std::string_view a, std::string_view b) {
  if (journal_wait_ > server_.journal_batches[loop_].written) {
    // The record of this request is in the loop's batch: let the batch be
    // written (at the end of this turn) before the client sees the end.
    co_await net::post(executor_, net::use_awaitable);
    if (journal_wait_ > server_.journal_batches[loop_].written) server_.FlushJournal(loop_);
  }
  if (journal_wait_ != 0 && journal_wait_ == server_.journal_batches[loop_].failed &&
      journal_success_) {
    // The record could not be journaled: the client must not see a success
    // nobody is billed for (a refusal, which bills nothing, still goes out).
    // A response not yet begun becomes a 503; one under way (a stream) is
    // cut off, and its checkpoint bills what it had relayed.
    journal_wait_ = 0;
    if (a.starts_with("HTTP/1.1 ")) {
      const gateway::Refusal refusal = gateway::Refusal::UsageUnavailable();
      const bool keep_alive = false;
      co_await SendError(refusal, keep_alive, journal_request_);
    }
    co_return false;
  }
  journal_wait_ = 0;
  beast::error_code ec;
  std::array<net::const_buffer, 2> buffers{net::buffer(a.data(), a.size()),
                                           net::buffer(b.data(), b.size())};
  stream_.expires_after(Millis(options().read_timeout_ms));
  co_await net::async_write(stream_, buffers, net::redirect_error(net::use_awaitable, ec));
  stream_.expires_never();
  co_return !ec;
}

awaitable<bool> Session::SendError(const gateway::Refusal& error, bool keep_alive,
                                   const std::string& request_id) {
  std::string body = gateway::ErrorBody(error.message, error.type, error.code);
  const std::string extra = gateway::RetryAfterHeader(error);
  std::string head = ResponseHead(error.status, "application/json",
                                  static_cast<int64_t>(body.size()), keep_alive, request_id, extra);
  co_return co_await WriteAll(head, body);
}

void Session::WatchClient(const std::shared_ptr<Interrupts>& interrupts) {
  interrupts->watched = true;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      net::bind_executor(executor_, [self = shared_from_this(), interrupts](beast::error_code ec) {
        if (interrupts->done || ec == net::error::operation_aborted) return;
        // Bytes the client sent meanwhile (its next request, pipelined) are
        // taken into the session's read buffer, where the next read finds
        // them, and the watch goes on: otherwise the readable socket would
        // hide the client's leaving. Past kMaxWatchedBytes the watch ends.
        ssize_t n = -1;
        if (!ec && self->buffer_.size() < kMaxWatchedBytes) {
          auto room = self->buffer_.prepare(kMaxWatchedBytes - self->buffer_.size());
          n = ::recv(self->stream_.socket().native_handle(), room.data(), room.size(),
                     MSG_DONTWAIT);
          if (n > 0) {
            self->buffer_.commit(static_cast<size_t>(n));
            return self->WatchClient(interrupts);
          }
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            return self->WatchClient(interrupts);
          }
        } else if (!ec) {
          return;  // a client that sends this much ahead is not watched further
        }
        interrupts->client_gone = true;
        interrupts->Interrupt();
      }));
}

awaitable<void> Session::Run() {
  // However Run ends (an exception included), the read timer's handler must
  // not keep the session, and its socket, alive.
  struct CancelOnExit {
    net::steady_timer& timer;
    ~CancelOnExit() { timer.cancel(); }
  } cancel_read_timer{read_timer_};
  bool first = true;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options().max_header_bytes));
    parser.body_limit(options().max_body_bytes);
    beast::error_code ec;
    // Not the stream's own timeout: that closes the socket, and a request
    // that arrived only in part is answered 408.
    const int timeout_ms = first ? options().read_timeout_ms : options().idle_timeout_ms;
    read_timed_out_ = false;
    read_deadline_ = std::chrono::steady_clock::now() + Millis(timeout_ms);
    ArmReadTimer();
    if (server_.stopping.load()) break;
    idle_ = true;
    // The headers first: a request is refused on them alone (a bad key, too
    // many bodies in memory) before a byte of its body is read.
    co_await bhttp::async_read_header(stream_, buffer_, parser,
                                      net::redirect_error(net::use_awaitable, ec));
    std::optional<gateway::Refusal> refused;
    BodyHold hold{server_.body_budget, 0};
    if (!ec) {
      refused = AdmitHeaders(parser, hold.bytes);
      if (!refused && !parser.is_done()) {
        if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          co_await net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                                    net::redirect_error(net::use_awaitable, ec));
        }
        if (!ec) {
          co_await bhttp::async_read(stream_, buffer_, parser,
                                     net::redirect_error(net::use_awaitable, ec));
        }
      }
    }
    idle_ = false;
    if (refused) {
      // Its body, if any, was never read: the connection cannot carry another
      // request. Lingering lets the client read the answer before the close.
      const std::string request_id = NewRequestId();
      if (co_await SendError(*refused, false, request_id)) co_await Linger();
      break;
    }
    if (ec) {
      const std::string request_id = NewRequestId();
      std::optional<gateway::Refusal> error;
      if (ec == bhttp::error::body_limit) {
        error = gateway::Refusal::BodyTooLarge(options().max_body_bytes);
      } else if (read_timed_out_ && parser.got_some()) {
        // Part of a request came, the rest not in time (an idle keep-alive
        // connection that times out is just closed).
        error = gateway::Refusal::RequestTimeout(timeout_ms);
      } else if (ec == bhttp::error::header_limit) {
        error = gateway::Refusal::HeadersTooLarge();
      } else if (ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
                 ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) {
        error = gateway::Refusal::MalformedRequest(ec.message());
      }
      if (error) co_await SendError(*error, false, request_id);
      break;
    }
    first = false;
    auto request = parser.release();
    bool keep_alive = request.keep_alive() && !server_.stopping.load();
    bool ok = co_await Handle(request, keep_alive);
    if (!ok || !keep_alive || server_.stopping.load()) break;
  }
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.close();
}

std::optional<gateway::Refusal> Session::AdmitHeaders(
    const bhttp::request_parser<bhttp::string_body>& parser, int64_t& held) {
  const HttpRequest& head = parser.get();
  if (head.count(bhttp::field::authorization) > 1) {
    return gateway::Refusal::DuplicateAuthorization();
  }
  std::string_view target(head.target().data(), head.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const bool inference = gateway::ApiOfPath(path).has_value();
  if (inference && head.method() == bhttp::verb::post) {
    auto snapshot = server_.policy.Current();
    auto caller =
        snapshot->Authenticate(HeaderOf(head, bhttp::field::authorization), Now(), &key_memo_);
    if (!caller.has_value()) return gateway::RefusalOf(caller.error());
  }
  if (parser.is_done()) return std::nullopt;  // no body
  // A chunked body may grow to the limit: that much is set aside for it.
  const auto length = parser.content_length();
  const auto bytes = static_cast<int64_t>(length ? *length : options().max_body_bytes);
  if (!server_.body_budget.Reserve(bytes)) {
    return gateway::Refusal::BodyMemoryFull(server_.body_budget.options().total_bytes);
  }
  held = bytes;
  return std::nullopt;
}

awaitable<void> Session::Linger() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(Millis(std::min(kLingerMs, options().read_timeout_ms)));
  std::array<char, 4096> discard;
  while (!ec) {
    co_await stream_.async_read_some(net::buffer(discard),
                                     net::redirect_error(net::use_awaitable, ec));
  }
  stream_.expires_never();
}

void Session::ArmReadTimer() {
  // Armed for no later than the deadline: it fires early at worst, and then
  // waits on. A deadline earlier than the armed one (a shorter idle timeout
  // than the first request's) re-arms it.
  if (read_timer_armed_ && read_timer_.expiry() <= read_deadline_) return;
  read_timer_armed_ = true;
  const uint64_t arm = ++read_timer_arms_;
  read_timer_.expires_at(read_deadline_);  // a wait it replaces ends, and is ignored
  read_timer_.async_wait([self = shared_from_this(), arm](beast::error_code e) {
    if (arm != self->read_timer_arms_) return;  // replaced by a later arming
    self->read_timer_armed_ = false;
    if (e || !self->idle_) return;  // cancelled, or a request is being served
    if (std::chrono::steady_clock::now() < self->read_deadline_) {
      self->ArmReadTimer();  // a later read's deadline
      return;
    }
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
}

awaitable<bool> Session::Handle(HttpRequest& request, bool keep_alive) {
  const std::string request_id = NewRequestId();
  const int64_t arrived = Now();
  std::string_view target(request.target().data(), request.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const bool post = request.method() == bhttp::verb::post;
  const bool get = request.method() == bhttp::verb::get;
  const std::optional<gateway::Api> api = gateway::ApiOfPath(path);
  if (api) {
    if (!post) {
      const gateway::Refusal error = gateway::Refusal::MethodNotAllowed("POST", path);
      co_return co_await SendError(error, keep_alive, request_id);
    }
    co_return co_await Proxy(request, *api, keep_alive, request_id, arrived);
  }
  if (path == "/v1/models") {
    if (!get) {
      const gateway::Refusal error = gateway::Refusal::MethodNotAllowed("GET", path);
      co_return co_await SendError(error, keep_alive, request_id);
    }
    co_return co_await Models(request, keep_alive, request_id);
  }
  if (path == "/healthz" && get) {
    const std::string body = R"({"status":"ok"})";
    const std::string head = ResponseHead(
        200, "application/json", static_cast<int64_t>(body.size()), keep_alive, request_id);
    co_return co_await WriteAll(head, body);
  }
  // Everything else, the control-plane API included, is not served here.
  const auto method = request.method_string();
  const gateway::Refusal error =
      gateway::Refusal::UnknownUrl(std::string_view(method.data(), method.size()), path);
  co_return co_await SendError(error, keep_alive, request_id);
}

awaitable<bool> Session::Models(HttpRequest& request, bool keep_alive,
                                const std::string& request_id) {
  auto snapshot = server_.policy.Current();
  auto caller =
      snapshot->Authenticate(HeaderOf(request, bhttp::field::authorization), Now(), &key_memo_);
  if (!caller.has_value()) {
    const gateway::Refusal error = gateway::RefusalOf(caller.error());
    co_return co_await SendError(error, keep_alive, request_id);
  }
  std::string body = R"({"object":"list","data":[)";
  bool first = true;
  for (const std::string& model : snapshot->ModelsFor(**caller)) {
    if (!first) body += ',';
    first = false;
    body += R"({"id":)" + nlohmann::json(model).dump() +
            R"(,"object":"model","created":0,"owned_by":"atrium"})";
  }
  body += "]}";
  const std::string head = ResponseHead(200, "application/json", static_cast<int64_t>(body.size()),
                                        keep_alive, request_id);
  co_return co_await WriteAll(head, body);
}

}  // namespace atrium::gateway_server
