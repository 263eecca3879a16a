// Threads and ownership. Core owns the io_context (declared first, so it is
// destroyed last), the acceptor, the pump timer and the engine. A Session
// (one connection) runs on its own strand and holds a raw Core*: sessions
// only run while the io_context's threads run, and their destructors touch
// nothing of the Core but the session registry, which outlives the
// io_context (whose destructor destroys the sessions its pending handlers
// still hold).
//
// The engine and the map from engine request to session are guarded by
// Core::mu. The pump timer lives on its own strand: whenever the engine's
// next event time moves earlier, the submitter posts ArmPump there; the timer
// fires Pump(), which advances the engine to now, posts each event to its
// session's strand and re-arms for the next event.
//
// A session writes its response as plain bytes: a head it formats itself,
// then either a Content-Length body or (streams) HTTP chunks, one per SSE
// event, written as soon as they are produced; events produced while a write
// is in flight go out together in the next write. While its request is in the
// engine the session waits for the socket to become readable: either the
// client pipelined its next request (kept in the buffer), or it went away
// (the request is cancelled in the engine).

#include "engine_sim/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crypto/crypto.h"
#include "engine_sim/json_text.h"
#include "engine_sim/openai.h"
#include "threads/thread_name.h"

namespace atrium::engine_sim {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Parser = bhttp::request_parser<bhttp::string_body>;
using SteadyClock = std::chrono::steady_clock;

constexpr uint64_t kMaxBodyBytes = uint64_t{4} * 1024 * 1024;
constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
// While a request is in the engine, pipelined bytes of the next one are read
// up to this much; beyond it the session stops reading until the response ends.
constexpr size_t kMaxPipelinedBytes = size_t{1024} * 1024;
// After an error that closes the connection, the rest of what the client
// sends is read and dropped for up to this long, so that closing does not
// reset the connection before the client has read the error.
constexpr int kLingerMs = 2000;
// Buffers larger than this are released after their response.
constexpr size_t kKeepBufferBytes = size_t{64} * 1024;

// The standard phrase of a status code (Beast's table).
std::string_view ReasonPhrase(int status) {
  if (bhttp::int_to_status(static_cast<unsigned>(status)) == bhttp::status::unknown) {
    return "Unknown";  // e.g. a model server's own code, relayed
  }
  auto phrase = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return {phrase.data(), phrase.size()};
}

bool IsParseError(const beast::error_code& ec) {
  if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) return false;
  return ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string Hex16(uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kHex[v & 0xf];
  return out;
}

void AppendHex(size_t v, std::string& out) {
  char buffer[2 * sizeof(size_t)];
  int n = 0;
  do {
    buffer[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  while (n > 0) out.push_back(buffer[--n]);
}

std::vector<std::string> SplitModels(const std::string& list) {
  std::vector<std::string> models;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(start, comma - start);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty() && std::find(models.begin(), models.end(), name) == models.end()) {
      models.push_back(std::move(name));
    }
    start = comma + 1;
  }
  return models;
}

Result<tcp::endpoint> ListenEndpoint(const std::string& host_in, int port) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port < 0 || port > 65535) {
    return Error::InvalidArgument("port out of range: " + std::to_string(port));
  }
  beast::error_code ec;
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

class Session;

}  // namespace

struct Server::Core {
  Core(const ServerOptions& o, Profile p, std::vector<std::string> m)
      : io_context(std::max(1, o.threads)),
        acceptor(net::make_strand(io_context)),
        accept_retry_timer(acceptor.get_executor()),
        pump_strand(net::make_strand(io_context)),
        pump_timer(pump_strand),
        options(o),
        profile(p),
        models(std::move(m)),
        created(static_cast<int64_t>(std::time(nullptr))),
        epoch(SteadyClock::now()),
        served(o.max_served_records),
        engine(std::move(p)) {}

  Micros Now() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - epoch)
        .count();
  }

  // "esim-…", "chatcmpl-…": unique within this process.
  std::string NextId() { return Hex16(Mix(id_nonce + next_id.fetch_add(1))); }

  // Queues a request in the engine for `session`; its events will be posted
  // to it (token events only when `wants_tokens`).
  Result<RequestId> Submit(const EngineRequest& request, std::shared_ptr<Session> session,
                           bool wants_tokens);
  // Removes a request from the engine (no further events).
  void Cancel(RequestId id);

  void DoAccept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  void ArmPump();  // on pump_strand
  void Pump();     // on pump_strand
  void RunLoop();

  // Every open connection, so that Stop() can close them. Declared before
  // the io_context: sessions destroyed with its pending handlers unregister here.
  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // GUARDED_BY(sessions_mu)

  // Declared before the rest: destroyed after everything that uses it.
  net::io_context io_context;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry_timer;  // on the acceptor's strand
  net::strand<net::io_context::executor_type> pump_strand;
  net::steady_timer pump_timer;  // only on pump_strand
  std::vector<std::thread> threads;

  const ServerOptions options;
  const Profile profile;
  const std::vector<std::string> models;
  const int64_t created;
  const SteadyClock::time_point epoch;
  uint64_t id_nonce = 0;
  std::atomic<uint64_t> next_id{0};
  ServedLog served;

  struct Active {
    std::shared_ptr<Session> session;
    bool wants_tokens = false;
  };
  mutable std::mutex mu;
  Engine engine;                                 // GUARDED_BY(mu)
  std::unordered_map<RequestId, Active> active;  // GUARDED_BY(mu)
  std::optional<Micros> pump_at;                 // GUARDED_BY(mu): when Pump is due
};

namespace {

enum class AfterWrite { kNextRequest, kClose, kLinger };

// One streamed or non-streamed completion in progress on a session.
struct Completion {
  CompletionRequest request;
  ResponseMeta meta;
  std::optional<StreamEvents> events;  // streams only
  RequestId engine_id = 0;             // 0: answered inline (instant profile)
  uint64_t record = 0;                 // ServedLog handle
  int completion_tokens = 0;           // once the engine finished
  FinishReason reason = FinishReason::kLength;
  bool engine_done = false;
  bool head_written = false;  // the stream's response head is in pending_ or sent
  int sent = 0;               // tokens in completed writes
  int in_write = 0;           // tokens in the write in flight
  int pending = 0;            // tokens in pending_
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Core* core)
      : core_(core), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    beast::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    // Affects only the synchronous calls in OnReadable: they must never block.
    socket_.non_blocking(true, ignored);
  }

  ~Session() {
    std::lock_guard lock(core_->sessions_mu);
    core_->sessions.erase(this);
  }

  void Start() {
    {
      std::lock_guard lock(core_->sessions_mu);
      core_->sessions.emplace(this, weak_from_this());
    }
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      self->ArmTimer(SteadyClock::now() + self->IdleTimeout());
      self->ReadRequest();
    });
  }

  // Only while no thread runs the io_context (Stop()).
  void CloseWhileLoopStopped() { Close(/*loop_stopped=*/true); }

  // From the pump (any thread): hands an engine event to this session.
  void Deliver(const EngineEvent& event) {
    net::post(socket_.get_executor(),
              [self = shared_from_this(), event] { self->OnEngineEvent(event); });
  }

 private:
  SteadyClock::duration IdleTimeout() const {
    return std::chrono::milliseconds(std::max(1, core_->options.idle_timeout_ms));
  }

  // ---- Timeouts: one timer, re-armed lazily to the current deadline.
  void ArmTimer(SteadyClock::time_point at) {
    timer_armed_ = true;
    timer_.expires_at(at);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) { self->OnTimer(ec); });
  }

  void OnTimer(beast::error_code ec) {
    timer_armed_ = false;
    if (ec || closed_) return;
    const auto now = SteadyClock::now();
    if (reading_ || lingering_) {
      if (now >= deadline_) return Close();
      return ArmTimer(deadline_);
    }
    ArmTimer(now + IdleTimeout());  // busy with a response: check again later
  }

  // ---- Reading a request.
  void ReadRequest() {
    if (closed_) return;
    reading_ = true;
    deadline_ = SteadyClock::now() + IdleTimeout();
    if (!timer_armed_) ArmTimer(deadline_);
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(kMaxBodyBytes);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnReadError(ec);
    if (parser_->is_done()) return OnRequest({});
    const auto& request = parser_->get();
    auto expect = request.find(bhttp::field::expect);
    if (expect != request.end() && beast::iequals(expect->value(), "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (self->closed_) return;
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void OnReadError(beast::error_code ec) {
    parser_.reset();
    reading_ = false;
    if (ec == bhttp::error::body_limit) {
      return RespondError(413, "request body is larger than 4194304 bytes", "invalid_request_error",
                          "", "request_too_large", AfterWrite::kLinger);
    }
    if (ec == bhttp::error::header_limit) {
      return RespondError(431, "request header fields are larger than 16384 bytes",
                          "invalid_request_error", "", "", AfterWrite::kLinger);
    }
    if (IsParseError(ec)) {
      return RespondError(400, "malformed HTTP request: " + ec.message(), "invalid_request_error",
                          "", "", AfterWrite::kLinger);
    }
    Close();  // the peer went away, or the idle timeout closed the socket
  }

  void OnRequest(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnReadError(ec);
    reading_ = false;
    auto& request = parser_->get();
    version_ = request.version();
    keep_alive_ = request.keep_alive();
    const bhttp::verb method = request.method();
    std::string target(request.target());
    client_request_id_.clear();
    if (auto it = request.find("x-request-id"); it != request.end()) {
      client_request_id_ = std::string(it->value());
    }
    std::string body = std::move(request.body());
    parser_.reset();
    Route(method, target, body);
  }

  void Route(bhttp::verb method, const std::string& target, const std::string& body) {
    const std::string path = target.substr(0, target.find('?'));
    auto require = [&](bhttp::verb want) {
      if (method == want) return true;
      RespondError(405,
                   "Method " + std::string(bhttp::to_string(method)) + " not allowed for " + path,
                   "invalid_request_error", "", "method_not_allowed", AfterWrite::kNextRequest,
                   want == bhttp::verb::get ? "GET" : "POST");
      return false;
    };
    if (path == "/v1/chat/completions") {
      if (require(bhttp::verb::post)) StartCompletion(Endpoint::kChatCompletions, body);
    } else if (path == "/v1/completions") {
      if (require(bhttp::verb::post)) StartCompletion(Endpoint::kCompletions, body);
    } else if (path == "/v1/embeddings") {
      if (require(bhttp::verb::post)) Embeddings(body);
    } else if (path == "/v1/models") {
      if (require(bhttp::verb::get)) {
        Respond(200, "application/json",
                ModelsJson(core_->models, core_->created, core_->profile.max_context));
      }
    } else if (path.starts_with("/v1/models/")) {
      if (!require(bhttp::verb::get)) return;
      const std::string id = path.substr(std::string_view("/v1/models/").size());
      if (std::find(core_->models.begin(), core_->models.end(), id) == core_->models.end()) {
        return RespondError(404, "The model `" + id + "` does not exist.", "invalid_request_error",
                            "model", "model_not_found");
      }
      Respond(200, "application/json", ModelJson(id, core_->created, core_->profile.max_context));
    } else if (path == "/sim/served") {
      if (require(bhttp::verb::get)) Respond(200, "application/json", core_->served.ToJson());
    } else if (path == "/sim/status") {
      if (require(bhttp::verb::get)) Respond(200, "application/json", StatusJson());
    } else if (path == "/healthz") {
      if (require(bhttp::verb::get)) Respond(200, "application/json", R"({"status":"ok"})");
    } else {
      RespondError(404, "Invalid URL (" + std::string(bhttp::to_string(method)) + " " + path + ")",
                   "invalid_request_error", "", "unknown_url");
    }
  }

  std::string StatusJson() const {
    std::lock_guard lock(core_->mu);
    const EngineStats& s = core_->engine.stats();
    std::string out = R"({"simulator":"atrium-engine-sim","profile":)";
    AppendJsonString(core_->profile.name, out);
    out += R"(,"max_batch":)" + std::to_string(core_->engine.profile().max_batch);
    out += R"(,"running":)" + std::to_string(core_->engine.running());
    out += R"(,"waiting":)" + std::to_string(core_->engine.waiting());
    out += R"(,"submitted":)" + std::to_string(s.submitted);
    out += R"(,"finished":)" + std::to_string(s.finished);
    out += R"(,"cancelled":)" + std::to_string(s.cancelled);
    out += R"(,"steps":)" + std::to_string(s.steps);
    out += R"(,"tokens_generated":)" + std::to_string(s.tokens_generated);
    out += R"(,"max_batch_seen":)" + std::to_string(s.max_batch_seen);
    out += '}';
    return out;
  }

  // ---- Responses.
  void AppendHead(int status, std::string_view content_type, std::optional<size_t> content_length,
                  std::string_view extra_headers = {}) {
    pending_ += "HTTP/1.1 ";
    pending_ += std::to_string(status);
    pending_ += ' ';
    pending_ += ReasonPhrase(status);
    pending_ += "\r\nServer: atrium-engine-sim\r\nContent-Type: ";
    pending_ += content_type;
    pending_ += "\r\n";
    if (content_length) {
      pending_ += "Content-Length: ";
      pending_ += std::to_string(*content_length);
      pending_ += "\r\n";
    } else if (chunked_) {
      pending_ += "Transfer-Encoding: chunked\r\n";
    }
    pending_ += extra_headers;
    if (!keep_alive_) {
      pending_ += "Connection: close\r\n";
    } else if (version_ < 11) {
      pending_ += "Connection: keep-alive\r\n";
    }
    pending_ += "\r\n";
  }

  void Respond(int status, std::string_view content_type, const std::string& body,
               AfterWrite after = AfterWrite::kNextRequest, std::string_view extra_headers = {}) {
    if (after != AfterWrite::kNextRequest) keep_alive_ = false;
    after_write_ = after != AfterWrite::kNextRequest ? after
                   : keep_alive_                     ? AfterWrite::kNextRequest
                                                     : AfterWrite::kClose;
    AppendHead(status, content_type, body.size(), extra_headers);
    pending_ += body;
    Flush();
  }

  void RespondError(int status, const std::string& message, std::string_view type,
                    std::string_view param, std::string_view code,
                    AfterWrite after = AfterWrite::kNextRequest, std::string_view allow = {}) {
    std::string extra;
    if (!allow.empty()) extra = "Allow: " + std::string(allow) + "\r\n";
    Respond(status, "application/json", ErrorJson(message, type, param, code), after, extra);
  }

  void RespondError(const Error& error) {
    if (error.code == ErrorCode::kNotFound) {
      return RespondError(404, error.message, "invalid_request_error", "model", "model_not_found");
    }
    RespondError(HttpStatusOf(error.code), error.message, "invalid_request_error", "", "");
  }

  std::string RecordId() {
    return client_request_id_.empty() ? "esim-" + core_->NextId() : client_request_id_;
  }

  std::string RequestIdHeader(const std::string& id) {
    std::string header = "X-Request-Id: ";
    header += id;
    header += "\r\n";
    return header;
  }

  void Embeddings(const std::string& body) {
    auto request = ParseEmbeddingRequest(body, core_->models, core_->options.seed);
    if (!request.has_value()) return RespondError(request.error());
    const std::string id = RecordId();
    core_->served.Begin({.request_id = id,
                         .model = request->model,
                         .endpoint = std::string(EndpointName(Endpoint::kEmbeddings)),
                         .prompt_tokens = request->prompt_tokens,
                         .stream = false,
                         .finished = true});
    Respond(200, "application/json", EmbeddingResponseJson(*request), AfterWrite::kNextRequest,
            RequestIdHeader(id));
  }

  void StartCompletion(Endpoint endpoint, const std::string& body) {
    auto parsed = ParseCompletionRequest(endpoint, body, core_->models, core_->options.seed);
    if (!parsed.has_value()) return RespondError(parsed.error());
    const Profile& profile = core_->profile;
    const int64_t context_left = profile.max_context - parsed->prompt_tokens;
    const int max_tokens = parsed->max_tokens.value_or(static_cast<int>(
        std::min<int64_t>(core_->options.default_max_tokens, std::max<int64_t>(context_left, 0))));
    if (context_left < 1 || max_tokens > context_left) {
      return RespondError(
          400,
          "This model's maximum context length is " + std::to_string(profile.max_context) +
              " tokens. However, you requested " +
              std::to_string(parsed->prompt_tokens + std::max(max_tokens, 1)) + " tokens (" +
              std::to_string(parsed->prompt_tokens) + " in the prompt, " +
              std::to_string(std::max(max_tokens, 1)) + " in the completion).",
          "invalid_request_error", endpoint == Endpoint::kChatCompletions ? "messages" : "prompt",
          "context_length_exceeded");
    }

    auto c = std::make_unique<Completion>();
    c->request = std::move(*parsed);
    const std::string own_id = core_->NextId();
    const std::string record_id =
        client_request_id_.empty() ? "esim-" + own_id : client_request_id_;
    c->meta = {.endpoint = endpoint,
               .id = (endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") + own_id,
               .created = static_cast<int64_t>(std::time(nullptr)),
               .model = c->request.model};
    if (c->request.stream) {
      c->events.emplace(c->meta, c->request.include_usage);
      // HTTP/1.0 has no chunked encoding: the end of the stream is the close.
      if (version_ < 11) keep_alive_ = false;
    }
    chunked_ = version_ >= 11;
    c->record = core_->served.Begin({.request_id = record_id,
                                     .model = c->request.model,
                                     .endpoint = std::string(EndpointName(endpoint)),
                                     .prompt_tokens = c->request.prompt_tokens,
                                     .stream = c->request.stream});
    request_id_header_ = RequestIdHeader(record_id);
    after_write_ = keep_alive_ ? AfterWrite::kNextRequest : AfterWrite::kClose;
    const int stop_after = NaturalLength(c->request.text_hash, core_->options.max_natural_length);
    const bool stream = c->request.stream;
    completion_ = std::move(c);

    if (profile.IsInstant()) {
      // Every token at once, in one write, without the engine or its timer.
      const bool stops = stop_after > 0 && stop_after <= max_tokens;
      const int n = stops ? stop_after : max_tokens;
      holding_writes_ = true;
      if (stream) {
        for (int i = 0; i < n; ++i) OnToken(i);
      }
      OnFinished(n, stops ? FinishReason::kStop : FinishReason::kLength);
      holding_writes_ = false;
      return Flush();
    }

    auto id = core_->Submit({.prompt_tokens = completion_->request.prompt_tokens,
                             .max_tokens = max_tokens,
                             .stop_after = stop_after},
                            shared_from_this(), stream);
    if (!id.has_value()) {  // the checks above make this unreachable
      core_->served.End(completion_->record, 0, /*cancelled=*/true);
      completion_.reset();
      return RespondError(id.error());
    }
    completion_->engine_id = *id;
    // A long-lived stream keeps no read buffer it does not need.
    if (buffer_.size() == 0) buffer_.shrink_to_fit();
    Watch();
  }

  // ---- Engine events (on the strand).
  void OnEngineEvent(const EngineEvent& event) {
    if (closed_ || !completion_ || completion_->engine_id != event.id) return;
    if (event.kind == EngineEvent::Kind::kToken) return OnToken(event.token_index);
    OnFinished(event.completion_tokens, event.reason);
  }

  void AppendChunk(std::string_view data) {
    if (chunked_) {
      AppendHex(data.size(), pending_);
      pending_ += "\r\n";
      pending_ += data;
      pending_ += "\r\n";
    } else {
      pending_ += data;
    }
  }

  void OnToken(int index) {
    Completion& c = *completion_;
    if (!c.events) return;  // non-streaming: the text is built at the end
    if (!c.head_written) {
      AppendHead(200, "text/event-stream", std::nullopt,
                 request_id_header_ + "Cache-Control: no-cache\r\n");
      c.head_written = true;
      scratch_.clear();
      c.events->AppendStart(scratch_);
      if (!scratch_.empty()) AppendChunk(scratch_);
    }
    scratch_.clear();
    c.events->AppendToken(TokenText(c.request.text_hash, index), scratch_);
    AppendChunk(scratch_);
    ++c.pending;
    Flush();
  }

  void OnFinished(int completion_tokens, FinishReason reason) {
    Completion& c = *completion_;
    c.engine_done = true;
    c.completion_tokens = completion_tokens;
    c.reason = reason;
    if (c.events) {
      if (!c.head_written) {  // unreachable: a request produces at least one token
        AppendHead(200, "text/event-stream", std::nullopt,
                   request_id_header_ + "Cache-Control: no-cache\r\n");
        c.head_written = true;
      }
      scratch_.clear();
      c.events->AppendFinish(reason, scratch_);
      AppendChunk(scratch_);
      scratch_.clear();
      c.events->AppendUsage(c.request.prompt_tokens, completion_tokens, scratch_);
      if (!scratch_.empty()) AppendChunk(scratch_);
      scratch_.clear();
      StreamEvents::AppendDone(scratch_);
      AppendChunk(scratch_);
      if (chunked_) pending_ += "0\r\n\r\n";
    } else {
      const std::string body =
          CompletionResponseJson(c.meta, CompletionText(c.request.text_hash, completion_tokens),
                                 c.request.prompt_tokens, completion_tokens, reason);
      AppendHead(200, "application/json", body.size(), request_id_header_);
      pending_ += body;
      c.pending = completion_tokens;
    }
    Flush();
  }

  // ---- Writing: at most one write in flight; what is produced meanwhile
  // waits in pending_ and goes out with the next one.
  void Flush() {
    if (writing_ || holding_writes_ || closed_ || pending_.empty()) return;
    out_.swap(pending_);
    pending_.clear();
    if (completion_) {
      completion_->in_write = completion_->pending;
      completion_->pending = 0;
    }
    writing_ = true;
    net::async_write(
        socket_, net::buffer(out_),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    if (completion_ && !ec) {
      completion_->sent += completion_->in_write;
      completion_->in_write = 0;
    }
    if (closed_) return EndCancelled();  // Close() waited for this write's outcome
    if (ec) return Close();
    out_.clear();
    if (out_.capacity() > kKeepBufferBytes) std::string().swap(out_);
    if (!pending_.empty()) return Flush();
    if (completion_ && !completion_->engine_done) return;  // more tokens to come
    EndResponse();
  }

  // The whole response is written.
  void EndResponse() {
    if (completion_) {
      core_->served.End(completion_->record, completion_->completion_tokens, /*cancelled=*/false);
      completion_.reset();
    }
    StopWatching();
    if (pending_.capacity() > kKeepBufferBytes) std::string().swap(pending_);
    switch (after_write_) {
      case AfterWrite::kNextRequest:
        return ReadRequest();
      case AfterWrite::kClose: {
        beast::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        return Close();
      }
      case AfterWrite::kLinger:
        return Linger();
    }
  }

  // ---- Noticing a client that goes away while its request is in the engine.
  void Watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this(), generation = watch_generation_](
                           beast::error_code ec) { self->OnReadable(ec, generation); });
  }

  void StopWatching() {
    ++watch_generation_;
    if (!watching_) return;
    watching_ = false;
    beast::error_code ignored;
    socket_.cancel(ignored);  // only the wait is outstanding here: no write is in flight
  }

  void OnReadable(beast::error_code ec, uint64_t generation) {
    if (closed_ || generation != watch_generation_) return;
    watching_ = false;
    if (ec) return Close();
    const size_t available = socket_.available(ec);
    if (ec) return Close();
    if (available == 0) {
      // Readable with nothing to read: the end of the stream (or a spurious wake-up).
      char byte;
      const size_t n = socket_.receive(net::buffer(&byte, 1), tcp::socket::message_peek, ec);
      if (ec == net::error::would_block || ec == net::error::try_again) return Watch();
      if (ec || n == 0) return Close();
      return Watch();
    }
    // The client pipelined its next request: keep it for later, up to a
    // limit; beyond it, stop reading until the response ends.
    if (buffer_.size() >= kMaxPipelinedBytes) return;
    const size_t n =
        socket_.read_some(buffer_.prepare(std::min(available, kMaxPipelinedBytes)), ec);
    if (ec && ec != net::error::would_block && ec != net::error::try_again) return Close();
    buffer_.commit(n);
    Watch();
  }

  // ---- Closing.
  void Linger() {
    lingering_ = true;
    deadline_ = SteadyClock::now() + std::chrono::milliseconds(kLingerMs);
    if (!timer_armed_) ArmTimer(deadline_);
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    buffer_.clear();
    DiscardInput();
  }

  void DiscardInput() {
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->DiscardInput();  // nothing committed: the bytes are dropped
                            });
  }

  // Closes the connection; a request still in the engine is cancelled there
  // and recorded as cancelled with the tokens written so far.
  // With a write in flight the record waits for its outcome (the client may
  // have read it all before going away), unless the loop is stopped and the
  // write's handler will never run.
  void Close(bool loop_stopped = false) {
    if (closed_) return;
    closed_ = true;
    if (completion_ && completion_->engine_id != 0 && !completion_->engine_done) {
      core_->Cancel(completion_->engine_id);
      completion_->engine_done = true;  // no further events
    }
    if (!writing_ || loop_stopped) EndCancelled();
    beast::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  void EndCancelled() {
    if (!completion_) return;
    core_->served.End(completion_->record, completion_->sent, /*cancelled=*/true);
    completion_.reset();
  }

  Server::Core* const core_;
  tcp::socket socket_;  // its executor is the connection's strand
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  std::unique_ptr<Completion> completion_;
  std::string out_;      // the bytes of the write in flight
  std::string pending_;  // bytes produced since
  std::string scratch_;  // one SSE event being formatted
  std::string client_request_id_;
  std::string request_id_header_;
  SteadyClock::time_point deadline_;
  uint64_t watch_generation_ = 0;
  unsigned version_ = 11;
  AfterWrite after_write_ = AfterWrite::kNextRequest;
  bool keep_alive_ = true;
  bool chunked_ = true;
  bool reading_ = false;
  bool lingering_ = false;
  bool writing_ = false;
  bool holding_writes_ = false;
  bool watching_ = false;
  bool timer_armed_ = false;
  bool closed_ = false;
};

}  // namespace

Result<RequestId> Server::Core::Submit(const EngineRequest& request,
                                       std::shared_ptr<Session> session, bool wants_tokens) {
  bool arm = false;
  RequestId id = 0;
  {
    std::lock_guard lock(mu);
    auto submitted = engine.Submit(request, Now());
    if (!submitted.has_value()) return std::move(submitted).error();
    id = *submitted;
    active.emplace(id, Active{std::move(session), wants_tokens});
    const std::optional<Micros> next = engine.NextEventTime();
    if (next && (!pump_at || *next < *pump_at)) {
      pump_at = next;
      arm = true;
    }
  }
  if (arm) net::post(pump_strand, [this] { ArmPump(); });
  return id;
}

void Server::Core::Cancel(RequestId id) {
  std::shared_ptr<Session> released;  // dropped after the lock
  std::lock_guard lock(mu);
  engine.Cancel(id);
  if (auto it = active.find(id); it != active.end()) {
    released = std::move(it->second.session);
    active.erase(it);
  }
}

void Server::Core::ArmPump() {
  std::optional<Micros> at;
  {
    std::lock_guard lock(mu);
    at = pump_at;
  }
  if (!at) {
    pump_timer.cancel();
    return;
  }
  pump_timer.expires_at(epoch + std::chrono::microseconds(*at));
  pump_timer.async_wait([this](beast::error_code ec) {
    if (!ec) Pump();
  });
}

void Server::Core::Pump() {
  struct Delivery {
    std::shared_ptr<Session> session;
    EngineEvent event;
  };
  std::vector<Delivery> deliveries;
  {
    std::lock_guard lock(mu);
    const std::vector<EngineEvent> events = engine.Advance(Now());
    deliveries.reserve(events.size());
    for (const EngineEvent& event : events) {
      auto it = active.find(event.id);
      if (it == active.end()) continue;
      if (event.kind == EngineEvent::Kind::kFinished) {
        deliveries.push_back({std::move(it->second.session), event});
        active.erase(it);
      } else if (it->second.wants_tokens) {
        deliveries.push_back({it->second.session, event});
      }
    }
    pump_at = engine.NextEventTime();
  }
  for (const Delivery& d : deliveries) d.session->Deliver(d.event);
  ArmPump();
}

void Server::Core::DoAccept() {
  acceptor.async_accept(
      net::make_strand(io_context),
      [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void Server::Core::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {  // e.g. out of file descriptors: back off instead of spinning
    accept_retry_timer.expires_after(std::chrono::milliseconds(50));
    accept_retry_timer.async_wait([this](beast::error_code ec) {
      if (!ec && acceptor.is_open()) DoAccept();
    });
    return;
  }
  std::make_shared<Session>(std::move(socket), this)->Start();
  DoAccept();
}

void Server::Core::RunLoop() {
  for (;;) {
    try {
      io_context.run();
      return;
    } catch (...) {  // keep serving; a throwing completion handler is a bug
    }
  }
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Stop(); }

Result<int> Server::Start() {
  if (lifecycle_ != Lifecycle::kNew) return Error::FailedPrecondition("server was already started");
  Profile profile;
  if (options_.custom_profile) {
    profile = *options_.custom_profile;
  } else {
    ATRIUM_ASSIGN_OR_RETURN(profile, FindProfile(options_.profile));
  }
  if (options_.max_batch > 0) profile.max_batch = options_.max_batch;
  profile.max_batch = std::max(1, profile.max_batch);
  if (options_.threads < 1) return Error::InvalidArgument("threads must be at least 1");
  if (options_.default_max_tokens < 1) {
    return Error::InvalidArgument("default max tokens must be at least 1");
  }
  std::vector<std::string> models = SplitModels(options_.model);
  if (models.empty()) return Error::InvalidArgument("a model name is required");
  ATRIUM_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ListenEndpoint(options_.host, options_.port));

  auto core = std::make_unique<Core>(options_, std::move(profile), std::move(models));
  beast::error_code ec;
  core->acceptor.open(endpoint.protocol(), ec);
  if (!ec) core->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) core->acceptor.bind(endpoint, ec);
  if (!ec) core->acceptor.listen(net::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = core->acceptor.local_endpoint(ec);
  if (ec) {
    return Error::Unavailable("cannot listen on " + options_.host + ":" +
                              std::to_string(options_.port) + ": " + ec.message());
  }
  crypto::InitCrypto();
  const std::string nonce = crypto::RandomBytes(8);
  for (char c : nonce) core->id_nonce = (core->id_nonce << 8) | static_cast<unsigned char>(c);
  core->DoAccept();  // no thread runs the loop yet
  for (int i = 0; i < options_.threads; ++i) {
    core->threads.emplace_back([c = core.get(), i] {
      NameThisThread("engine-sim-" + std::to_string(i));
      c->RunLoop();
    });
  }
  core_ = std::move(core);
  lifecycle_ = Lifecycle::kRunning;
  return static_cast<int>(bound.port());
}

void Server::Stop() {
  if (lifecycle_ != Lifecycle::kRunning) {
    lifecycle_ = Lifecycle::kStopped;
    return;
  }
  lifecycle_ = Lifecycle::kStopped;
  core_->io_context.stop();
  for (auto& thread : core_->threads) thread.join();
  core_->threads.clear();
  beast::error_code ignored;
  core_->acceptor.close(ignored);
  // Close every connection now (a request in flight is recorded as
  // cancelled); the Session objects themselves go with the io_context's
  // pending handlers when the Core is destroyed.
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(core_->sessions_mu);
    for (auto& [ptr, weak] : core_->sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (const auto& session : open) session->CloseWhileLoopStopped();
  open.clear();
  std::unordered_map<RequestId, Core::Active> active;
  {
    std::lock_guard lock(core_->mu);
    active.swap(core_->active);
  }
}

const Profile& Server::profile() const { return core_->profile; }

const std::vector<std::string>& Server::models() const { return core_->models; }

EngineStatus Server::Status() const {
  if (!core_) return {};
  std::lock_guard lock(core_->mu);
  return {.profile = core_->profile.name,
          .max_batch = core_->engine.profile().max_batch,
          .running = core_->engine.running(),
          .waiting = core_->engine.waiting(),
          .stats = core_->engine.stats()};
}

ServedTotals Server::Served() const { return core_ ? core_->served.Totals() : ServedTotals(); }

}  // namespace atrium::engine_sim
