// Internal to the engine simulator's HTTP shell (server.cc and the session
// files): Server::Core, what every connection shares, and Session, one
// connection. A session's methods are split by concern: its life, reading
// and routing requests, watching and closing (session.cc); the OpenAI and
// simulator endpoints (session_openai.cc); responses, streaming and writes
// (session_stream.cc). Nothing outside src/engine_sim includes this header
// (it pulls in Beast).
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine_sim/engine.h"
#include "engine_sim/openai.h"
#include "engine_sim/served_log.h"
#include "engine_sim/server.h"

namespace atrium::engine_sim {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Parser = bhttp::request_parser<bhttp::string_body>;
using SteadyClock = std::chrono::steady_clock;

class Session;

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
  std::string NextId();

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
  // The loaded LoRA adapters: name → folder (ServerOptions::enable_lora).
  mutable std::mutex adapters_mu;
  std::map<std::string, std::string> adapters;  // GUARDED_BY(adapters_mu)
  // The names a request may call: the models, then the adapters.
  std::vector<std::string> Served() const;
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
  // Prompt blocks of recent requests, by salt (prefix_cache.h): 64 Ki blocks
  // of 16 tokens, about a million tokens of KV cache.
  PrefixCache prefix_cache{65'536};  // GUARDED_BY(mu)
};

enum class AfterWrite { kNextRequest, kClose, kLinger };

// One streamed or non-streamed completion in progress on a session.
struct Completion {
  CompletionRequest request;
  ResponseMeta meta;
  std::optional<StreamEvents> events;               // chat and completions streams
  std::optional<ResponsesEvents> responses_events;  // Responses API streams
  RequestId engine_id = 0;                          // 0: answered inline (instant profile)
  uint64_t record = 0;                              // ServedLog handle
  int completion_tokens = 0;                        // once the engine finished
  FinishReason reason = FinishReason::kLength;
  bool engine_done = false;
  bool head_written = false;  // the stream's response head is in pending_ or sent
  int sent = 0;               // tokens in completed writes
  int in_write = 0;           // tokens in the write in flight
  int pending = 0;            // tokens in pending_
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Core* core);
  ~Session();
  void Start();
  // Only while no thread runs the io_context (Stop()).
  void CloseWhileLoopStopped();
  // From the pump (any thread): hands an engine event to this session.
  void Deliver(const EngineEvent& event);

 private:
  SteadyClock::duration IdleTimeout() const;

  // ---- Timeouts: one timer, re-armed lazily to the current deadline (session.cc).
  void ArmTimer(SteadyClock::time_point at);
  void OnTimer(beast::error_code ec);

  // ---- Reading and routing a request (session.cc).
  void ReadRequest();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnReadError(beast::error_code ec);
  void OnRequest(beast::error_code ec);
  void Route(bhttp::verb method, const std::string& target, const std::string& body);

  // ---- The endpoints (session_openai.cc).
  std::string StatusJson() const;
  // GET /metrics: the batch's running and waiting requests as Prometheus
  // gauges, by vLLM's names (a draining replica is stopped once idle).
  std::string MetricsText() const;
  std::string RecordId();
  std::string RequestIdHeader(const std::string& id);
  void Embeddings(const std::string& body);
  // /v1/rerank (`rerank`) or /v1/score.
  void Scores(bool rerank, const std::string& body);
  // /v1/audio/transcriptions (multipart/form-data).
  void Transcription(const std::string& body);
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter.
  void LoadAdapter(const std::string& body);
  void UnloadAdapter(const std::string& body);
  void StartCompletion(Endpoint endpoint, const std::string& body);

  // ---- Responses (session_stream.cc).
  void AppendHead(int status, std::string_view content_type, std::optional<size_t> content_length,
                  std::string_view extra_headers = {});
  void Respond(int status, std::string_view content_type, const std::string& body,
               AfterWrite after = AfterWrite::kNextRequest, std::string_view extra_headers = {});
  void RespondError(int status, const std::string& message, std::string_view type,
                    std::string_view param, std::string_view code,
                    AfterWrite after = AfterWrite::kNextRequest, std::string_view allow = {});
  void RespondError(const Error& error);

  // ---- Engine events (on the strand) and streaming (session_stream.cc).
  void OnEngineEvent(const EngineEvent& event);
  void AppendChunk(std::string_view data);
  void OnToken(int index);
  void OnFinished(int completion_tokens, FinishReason reason);

  // ---- Writing: at most one write in flight; what is produced meanwhile
  // waits in pending_ and goes out with the next one.
  void Flush();
  void OnWritten(beast::error_code ec);
  // The whole response is written.
  void EndResponse();

  // ---- Noticing a client that goes away while its request is in the engine
  // (session.cc).
  void Watch();
  void StopWatching();
  void OnReadable(beast::error_code ec, uint64_t generation);

  // ---- Closing (session.cc).
  void Linger();
  void DiscardInput();
  // Closes the connection; a request still in the engine is cancelled there
  // and recorded as cancelled with the tokens written so far.
  // With a write in flight the record waits for its outcome (the client may
  // have read it all before going away), unless the loop is stopped and the
  // write's handler will never run.
  void Close(bool loop_stopped = false);
  void EndCancelled();

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
  std::string content_type_;  // the request's Content-Type
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

}  // namespace atrium::engine_sim
