// One client connection to the gateway (session.cc): reads requests one
// after another (keep-alive), answers /v1/models and /healthz itself and
// sends each inference request through the chain of stages (exchange.h,
// one file per stage):
//
//   authenticate -> parse -> entitle -> limit -> queue -> route -> relay -> meter
//
// The pure parts of each stage live in src/gateway (PolicySnapshot,
// ParseRequest, ReadRequestOptions, the Dispatcher's cores, SseRelay,
// UsageMeter, RelayOutcomeOf); here is their I/O. A stage either passes
// the exchange on or ends it early (an `Early`: refused, failed or
// cancelled), and every exchange with a tenant ends with exactly one usage
// record.
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/openai.h"
#include "gateway/refusal.h"
#include "gateway/relay_outcome.h"
#include "gateway/usage_meter.h"
#include "gateway_server/server_impl.h"

namespace atrium::gateway_server {

namespace bhttp = boost::beast::http;
using HttpRequest = bhttp::request<bhttp::string_body>;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(GatewayServer::Impl& server, size_t loop, tcp::socket socket)
      : server_(server),
        loop_(loop),
        executor_(server.loops[loop]->get_executor()),
        pool_(server.pools[loop]),
        stream_(std::move(socket)) {}

  ~Session();

  // Registers the session (Stop() can end it while idle) and runs it.
  void Start();

  // Notices the client going away while its request waits or runs: takes it
  // out of the queue or aborts the upstream request (Interrupts).
  void WatchClient(const std::shared_ptr<Interrupts>& interrupts);

 private:
  // One request on its way through the chain (exchange.h).
  struct Exchange;
  // How a stage ends an exchange before its answer is relayed: the record's
  // status and what the client is told (nothing when it has gone).
  struct Early {
    gateway::UsageStatus status;
    std::optional<gateway::Refusal> refusal;
    static Early Rejected(gateway::Refusal r) { return {gateway::UsageStatus::kRejected, r}; }
    static Early Failed(gateway::Refusal r) { return {gateway::UsageStatus::kFailed, r}; }
    static Early Cancelled() { return {gateway::UsageStatus::kCancelled, std::nullopt}; }
  };

  const GatewayOptions& options() const { return server_.options; }
  int64_t Now() const { return server_.clock.NowMillis(); }

  // session.cc: the connection.
  awaitable<void> Run();
  // A request refused on its headers alone, before its body is read: more
  // than one Authorization header (400), an inference request whose key does
  // not authenticate (401), a body the gateway's BodyBudget has no room for
  // (503). Otherwise the room for the body is reserved, `held` bytes.
  std::optional<gateway::Refusal> AdmitHeaders(
      const bhttp::request_parser<bhttp::string_body>& parser, int64_t& held);
  // After an answer that leaves a request's body unread: stops sending and
  // reads (and drops) what the client still sends for a short while, so that
  // closing the socket with unread data (a reset) does not destroy the answer.
  awaitable<void> Linger();
  void ArmReadTimer();  // unless armed: wakes at read_deadline_ to end a late read
  awaitable<bool> Handle(HttpRequest& request, bool keep_alive);
  awaitable<bool> Models(HttpRequest& request, bool keep_alive, const std::string& request_id);
  // Writes a and b; first lets the journal write hold this request's record.
  awaitable<bool> WriteAll(std::string_view a, std::string_view b = {});
  awaitable<bool> SendError(const gateway::Refusal& refusal, bool keep_alive,
                            const std::string& request_id);

  // The chain (exchange.h lists its files). Each stage up to Route returns
  // the Early that ends the exchange, or nothing to pass it on; a relay
  // stage ends it as the outcome table (gateway/relay_outcome.h) says.
  awaitable<bool> Proxy(HttpRequest& request, gateway::Api api, bool keep_alive,
                        const std::string& request_id, int64_t arrived);
  std::optional<Early> Prepare(Exchange& x, const HttpRequest& request);  // parse, entitle, limit
  awaitable<std::optional<Early>> Queue(Exchange& x);
  awaitable<std::optional<Early>> Route(Exchange& x);
  // After Route: the answer's head, read into x.answer (stream or whole?).
  void ReadAnswerHead(Exchange& x);
  awaitable<bool> RelayStream(Exchange& x);
  awaitable<bool> RelayWhole(Exchange& x);
  // stage_settle.cc: an exchange ended early, by an Early.
  awaitable<bool> End(Exchange& x, const Early& early);
  // Finishes the exchange's record and stages it for this turn's journal write.
  void Meter(Exchange& x, gateway::UsageStatus status, int http_status);
  // Meters a relayed exchange as `outcome` says (unless recorded already).
  void Record(Exchange& x, const gateway::RelayOutcome& outcome);
  // Tells the dispatcher how the endpoint did (with the output tokens
  // `charged` as the stream went) and gives a connection whose answer was
  // read to its end back to the keep-alive pool.
  void Settle(Exchange& x, gateway::EndpointVerdict verdict, int64_t charged, bool upstream_ok);

  GatewayServer::Impl& server_;
  const size_t loop_;
  const Executor executor_;  // the connection's loop: everything below runs there
  UpstreamPool& pool_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string piece_;                  // upstream body bytes on their way to the relay or the body
  uint64_t journal_wait_ = 0;          // the journal batch the next write waits for (0: none)
  std::string journal_request_;        // the request whose record that batch holds
  bool journal_success_ = false;       // and its answer is a success (withheld if unrecorded)
  bool idle_ = false;                  // waiting for the next request
  std::weak_ptr<Interrupts> running_;  // the exchange under way, if any (Stop() cuts it)
  gateway::PolicySnapshot::KeyMemo key_memo_;  // this client's key, verified
  // The whole of a request must arrive by read_deadline_. One timer per
  // connection, re-armed only when it fires: moving the deadline for the
  // next request costs no timer operation.
  net::steady_timer read_timer_{executor_};
  std::chrono::steady_clock::time_point read_deadline_;
  bool read_timer_armed_ = false;
  uint64_t read_timer_arms_ = 0;  // which arming a wait belongs to
  bool read_timed_out_ = false;
};

// The bytes a request's body holds of the gateway's BodyBudget, given back
// when the request is done with.
struct BodyHold {
  gateway::BodyBudget& budget;
  int64_t bytes = 0;
  ~BodyHold() {
    if (bytes > 0) budget.Release(bytes);
  }
};

// A request header's value ("" when absent).
inline std::string_view HeaderOf(const HttpRequest& request, bhttp::field field) {
  auto value = request[field];
  return {value.data(), value.size()};
}

// Status line and headers. content_length < 0: chunked.
std::string ResponseHead(int status, std::string_view content_type, int64_t content_length,
                         bool keep_alive, std::string_view request_id,
                         std::string_view extra_headers = {});

}  // namespace atrium::gateway_server
