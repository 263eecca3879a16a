// Session: a connection's life — its timer, reading and routing requests,
// noticing a client that goes away, closing.
#include "engine_sim/session.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

namespace atrium::engine_sim {
namespace {

constexpr uint64_t kMaxBodyBytes = uint64_t{4} * 1024 * 1024;

constexpr uint32_t kMaxHeaderBytes = 16 * 1024;

// While a request is in the engine, pipelined bytes of the next one are read
// up to this much; beyond it the session stops reading until the response ends.
constexpr size_t kMaxPipelinedBytes = size_t{1024} * 1024;

// After an error that closes the connection, the rest of what the client
// sends is read and dropped for up to this long, so that closing does not
// reset the connection before the client has read the error.
constexpr int kLingerMs = 2000;

bool IsParseError(const beast::error_code& ec) {
  if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) return false;
  return ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}
}  // namespace

Session::Session(tcp::socket socket, Server::Core* core)
    : core_(core), socket_(std::move(socket)), timer_(socket_.get_executor()) {
  beast::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  // Affects only the synchronous calls in OnReadable: they must never block.
  socket_.non_blocking(true, ignored);
}

Session::~Session() {
  std::lock_guard lock(core_->sessions_mu);
  core_->sessions.erase(this);
}

void Session::Start() {
  {
    std::lock_guard lock(core_->sessions_mu);
    core_->sessions.emplace(this, weak_from_this());
  }
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    self->ArmTimer(SteadyClock::now() + self->IdleTimeout());
    self->ReadRequest();
  });
}

void Session::CloseWhileLoopStopped() { Close(/*loop_stopped=*/true); }

void Session::Deliver(const EngineEvent& event) {
  net::post(socket_.get_executor(),
            [self = shared_from_this(), event] { self->OnEngineEvent(event); });
}

SteadyClock::duration Session::IdleTimeout() const {
  return std::chrono::milliseconds(std::max(1, core_->options.idle_timeout_ms));
}

void Session::ArmTimer(SteadyClock::time_point at) {
  timer_armed_ = true;
  timer_.expires_at(at);
  timer_.async_wait([self = shared_from_this()](beast::error_code ec) { self->OnTimer(ec); });
}

void Session::OnTimer(beast::error_code ec) {
  timer_armed_ = false;
  if (ec || closed_) return;
  const auto now = SteadyClock::now();
  if (reading_ || lingering_) {
    if (now >= deadline_) return Close();
    return ArmTimer(deadline_);
  }
  ArmTimer(now + IdleTimeout());  // busy with a response: check again later
}

void Session::ReadRequest() {
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

void Session::OnHeader(beast::error_code ec) {
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

void Session::ReadBody() {
  bhttp::async_read(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
}

void Session::OnReadError(beast::error_code ec) {
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
    return RespondError(400, "malformed HTTP request: " + ec.message(), "invalid_request_error", "",
                        "", AfterWrite::kLinger);
  }
  Close();  // the peer went away, or the idle timeout closed the socket
}

void Session::OnRequest(beast::error_code ec) {
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
  content_type_.clear();
  if (auto it = request.find(bhttp::field::content_type); it != request.end()) {
    content_type_ = std::string(it->value());
  }
  std::string body = std::move(request.body());
  parser_.reset();
  Route(method, target, body);
}

void Session::Route(bhttp::verb method, const std::string& target, const std::string& body) {
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
  } else if (path == "/v1/responses") {
    if (require(bhttp::verb::post)) StartCompletion(Endpoint::kResponses, body);
  } else if (path == "/v1/audio/transcriptions") {
    if (require(bhttp::verb::post)) Transcription(body);
  } else if (path == "/v1/rerank") {
    if (require(bhttp::verb::post)) Scores(/*rerank=*/true, body);
  } else if (path == "/v1/score") {
    if (require(bhttp::verb::post)) Scores(/*rerank=*/false, body);
  } else if (path == "/v1/embeddings") {
    if (require(bhttp::verb::post)) Embeddings(body);
  } else if (path == "/v1/models") {
    if (require(bhttp::verb::get)) {
      Respond(200, "application/json",
              ModelsJson(core_->Served(), core_->created, core_->profile.max_context));
    }
  } else if (path.starts_with("/v1/models/")) {
    if (!require(bhttp::verb::get)) return;
    const std::string id = path.substr(std::string_view("/v1/models/").size());
    const std::vector<std::string> served = core_->Served();
    if (std::find(served.begin(), served.end(), id) == served.end()) {
      return RespondError(404, "The model `" + id + "` does not exist.", "invalid_request_error",
                          "model", "model_not_found");
    }
    Respond(200, "application/json", ModelJson(id, core_->created, core_->profile.max_context));
  } else if (path == "/v1/load_lora_adapter" && core_->options.enable_lora) {
    if (require(bhttp::verb::post)) LoadAdapter(body);
  } else if (path == "/v1/unload_lora_adapter" && core_->options.enable_lora) {
    if (require(bhttp::verb::post)) UnloadAdapter(body);
  } else if (path == "/sim/served") {
    if (require(bhttp::verb::get)) Respond(200, "application/json", core_->served.ToJson());
  } else if (path == "/sim/status") {
    if (require(bhttp::verb::get)) Respond(200, "application/json", StatusJson());
  } else if (path == "/metrics") {
    if (require(bhttp::verb::get)) Respond(200, "text/plain; version=0.0.4", MetricsText());
  } else if (path == "/healthz") {
    if (require(bhttp::verb::get)) Respond(200, "application/json", R"({"status":"ok"})");
  } else {
    RespondError(404, "Invalid URL (" + std::string(bhttp::to_string(method)) + " " + path + ")",
                 "invalid_request_error", "", "unknown_url");
  }
}

void Session::Watch() {
  if (watching_ || closed_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this(), generation = watch_generation_](
                         beast::error_code ec) { self->OnReadable(ec, generation); });
}

void Session::StopWatching() {
  ++watch_generation_;
  if (!watching_) return;
  watching_ = false;
  beast::error_code ignored;
  socket_.cancel(ignored);  // only the wait is outstanding here: no write is in flight
}

void Session::OnReadable(beast::error_code ec, uint64_t generation) {
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
  const size_t n = socket_.read_some(buffer_.prepare(std::min(available, kMaxPipelinedBytes)), ec);
  if (ec && ec != net::error::would_block && ec != net::error::try_again) return Close();
  buffer_.commit(n);
  Watch();
}

void Session::Linger() {
  lingering_ = true;
  deadline_ = SteadyClock::now() + std::chrono::milliseconds(kLingerMs);
  if (!timer_armed_) ArmTimer(deadline_);
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.clear();
  DiscardInput();
}

void Session::DiscardInput() {
  socket_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (self->closed_) return;
                            if (ec) return self->Close();
                            self->DiscardInput();  // nothing committed: the bytes are dropped
                          });
}

void Session::Close(bool loop_stopped) {
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

void Session::EndCancelled() {
  if (!completion_) return;
  core_->served.End(completion_->record, completion_->sent, /*cancelled=*/true);
  completion_.reset();
}

}  // namespace atrium::engine_sim
