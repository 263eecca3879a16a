#include "gateway_server/gateway_server.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <vector>

#include "crypto/crypto.h"
#include "gateway/openai.h"
#include "gateway_server/upstream.h"

namespace atrium::gateway_server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Millis = std::chrono::milliseconds;
template <class T>
using awaitable = net::awaitable<T>;
using Executor = net::io_context::executor_type;

class Session;

constexpr size_t kPieceBytes = 4096;  // streamed upstream body read size: SSE events are small
// A request that started at once has its client watched for a disconnect
// from this long after it started: most exchanges are over sooner, and arming
// the watch costs a system call (epoll_ctl) per request.
constexpr auto kWatchAfter = std::chrono::milliseconds(10);
// Output tokens are charged to the fair queue every this many streamed chunks.
constexpr int64_t kChargeEveryChunks = 16;
// A running stream's checkpoint (UsageJournal::Checkpoint) is refreshed this often.
constexpr int64_t kCheckpointEveryMs = 1000;
// An active health check must be answered within this.
constexpr int kHealthTimeoutMs = 2000;
// Tokens-per-minute reserved for the answer of a request without max_tokens.
constexpr int64_t kDefaultOutputReserve = 1024;

std::string_view UpstreamPath(gateway::Api api) {
  switch (api) {
    case gateway::Api::kChatCompletions:
      return "/v1/chat/completions";
    case gateway::Api::kCompletions:
      return "/v1/completions";
    case gateway::Api::kEmbeddings:
      return "/v1/embeddings";
  }
  return "";
}

// Request ids: a random per-process prefix (ids from different processes
// and restarts never collide; they are the usage records' keys) and a
// counter, so that the hot path makes no system call for randomness.
std::string NewRequestId() {
  static const std::string prefix = "req_" + crypto::HexEncode(crypto::RandomBytes(8));
  static std::atomic<uint64_t> counter{0};
  char digits[24];
  int n = std::snprintf(digits, sizeof digits, "%012llx",
                        static_cast<unsigned long long>(counter.fetch_add(1) + 1));
  return prefix + std::string(digits, static_cast<size_t>(n));
}

// The standard phrase of a status code (Beast's table).
std::string_view ReasonPhrase(int status) {
  if (bhttp::int_to_status(static_cast<unsigned>(status)) == bhttp::status::unknown) {
    return "Unknown";  // e.g. a model server's own code, relayed
  }
  auto phrase = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return {phrase.data(), phrase.size()};
}

// Status line and headers. content_length < 0: chunked.
std::string ResponseHead(int status, std::string_view content_type, int64_t content_length,
                         bool keep_alive, std::string_view request_id,
                         std::string_view extra_headers = {}) {
  std::string head;
  head.reserve(256);
  head += "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  head += ReasonPhrase(status);
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

struct ApiError {
  int status;
  std::string type;
  std::string code;
  std::string message;
  int64_t retry_after_ms = 0;
};

ApiError ErrorOf(const Error& e) {
  switch (e.code) {
    case ErrorCode::kUnauthenticated:
      return {401, "invalid_request_error", "invalid_api_key", e.message};
    case ErrorCode::kPermissionDenied:
      return {403, "permission_error", "permission_denied", e.message};
    case ErrorCode::kNotFound:
      return {404, "invalid_request_error", "model_not_found", e.message};
    case ErrorCode::kPayloadTooLarge:
      return {413, "invalid_request_error", "request_too_large", e.message};
    default:
      return {400, "invalid_request_error", "invalid_request", e.message};
  }
}

// Fresh connection to one endpoint, with the connect timeout (which covers
// the TLS handshake of an https endpoint too). On failure `why` says what
// failed.
awaitable<std::unique_ptr<UpstreamConnection>> Connect(UpstreamPool& pool, const std::string& url,
                                                       const UpstreamAddress& address,
                                                       net::ssl::context* tls_context,
                                                       int timeout_ms, std::string& why) {
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

}  // namespace

// What a client-disconnect watch may interrupt; lives as long as the exchange.
struct Interrupts {
  bool done = false;
  bool client_gone = false;
  bool watched = false;            // the client's socket is being watched
  std::weak_ptr<Session> session;  // whose client it is
  net::steady_timer* queue_timer = nullptr;
  UpstreamConnection* upstream = nullptr;
  void Interrupt() {
    if (queue_timer) queue_timer->cancel();
    if (upstream) {
      beast::error_code ignored;
      upstream->tcp().socket().close(ignored);
    }
  }
};

struct GatewayServer::Impl {
  Impl(GatewayOptions o, PolicyLoader& p, UsageJournal& j, const Clock& c)
      : options(std::move(o)),
        policy(p),
        journal(j),
        clock(c),
        dispatcher(options.dispatcher),
        loops(MakeLoops(std::max(1, options.threads))),
        pools(loops.size()),
        journal_batches(loops.size()),
        acceptor(*loops[0]),
        maintenance_timer(*loops[0]) {
    for (auto& loop : loops) deferred_watches.push_back(std::make_unique<DeferredWatches>(*loop));
  }

  // One event loop per thread, each single-threaded: a connection, its
  // upstream connections and its timers live on one loop, so nothing on the
  // hot path needs a strand or contends for a lock across threads.
  static std::vector<std::unique_ptr<net::io_context>> MakeLoops(int n) {
    std::vector<std::unique_ptr<net::io_context>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::make_unique<net::io_context>(1));
    return out;
  }

  awaitable<void> AcceptLoop();
  awaitable<void> Maintenance();
  awaitable<void> CheckHealth(std::string url);

  // Watches armed late (kWatchAfter), per loop, in the order they are due.
  struct DeferredWatches {
    explicit DeferredWatches(net::io_context& loop) : timer(loop) {}
    std::deque<std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<Interrupts>>> due;
    net::steady_timer timer;
    bool armed = false;
  };
  void DeferWatch(size_t loop, const std::shared_ptr<Interrupts>& interrupts);
  void ArmDueWatches(size_t loop);

  // Group commit of usage records, per loop: records finished during one
  // turn of a loop go to the journal with one write(2) at the end of that
  // turn, and a request's last bytes wait for the write that holds its record.
  struct JournalBatch {
    std::vector<UsageRecord> records;
    uint64_t filling = 1;  // the generation `records` belong to
    uint64_t written = 0;  // every generation up to this one is in the journal
    bool flush_posted = false;
  };
  // Queues `record` on `loop`'s batch; returns its generation.
  uint64_t StageRecord(size_t loop, const UsageRecord& record) {
    JournalBatch& batch = journal_batches[loop];
    batch.records.push_back(record);
    if (!batch.flush_posted) {
      batch.flush_posted = true;
      net::post(*loops[loop], [this, loop] { FlushJournal(loop); });
    }
    return batch.filling;
  }
  void FlushJournal(size_t loop) {
    JournalBatch& batch = journal_batches[loop];
    batch.flush_posted = false;
    if (!batch.records.empty()) {
      Status s = journal.AppendBatch(batch.records);
      if (!s.has_value()) {
        spdlog::error("gateway: {} usage records not journaled: {}", batch.records.size(),
                      s.error().message);
      }
      batch.records.clear();
    }
    batch.written = batch.filling++;
  }

  const GatewayOptions options;
  PolicyLoader& policy;
  UsageJournal& journal;
  const Clock& clock;
  Dispatcher dispatcher;
  std::atomic<uint64_t> next_slot_id{1};

  // Sessions still queued in a loop when it is destroyed unregister here:
  // declared before the loops, so destroyed after them.
  std::atomic<bool> stopping{false};
  std::mutex sessions_mu;
  std::condition_variable sessions_done;
  int sessions = 0;  // GUARDED_BY(sessions_mu)
  // Per live session: ends it if it is waiting for a request (Stop()).
  std::unordered_map<const void*, std::function<void()>> closers;  // GUARDED_BY(sessions_mu)

  // The I/O objects below are destroyed before the loops they live on.
  std::vector<std::unique_ptr<net::io_context>> loops;
  std::vector<UpstreamPool> pools;                  // per loop: a connection stays on its loop
  std::shared_ptr<net::ssl::context> upstream_tls;  // for https endpoints; set by Start()
  // The last health check's verdict per endpoint URL (loop 0 only: checks run there).
  std::unordered_map<std::string, bool> health_verdicts;
  std::vector<JournalBatch> journal_batches;  // per loop, used on that loop only
  std::vector<std::unique_ptr<DeferredWatches>> deferred_watches;  // per loop
  size_t next_loop = 0;                                            // accept loop only
  std::vector<net::executor_work_guard<net::io_context::executor_type>> keep_running;
  tcp::acceptor acceptor;
  net::steady_timer maintenance_timer;
  std::vector<std::thread> threads;

  bool running = false;
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(GatewayServer::Impl& server, size_t loop, tcp::socket socket)
      : server_(server),
        loop_(loop),
        executor_(server.loops[loop]->get_executor()),
        pool_(server.pools[loop]),
        stream_(std::move(socket)) {}

  ~Session() {
    std::lock_guard lock(server_.sessions_mu);
    server_.closers.erase(this);
    if (--server_.sessions == 0) server_.sessions_done.notify_all();
  }

  void Start() {
    {
      std::lock_guard lock(server_.sessions_mu);
      server_.closers[this] = [weak = weak_from_this()] {
        if (auto self = weak.lock()) {
          net::post(self->executor_, [self] {
            if (self->idle_) self->stream_.cancel();
          });
        }
      };
    }
    net::co_spawn(
        executor_, [self = shared_from_this()]() { return self->Run(); }, net::detached);
  }

  // Notices the client going away while its request waits or runs: takes it
  // out of the queue or aborts the upstream request (Interrupts).
  void WatchClient(const std::shared_ptr<Interrupts>& interrupts);

 private:
  const GatewayOptions& options() const { return server_.options; }
  int64_t Now() const { return server_.clock.NowMillis(); }

  awaitable<void> Run();
  awaitable<bool> Handle(bhttp::request<bhttp::string_body>& request, bool keep_alive);
  awaitable<bool> Proxy(bhttp::request<bhttp::string_body>& request, gateway::Api api,
                        bool keep_alive, const std::string& request_id, int64_t arrived);
  awaitable<bool> Models(bhttp::request<bhttp::string_body>& request, bool keep_alive,
                         const std::string& request_id);
  awaitable<bool> WriteAll(std::string_view a, std::string_view b = {});
  awaitable<bool> SendError(const ApiError& error, bool keep_alive, const std::string& request_id);

  GatewayServer::Impl& server_;
  const size_t loop_;
  const Executor executor_;  // the connection's loop: everything below runs there
  UpstreamPool& pool_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string piece_;          // a streamed response's bytes on their way through the relay
  uint64_t journal_wait_ = 0;  // the journal batch the next write waits for (0: none)
  bool idle_ = false;          // waiting for the next request
  net::steady_timer read_timer_{executor_};  // the whole of a request must arrive in time
  uint64_t reads_ = 0;                       // requests read so far, the current one included
  bool read_timed_out_ = false;
};

awaitable<bool> Session::WriteAll(std::string_view a, std::string_view b) {
  if (journal_wait_ > server_.journal_batches[loop_].written) {
    // The record of this request is in the loop's batch: let the batch be
    // written (at the end of this turn) before the client sees the end.
    co_await net::post(executor_, net::use_awaitable);
    if (journal_wait_ > server_.journal_batches[loop_].written) server_.FlushJournal(loop_);
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

awaitable<bool> Session::SendError(const ApiError& error, bool keep_alive,
                                   const std::string& request_id) {
  std::string body = gateway::ErrorBody(error.message, error.type, error.code);
  std::string extra;
  if (error.retry_after_ms > 0) {
    extra = "Retry-After: " + std::to_string((error.retry_after_ms + 999) / 1000) + "\r\n";
  }
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
        char byte;
        ssize_t n =
            ec ? 0
               : ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // the client's next request: it is still there
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          return self->WatchClient(interrupts);
        }
        interrupts->client_gone = true;
        interrupts->Interrupt();
      }));
}

awaitable<void> Session::Run() {
  bool first = true;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options().max_header_bytes));
    parser.body_limit(options().max_body_bytes);
    beast::error_code ec;
    // Not the stream's own timeout: that closes the socket, and a request
    // that arrived only in part is answered 408.
    const uint64_t read = ++reads_;
    const int timeout_ms = first ? options().read_timeout_ms : options().idle_timeout_ms;
    read_timed_out_ = false;
    read_timer_.expires_after(Millis(timeout_ms));
    read_timer_.async_wait([self = shared_from_this(), read](beast::error_code e) {
      if (e || !self->idle_ || self->reads_ != read) return;
      self->read_timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
    if (server_.stopping.load()) break;
    idle_ = true;
    co_await bhttp::async_read(stream_, buffer_, parser,
                               net::redirect_error(net::use_awaitable, ec));
    idle_ = false;
    read_timer_.cancel();
    if (ec) {
      const std::string request_id = NewRequestId();
      std::optional<ApiError> error;
      if (ec == bhttp::error::body_limit) {
        error = ApiError{
            413, "invalid_request_error", "request_too_large",
            "request body is larger than " + std::to_string(options().max_body_bytes) + " bytes"};
      } else if (read_timed_out_ && parser.got_some()) {
        // Part of a request came, the rest not in time (an idle keep-alive
        // connection that times out is just closed).
        error = ApiError{408, "invalid_request_error", "request_timeout",
                         "the request did not arrive within " + std::to_string(timeout_ms) + " ms"};
      } else if (ec == bhttp::error::header_limit) {
        error = ApiError{431, "invalid_request_error", "headers_too_large",
                         "request headers are too large"};
      } else if (ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
                 ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) {
        error = ApiError{400, "invalid_request_error", "invalid_request",
                         "malformed HTTP request: " + ec.message()};
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

awaitable<bool> Session::Handle(bhttp::request<bhttp::string_body>& request, bool keep_alive) {
  const std::string request_id = NewRequestId();
  const int64_t arrived = Now();
  std::string_view target(request.target().data(), request.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const bool post = request.method() == bhttp::verb::post;
  const bool get = request.method() == bhttp::verb::get;
  std::optional<gateway::Api> api;
  if (path == "/v1/chat/completions") api = gateway::Api::kChatCompletions;
  if (path == "/v1/completions") api = gateway::Api::kCompletions;
  if (path == "/v1/embeddings") api = gateway::Api::kEmbeddings;
  if (api) {
    if (!post) {
      const ApiError error{405, "invalid_request_error", "method_not_allowed",
                           "use POST for " + std::string(path)};
      co_return co_await SendError(error, keep_alive, request_id);
    }
    co_return co_await Proxy(request, *api, keep_alive, request_id, arrived);
  }
  if (path == "/v1/models") {
    if (!get) {
      const ApiError error{405, "invalid_request_error", "method_not_allowed",
                           "use GET for /v1/models"};
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
  const ApiError error{
      404, "invalid_request_error", "unknown_url",
      "Unknown request URL: " + std::string(request.method_string()) + " " + std::string(path)};
  co_return co_await SendError(error, keep_alive, request_id);
}

awaitable<bool> Session::Models(bhttp::request<bhttp::string_body>& request, bool keep_alive,
                                const std::string& request_id) {
  auto snapshot = server_.policy.Current();
  auto caller =
      snapshot->Authenticate(std::string_view(request[bhttp::field::authorization].data(),
                                              request[bhttp::field::authorization].size()),
                             Now());
  if (!caller.has_value()) {
    const ApiError error = ErrorOf(caller.error());
    co_return co_await SendError(error, keep_alive, request_id);
  }
  std::string body = R"({"object":"list","data":[)";
  bool first = true;
  for (const std::string& model : snapshot->ModelsFor(*caller)) {
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

awaitable<bool> Session::Proxy(bhttp::request<bhttp::string_body>& request, gateway::Api api,
                               bool keep_alive, const std::string& request_id, int64_t arrived) {
  auto snapshot = server_.policy.Current();
  auto header = [&](bhttp::field f) {
    auto v = request[f];
    return std::string_view(v.data(), v.size());
  };
  auto caller = snapshot->Authenticate(header(bhttp::field::authorization), arrived);
  if (!caller.has_value()) {
    const ApiError error = ErrorOf(caller.error());
    co_return co_await SendError(error, keep_alive, request_id);
  }

  // From here on the request has a tenant: it ends with exactly one usage record.
  UsageRecord record;
  record.id = request_id;
  record.tenant_id = caller->tenant_id;
  record.key_id = caller->key_id;
  record.api = std::string(gateway::ApiName(api));
  record.created_at = arrived;
  int64_t first_byte_at = 0;
  auto finish_record = [&](std::string status, int http_status) {
    record.status = std::move(status);
    record.http_status = http_status;
    record.total_ms = Now() - arrived;
    record.ttft_ms = first_byte_at > 0 ? first_byte_at - arrived : 0;
    journal_wait_ = server_.StageRecord(loop_, record);
  };
  // Coroutine arguments are named lvalues, never temporaries: g++ 12
  // destroys some temporaries of a co_await expression twice.
  std::optional<ApiError> refusal;

  const std::string& body = request.body();
  auto parsed = gateway::ParseRequest(api, body);
  if (!parsed.has_value()) refusal = ErrorOf(parsed.error());
  if (refusal) {
    finish_record("rejected", refusal->status);
    co_return co_await SendError(*refusal, keep_alive, request_id);
  }
  record.model = parsed->model;
  record.stream = parsed->stream;
  record.input_tokens = parsed->estimated_input_tokens;
  auto route = snapshot->Resolve(*caller, parsed->model);
  if (!route.has_value()) refusal = ErrorOf(route.error());
  if (refusal) {
    finish_record("rejected", refusal->status);
    co_return co_await SendError(*refusal, keep_alive, request_id);
  }
  // The tenant's dedicated deployment first, unless all its endpoints are down.
  const DeploymentRecord* deployment = server_.dispatcher.Choose(route->deployments, arrived);
  record.deployment_id = deployment->id;

  SlotRequest slot;
  slot.id = server_.next_slot_id.fetch_add(1);
  slot.tenant_id = caller->tenant_id;
  slot.key_id = caller->key_id;
  slot.weight = caller->weight;
  slot.priority = caller->priority;
  slot.subjects = caller->subjects;
  slot.deployment = deployment;
  slot.input_tokens = parsed->estimated_input_tokens;
  // Without max_tokens the output is unknown: reserve a typical answer and
  // settle with the real count afterwards (embeddings produce none).
  slot.reserved_tokens =
      parsed->estimated_input_tokens + (parsed->max_tokens > 0             ? parsed->max_tokens
                                        : api == gateway::Api::kEmbeddings ? 0
                                                                           : kDefaultOutputReserve);
  std::string_view priority_header;
  std::string_view deadline_header;
  for (const auto& field : request) {
    if (beast::iequals(field.name_string(), "x-atrium-priority")) {
      priority_header = std::string_view(field.value().data(), field.value().size());
    } else if (beast::iequals(field.name_string(), "x-atrium-deadline-ms")) {
      deadline_header = std::string_view(field.value().data(), field.value().size());
    }
  }
  if (priority_header == "interactive") {
    slot.priority = gateway::Priority::kInteractive;
  } else if (priority_header == "batch") {
    slot.priority = gateway::Priority::kBatch;
  } else if (!priority_header.empty()) {
    refusal = ApiError{400, "invalid_request_error", "invalid_priority",
                       "X-Atrium-Priority must be interactive or batch"};
  }
  int64_t deadline_ms = options().default_deadline_ms;
  if (!deadline_header.empty()) {
    int64_t v = 0;
    bool digits = deadline_header.size() <= 9;
    for (char c : deadline_header) digits = digits && c >= '0' && c <= '9';
    if (digits) v = std::stoll(std::string(deadline_header));
    if (!digits || v <= 0 || v > options().max_deadline_ms) {
      refusal =
          ApiError{400, "invalid_request_error", "invalid_deadline",
                   "X-Atrium-Deadline-Ms must be 1.." + std::to_string(options().max_deadline_ms)};
    }
    deadline_ms = v;
  }
  if (refusal) {
    finish_record("rejected", refusal->status);
    co_return co_await SendError(*refusal, keep_alive, request_id);
  }
  slot.deadline_ms = arrived + deadline_ms;

  auto interrupts = std::make_shared<Interrupts>();
  struct DoneOnExit {
    std::shared_ptr<Interrupts> i;
    ~DoneOnExit() { i->done = true; }
  } done_on_exit{interrupts};
  interrupts->session = weak_from_this();

  // Fair queue.
  std::optional<net::steady_timer> queue_timer;  // only when the request waits
  Admission admission = server_.dispatcher.Admit(slot, Now(), [executor = executor_, interrupts] {
    net::post(executor, [interrupts] {
      if (!interrupts->done && interrupts->queue_timer) interrupts->queue_timer->cancel();
    });
  });
  std::string endpoint;
  if (admission.kind == Admission::Kind::kRefused) {
    refusal = ApiError{admission.http_status,
                       admission.http_status == 429 ? "rate_limit_error" : "server_error",
                       admission.http_status == 429 ? "rate_limit_exceeded" : "service_unavailable",
                       admission.reason, admission.retry_after_ms};
    finish_record("rejected", refusal->status);
    co_return co_await SendError(*refusal, keep_alive, request_id);
  }
  if (admission.kind == Admission::Kind::kStarted) {
    endpoint = admission.endpoint;
    server_.DeferWatch(loop_, interrupts);
  } else {
    WatchClient(interrupts);  // a wait in the queue may be long
    queue_timer.emplace(executor_);
    interrupts->queue_timer = &*queue_timer;
    queue_timer->expires_after(Millis(std::max<int64_t>(0, slot.deadline_ms - Now())));
    beast::error_code ec;
    if (!interrupts->client_gone) {
      co_await queue_timer->async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    interrupts->queue_timer = nullptr;
    if (auto grant = server_.dispatcher.TakeGrant(slot.id)) {
      endpoint = *grant;
    } else if (server_.dispatcher.Cancel(slot.id)) {
      record.queue_ms = Now() - arrived;
      if (interrupts->client_gone) {
        finish_record("cancelled", 499);
        co_return false;
      }
      refusal = ApiError{504, "timeout", "queue_timeout",
                         "the request waited " + std::to_string(deadline_ms) +
                             " ms in the queue without being served"};
      finish_record("rejected", refusal->status);
      co_return co_await SendError(*refusal, keep_alive, request_id);
    } else {
      endpoint = server_.dispatcher.TakeGrant(slot.id).value_or("");
    }
    if (interrupts->client_gone && !endpoint.empty()) {
      record.queue_ms = Now() - arrived;
      server_.dispatcher.Finish(slot, endpoint, Dispatcher::Outcome::kAbandoned,
                                {record.input_tokens, 0, 0}, Now());
      finish_record("cancelled", 499);
      co_return false;
    }
  }
  record.queue_ms = Now() - arrived;

  // Route and relay, retrying other endpoints only before the first byte.
  const std::string upstream_body = gateway::UpstreamBody(body, *parsed);
  std::vector<std::string> tried;
  std::unique_ptr<UpstreamConnection> connection;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  std::string failure;
  int failure_status = 502;
  for (int attempt = 0;; ++attempt) {
    tried.push_back(endpoint);
    record.endpoint = endpoint;
    failure.clear();
    auto address = ParseUpstreamUrl(endpoint);
    if (!address.has_value()) {
      failure = address.error().message;
    } else {
      std::string head = "POST " + address->base_path + std::string(UpstreamPath(api)) +
                         " HTTP/1.1\r\nHost: " + address->host_header +
                         "\r\nContent-Type: application/json\r\nAccept: " +
                         (parsed->stream ? "text/event-stream" : "application/json") +
                         "\r\nX-Request-Id: " + request_id +
                         "\r\nContent-Length: " + std::to_string(upstream_body.size()) + "\r\n\r\n";
      // A pooled connection the peer closed meanwhile fails at once: then
      // one fresh connection to the same endpoint, which is no verdict on it.
      for (int fresh = 0; fresh < 2; ++fresh) {
        beast::error_code ec;
        connection = pool_.TakeIdle(endpoint);
        if (!connection) {
          connection = co_await Connect(pool_, endpoint, *address, server_.upstream_tls.get(),
                                        options().connect_timeout_ms, failure);
          if (!connection) break;
        }
        interrupts->upstream = connection.get();
        if (interrupts->client_gone) break;
        std::array<net::const_buffer, 2> out{net::buffer(head), net::buffer(upstream_body)};
        connection->tcp().expires_after(Millis(options().first_byte_timeout_ms));
        auto write = connection->With([&](auto& stream) {
          return net::async_write(stream, out, net::redirect_error(net::use_awaitable, ec));
        });
        co_await std::move(write);
        if (!ec) {
          parser.emplace();
          // No limit here (streams run long; non-streamed bodies are capped
          // below). Not boost::none: Boost 1.74 then rejects every
          // Content-Length body.
          parser->body_limit(std::numeric_limits<std::uint64_t>::max());
          auto read = connection->With([&](auto& stream) {
            return bhttp::async_read_header(stream, connection->buffer, *parser,
                                            net::redirect_error(net::use_awaitable, ec));
          });
          co_await std::move(read);
        }
        if (!ec) break;
        const bool was_reused = connection->reused;
        interrupts->upstream = nullptr;
        connection.reset();
        if (ec == beast::error::timeout) {
          failure = "no response from " + endpoint + " within " +
                    std::to_string(options().first_byte_timeout_ms) + " ms";
          failure_status = 504;
          break;
        }
        failure = "upstream " + endpoint + ": " + ec.message();
        if (!was_reused || interrupts->client_gone) break;
      }
    }
    if (interrupts->client_gone) {
      interrupts->upstream = nullptr;
      connection.reset();
      server_.dispatcher.Finish(slot, endpoint, Dispatcher::Outcome::kAbandoned,
                                {record.input_tokens, 0, 0}, Now());
      finish_record("cancelled", 499);
      co_return false;
    }
    int upstream_status = connection ? static_cast<int>(parser->get().result_int()) : 0;
    const bool retryable =
        !connection || upstream_status == 502 || upstream_status == 503 || upstream_status == 504;
    if (!retryable) break;
    if (connection) {  // a 5xx verdict: this connection's body is not wanted
      failure = "upstream " + endpoint + " answered " + std::to_string(upstream_status);
      failure_status = upstream_status == 504 ? 504 : 502;
      interrupts->upstream = nullptr;
      connection.reset();
    }
    // Retry() settles the failed endpoint itself; without a next one the
    // request finishes with no endpoint left to settle.
    std::optional<std::string> next;
    bool settled = false;
    if (attempt < options().max_retries) {
      next = server_.dispatcher.Retry(slot, endpoint, tried, Now());
      settled = true;
    }
    if (!next) {
      server_.dispatcher.Finish(slot, settled ? "" : endpoint, Dispatcher::Outcome::kFailed,
                                {record.input_tokens, 0, 0}, Now());
      refusal = ApiError{failure_status, "server_error",
                         failure_status == 504 ? "upstream_timeout" : "upstream_error", failure};
      finish_record("failed", refusal->status);
      co_return co_await SendError(*refusal, keep_alive, request_id);
    }
    endpoint = *next;
  }

  // Relay the response.
  auto& response = *parser;
  const int upstream_status = static_cast<int>(response.get().result_int());
  auto content_type_field = response.get()[bhttp::field::content_type];
  std::string content_type(content_type_field.data(), content_type_field.size());
  if (content_type.empty()) content_type = "application/json";
  const bool streaming = parsed->stream && upstream_status == 200 &&
                         content_type.find("text/event-stream") != std::string::npos;
  gateway::SseRelay relay(parsed->client_wants_usage);
  std::string whole;  // non-streamed body
  if (streaming && piece_.empty()) piece_.resize(kPieceBytes);
  bool journaled = false;
  bool client_ok = true;
  bool upstream_ok = true;
  int64_t charged = 0;
  int64_t chunks_since_charge = 0;

  // Usage as the upstream reported it; without it, streamed content chunks
  // or (not streamed) an estimate from the body's size.
  auto tokens_now = [&]() {
    gateway::Usage usage = streaming ? relay.usage() : gateway::UsageFromResponse(whole);
    if (usage.present) {
      record.input_tokens = usage.prompt_tokens;
      record.output_tokens = usage.completion_tokens;
      record.cached_tokens = usage.cached_tokens;
    } else if (streaming) {
      record.output_tokens = relay.StreamedTokens();
    } else if (upstream_status == 200) {
      record.output_tokens = gateway::EstimateTokens(whole);
    }
  };

  // From a stream's first byte on the client receives tokens: until its final
  // record, a checkpoint (refreshed every second) stands for it should the
  // gateway die.
  int64_t checkpointed_at = 0;
  auto checkpoint = [&]() {
    tokens_now();
    record.http_status = 200;
    checkpointed_at = Now();
    record.total_ms = checkpointed_at - arrived;
    record.ttft_ms = first_byte_at - arrived;
    if (auto s = server_.journal.Checkpoint(record); !s.has_value()) {
      spdlog::warn("gateway: cannot checkpoint request {}: {}", request_id, s.error().message);
    }
  };
  if (streaming) {
    first_byte_at = Now();
    checkpoint();
    const std::string head = ResponseHead(200, "text/event-stream", -1, keep_alive, request_id);
    client_ok = co_await WriteAll(head);
  }
  const size_t max_body = options().max_upstream_body_bytes;
  while (client_ok && !response.is_done()) {
    // A stream is read piece by piece into the connection's buffer; a whole
    // body straight into `whole`, sized by its Content-Length when it has one.
    char* into = piece_.data();
    size_t room = piece_.size();
    if (!streaming) {
      const size_t have = whole.size();
      const auto length = response.content_length();
      room = length && *length > have
                 ? static_cast<size_t>(std::min<uint64_t>(*length, max_body + 1)) - have
                 : kPieceBytes;
      if (have + room > max_body + 1) room = max_body + 1 - have;
      whole.resize(have + room);
      into = whole.data() + have;
    }
    response.get().body().data = into;
    response.get().body().size = room;
    beast::error_code ec;
    connection->tcp().expires_after(Millis(options().stream_idle_timeout_ms));
    // read_some: hand on what has arrived, not a full buffer.
    auto read = connection->With([&](auto& stream) {
      return bhttp::async_read_some(stream, connection->buffer, response,
                                    net::redirect_error(net::use_awaitable, ec));
    });
    co_await std::move(read);
    const size_t n = room - response.get().body().size;
    if (!streaming) whole.resize(whole.size() - room + n);
    if (ec == bhttp::error::need_buffer) ec = {};
    // A TLS peer that ends a body delimited by the connection's close without
    // a close_notify: the end of the body all the same (over plain TCP that
    // close is an eof, which the parser takes as the end).
    if (ec == net::ssl::error::stream_truncated && response.need_eof()) {
      ec = {};
      response.put_eof(ec);
    }
    if (ec) {
      upstream_ok = false;
      break;
    }
    if (!streaming) {
      if (whole.size() > max_body) {
        upstream_ok = false;
        break;
      }
      continue;
    }
    std::string out = relay.Feed(std::string_view(piece_.data(), n));
    if (relay.saw_done() && !journaled) {
      // The client may treat [DONE] as the end: the record is durable first.
      tokens_now();
      finish_record("completed", 200);
      journaled = true;
    }
    if (!out.empty()) {
      char size_line[32];
      int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", out.size());
      out += "\r\n";
      client_ok = co_await WriteAll(std::string_view(size_line, static_cast<size_t>(len)), out);
    }
    if (!journaled && Now() - checkpointed_at >= kCheckpointEveryMs) checkpoint();
    if (++chunks_since_charge >= kChargeEveryChunks) {
      chunks_since_charge = 0;
      int64_t served = relay.StreamedTokens();
      if (served > charged) {
        server_.dispatcher.ChargeOutput(slot, served - charged);
        charged = served;
      }
    }
  }
  interrupts->upstream = nullptr;
  if (interrupts->client_gone) client_ok = false;

  Dispatcher::Outcome outcome = Dispatcher::Outcome::kSucceeded;
  bool keep_open = client_ok;
  if (streaming) {
    if (client_ok && upstream_ok) {
      std::string tail = relay.Finish();
      tokens_now();
      if (!journaled) {
        finish_record("completed", 200);
        journaled = true;
      }
      std::string framed;
      if (!tail.empty()) {
        char size_line[32];
        int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", tail.size());
        framed.append(size_line, static_cast<size_t>(len));
        framed += tail;
        framed += "\r\n";
      }
      framed += "0\r\n\r\n";
      client_ok = co_await WriteAll(framed);
      keep_open = client_ok;
    } else {
      tokens_now();
      if (!journaled) {
        finish_record(client_ok ? "failed" : "cancelled", client_ok ? 502 : 499);
        journaled = true;
      }
      outcome = client_ok ? Dispatcher::Outcome::kFailed : Dispatcher::Outcome::kAbandoned;
      keep_open = false;  // the client must see the stream break, not end
    }
  } else if (!upstream_ok) {
    tokens_now();
    outcome =
        interrupts->client_gone ? Dispatcher::Outcome::kAbandoned : Dispatcher::Outcome::kFailed;
    if (interrupts->client_gone) {
      finish_record("cancelled", 499);
      keep_open = false;
    } else {
      finish_record("failed", 502);
      const ApiError error{502, "server_error", "upstream_error",
                           "the model server's response broke off"};
      keep_open = co_await SendError(error, keep_alive, request_id);
    }
  } else {
    tokens_now();
    int status = upstream_status;
    if (status >= 500) {
      outcome = Dispatcher::Outcome::kFailed;
      finish_record("failed", status);
    } else {
      finish_record(status < 400 ? "completed" : "failed", status);
    }
    first_byte_at = Now();
    const std::string head = ResponseHead(status, content_type, static_cast<int64_t>(whole.size()),
                                          keep_alive, request_id);
    keep_open = co_await WriteAll(head, whole);
  }
  server_.dispatcher.Finish(slot, endpoint, outcome,
                            {record.input_tokens, record.output_tokens, charged}, Now());
  if (upstream_ok && response.is_done() && response.get().keep_alive() && connection &&
      !interrupts->client_gone) {
    connection->reused = false;
    pool_.GiveBack(endpoint, std::move(connection));
  }
  co_return keep_open;
}

}  // namespace

void GatewayServer::Impl::DeferWatch(size_t loop, const std::shared_ptr<Interrupts>& interrupts) {
  DeferredWatches& watches = *deferred_watches[loop];
  watches.due.emplace_back(std::chrono::steady_clock::now() + kWatchAfter, interrupts);
  if (watches.armed) return;
  watches.armed = true;
  watches.timer.expires_after(kWatchAfter);
  watches.timer.async_wait([this, loop](beast::error_code) { ArmDueWatches(loop); });
}

void GatewayServer::Impl::ArmDueWatches(size_t loop) {
  DeferredWatches& watches = *deferred_watches[loop];
  watches.armed = false;
  const auto now = std::chrono::steady_clock::now();
  while (!watches.due.empty() && watches.due.front().first <= now) {
    std::shared_ptr<Interrupts> interrupts = watches.due.front().second.lock();
    watches.due.pop_front();
    if (!interrupts || interrupts->done || interrupts->watched) continue;
    if (auto session = interrupts->session.lock()) session->WatchClient(interrupts);
  }
  if (watches.due.empty() || stopping.load()) return;
  watches.armed = true;
  watches.timer.expires_at(watches.due.front().first);
  watches.timer.async_wait([this, loop](beast::error_code) { ArmDueWatches(loop); });
}

awaitable<void> GatewayServer::Impl::AcceptLoop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(
        *loops[next_loop], net::redirect_error(net::use_awaitable, ec));
    if (stopping.load() || !acceptor.is_open()) co_return;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      net::steady_timer backoff(co_await net::this_coro::executor, Millis(50));
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    {
      std::lock_guard lock(sessions_mu);
      if (sessions >= options.max_connections) continue;  // closes the socket
      ++sessions;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const size_t loop = next_loop;
    next_loop = (next_loop + 1) % loops.size();  // connections round-robin over the loops
    std::make_shared<Session>(*this, loop, std::move(socket))->Start();
  }
}

awaitable<void> GatewayServer::Impl::CheckHealth(std::string url) {
  auto address = ParseUpstreamUrl(url);
  if (!address.has_value()) {
    dispatcher.HealthCheck(url, false, clock.NowMillis());
    co_return;
  }
  beast::error_code ec;
  UpstreamPool probe_pool(0);
  std::string why;
  auto connection =
      co_await Connect(probe_pool, url, *address, upstream_tls.get(), kHealthTimeoutMs, why);
  bool ok = false;
  if (connection) {
    std::string head = "GET " + address->base_path +
                       "/v1/models HTTP/1.1\r\nHost: " + address->host_header +
                       "\r\nConnection: close\r\n\r\n";
    connection->tcp().expires_after(Millis(kHealthTimeoutMs));
    auto write = connection->With([&](auto& stream) {
      return net::async_write(stream, net::buffer(head),
                              net::redirect_error(net::use_awaitable, ec));
    });
    co_await std::move(write);
    if (!ec) {
      bhttp::response_parser<bhttp::string_body> parser;
      auto read = connection->With([&](auto& stream) {
        return bhttp::async_read(stream, connection->buffer, parser,
                                 net::redirect_error(net::use_awaitable, ec));
      });
      co_await std::move(read);
      ok = !ec && parser.get().result_int() == 200;
      if (!ok) {
        why = ec ? "GET /v1/models: " + ec.message()
                 : "GET /v1/models answered " + std::to_string(parser.get().result_int());
      }
    } else {
      why = "GET /v1/models: " + ec.message();
    }
  }
  // Said once per change, not every check.
  auto last = health_verdicts.try_emplace(url, true).first;
  if (!ok && last->second) {
    spdlog::warn("gateway: endpoint {} fails its health check: {}", url, why);
  } else if (ok && !last->second) {
    spdlog::info("gateway: endpoint {} passes its health check again", url);
  }
  last->second = ok;
  dispatcher.HealthCheck(url, ok, clock.NowMillis());
}

awaitable<void> GatewayServer::Impl::Maintenance() {
  int64_t last_health = 0;
  while (!stopping.load()) {
    maintenance_timer.expires_after(Millis(100));
    beast::error_code ec;
    co_await maintenance_timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (stopping.load()) co_return;
    const int64_t now = clock.NowMillis();
    if (now - last_health >= options.health_interval_ms) {
      last_health = now;
      std::vector<std::string> urls;
      auto snapshot = policy.Current();
      for (const std::string& url : snapshot->EndpointUrls()) {
        net::co_spawn(*loops[0], CheckHealth(url), net::detached);
      }
    }
    dispatcher.Pump(now);
  }
}

GatewayServer::GatewayServer(GatewayOptions options, PolicyLoader& policy, UsageJournal& journal,
                             const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(options), policy, journal, clock)) {}

GatewayServer::~GatewayServer() { Stop(); }

Dispatcher& GatewayServer::dispatcher() { return impl_->dispatcher; }

Result<int> GatewayServer::Start() {
  Impl& impl = *impl_;
  ATRIUM_ASSIGN_OR_RETURN(impl.upstream_tls, MakeUpstreamTlsContext(impl.options.upstream_ca_file));
  beast::error_code ec;
  auto address = net::ip::make_address(impl.options.host, ec);
  if (ec)
    return Error::InvalidArgument("gateway listen host must be an IP address: " +
                                  impl.options.host);
  if (impl.options.port < 0 || impl.options.port > 65535) {
    return Error::InvalidArgument("gateway port out of range");
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(impl.options.port));
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(net::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = impl.acceptor.local_endpoint(ec);
  if (ec) {
    return Error::Unavailable("gateway cannot listen on " + impl.options.host + ":" +
                              std::to_string(impl.options.port) + ": " + ec.message());
  }
  crypto::InitCrypto();
  net::co_spawn(impl.acceptor.get_executor(), impl.AcceptLoop(), net::detached);
  net::co_spawn(*impl.loops[0], impl.Maintenance(), net::detached);
  for (auto& loop : impl.loops) {
    // A loop with nothing to do yet must keep running until Stop().
    impl.keep_running.push_back(net::make_work_guard(*loop));
    impl.threads.emplace_back([&impl, loop = loop.get()] {
      for (;;) {
        try {
          loop->run();
          return;
        } catch (const std::exception& e) {  // a bug in one exchange must not stop the others
          spdlog::error("gateway: uncaught exception: {}", e.what());
        }
      }
    });
  }
  impl.running = true;
  return static_cast<int>(bound.port());
}

void GatewayServer::Stop(int drain_ms) {
  Impl& impl = *impl_;
  if (!impl.running) return;
  impl.running = false;
  impl.stopping = true;
  net::post(impl.acceptor.get_executor(), [&impl] {
    beast::error_code ignored;
    impl.acceptor.close(ignored);
  });
  net::post(*impl.loops[0], [&impl] { impl.maintenance_timer.cancel(); });
  std::vector<std::function<void()>> closers;
  {
    std::lock_guard lock(impl.sessions_mu);
    for (auto& [session, close] : impl.closers) closers.push_back(close);
  }
  for (auto& close : closers) close();
  {
    // Requests in flight finish; keep-alive connections end after them.
    std::unique_lock lock(impl.sessions_mu);
    impl.sessions_done.wait_for(lock, Millis(drain_ms), [&] { return impl.sessions == 0; });
  }
  impl.keep_running.clear();
  for (auto& loop : impl.loops) loop->stop();
  for (auto& t : impl.threads) t.join();
  impl.threads.clear();
  // Records staged in a turn that did not run to its end.
  for (size_t loop = 0; loop < impl.loops.size(); ++loop) impl.FlushJournal(loop);
  for (auto& pool : impl.pools) pool.Clear();
}

}  // namespace atrium::gateway_server
