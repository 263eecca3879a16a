// One inference request through the gateway's chain of stages (see
// session.h): Proxy() runs them in order; each stage either passes the
// Exchange on or ends it with an Early (refused, failed, cancelled).
// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <algorithm>
#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <cstdio>
#include <limits>
#include <variant>
#include <vector>

#include "gateway/request_options.h"
#include "gateway_server/session.h"

namespace atrium::gateway_server {

using gateway::Refusal;
using gateway::UsageStatus;

namespace {

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

// Feeds `response` the bytes `connection` has buffered (after the head, or
// left over from an earlier read): true when that made progress (body bytes,
// the message's end, or a malformed message in `ec`), false when the next
// bytes must be read from the network.
bool ParseBuffered(UpstreamConnection& connection,
                   bhttp::response_parser<bhttp::buffer_body>& response, beast::error_code& ec) {
  if (connection.buffer.size() == 0 || response.is_done()) return false;
  const size_t room = response.get().body().size;
  const size_t used = response.put(connection.buffer.data(), ec);
  connection.buffer.consume(used);
  if (ec == bhttp::error::need_more) ec = {};
  if (ec) return true;
  return response.is_done() || response.get().body().size != room;
}

// A server's Retry-After in milliseconds when given in seconds (as model
// servers give it); 0 when absent or a date.
int64_t RetryAfterMs(const bhttp::fields& head) {
  auto value = head[bhttp::field::retry_after];
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec != std::errc() || end != value.data() + value.size() || seconds < 0) return 0;
  return std::min<int64_t>(seconds, 86'400) * 1000;
}

// How a refusal is counted (RefusalTally): its code, else its type.
std::string_view RefusalReason(const Refusal& refusal) {
  if (!refusal.code.empty()) return refusal.code;
  if (!refusal.type.empty()) return refusal.type;
  return "refused";
}

// The server's Content-Encoding when it is not the identity: the body is
// compressed (the gateway asks for identity, a server may ignore that).
std::string CompressedEncoding(const bhttp::fields& head) {
  auto value = head[bhttp::field::content_encoding];
  std::string encoding(value.data(), value.size());
  if (encoding.empty() || beast::iequals(encoding, "identity") ||
      encoding.find_first_of("\r\n") != std::string::npos) {
    return {};
  }
  return encoding;
}

// The server's Retry-After and retry-after-ms (read by OpenAI's SDKs) as
// header lines to relay.
std::string RetryAdvice(const bhttp::fields& head) {
  std::string lines;
  for (const char* name : {"Retry-After", "Retry-After-Ms"}) {
    auto value = head[name];
    if (value.empty() || value.find_first_of("\r\n") != beast::string_view::npos) continue;
    lines.append(name).append(": ").append(value.data(), value.size()).append("\r\n");
  }
  return lines;
}

}  // namespace

struct Session::Exchange {
  Exchange(const std::string& id, const gateway::Caller& who, gateway::Api kind, int64_t at,
           bool keep, std::shared_ptr<const gateway::PolicySnapshot> policy)
      : request_id(id),
        api(kind),
        arrived(at),
        keep_alive(keep),
        snapshot(std::move(policy)),
        caller(who),
        meter(id, caller, kind, at) {}
  ~Exchange() {
    if (interrupts) interrupts->done = true;  // a watch still armed ignores what follows
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const std::string& request_id;
  const gateway::Api api;
  const int64_t arrived;
  const bool keep_alive;
  const std::shared_ptr<const gateway::PolicySnapshot> snapshot;  // owns the deployments
  const gateway::Caller& caller;                                  // the snapshot's
  gateway::UsageMeter meter;
  std::string_view body;  // the client's request body (owned by Session::Run)
  gateway::ParsedRequest parsed;
  SlotRequest slot;
  std::shared_ptr<Interrupts> interrupts;
  std::string endpoint;  // granted by the dispatcher; after Route() the one that answers
  std::unique_ptr<UpstreamConnection> connection;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> response;
};

awaitable<bool> Session::Proxy(HttpRequest& request, gateway::Api api, bool keep_alive,
                               const std::string& request_id, int64_t arrived) {
  auto snapshot = server_.policy.Current();
  // Authenticate. Without a tenant there is nobody to bill: no record.
  auto caller =
      snapshot->Authenticate(HeaderOf(request, bhttp::field::authorization), arrived, &key_memo_);
  if (!caller.has_value()) {
    const Refusal refusal = gateway::RefusalOf(caller.error());
    co_return co_await SendError(refusal, keep_alive, request_id);
  }
  // From here on the request has a tenant: it ends with exactly one record.
  Exchange x(request_id, **caller, api, arrived, keep_alive, std::move(snapshot));
  // Coroutine arguments are named lvalues, never temporaries: g++ 12
  // destroys some temporaries of a co_await expression twice.
  std::optional<Early> early = Prepare(x, request);
  if (!early) early = co_await Queue(x);
  if (!early) early = co_await Route(x);
  if (early) co_return co_await End(x, *early);
  co_return co_await Relay(x);
}

void Session::Meter(Exchange& x, UsageStatus status, int http_status) {
  journal_wait_ = server_.StageRecord(loop_, x.meter.Finish(status, http_status, Now()));
  journal_request_ = x.request_id;
  journal_success_ = http_status < 400;
}

awaitable<bool> Session::End(Exchange& x, const Early& early) {
  if (early.status == UsageStatus::kRejected && early.refusal) {
    // No model server saw it: nothing served, nothing billed. A count per
    // key, reason and minute, not a record: a flood of refusals must not
    // fill the store.
    server_.journal.CountRefusal(x.caller.tenant_id, x.caller.key_id, RefusalReason(*early.refusal),
                                 x.arrived);
    co_return co_await SendError(*early.refusal, x.keep_alive, x.request_id);
  }
  Meter(x, early.status, early.refusal ? early.refusal->status : 499);
  if (!early.refusal) co_return false;  // the client has gone: close
  co_return co_await SendError(*early.refusal, x.keep_alive, x.request_id);
}

// Parse, entitle, limit: the stages that need no waiting.
std::optional<Session::Early> Session::Prepare(Exchange& x, const HttpRequest& request) {
  x.body = request.body();
  auto parsed = gateway::ParseRequest(x.api, x.body);
  if (!parsed.has_value()) return Early::Rejected(gateway::RefusalOf(parsed.error()));
  x.parsed = std::move(*parsed);
  x.meter.Parsed(x.parsed);

  auto route = x.snapshot->Resolve(x.caller, x.parsed.model);
  if (!route.has_value()) return Early::Rejected(gateway::RefusalOf(route.error()));
  // The tenant's dedicated deployment first, unless all its endpoints are down.
  const DeploymentRecord* deployment = server_.dispatcher.Choose(route->deployments, x.arrived);
  x.meter.Routed(deployment->id);

  std::string_view priority_header;
  std::string_view deadline_header;
  for (const auto& field : request) {
    if (beast::iequals(field.name_string(), "x-atrium-priority")) {
      priority_header = std::string_view(field.value().data(), field.value().size());
    } else if (beast::iequals(field.name_string(), "x-atrium-deadline-ms")) {
      deadline_header = std::string_view(field.value().data(), field.value().size());
    }
  }
  auto read = gateway::ReadRequestOptions(
      priority_header, deadline_header, x.caller.priority,
      gateway::DeadlineBounds{options().default_deadline_ms, options().max_deadline_ms});
  if (auto* refusal = std::get_if<Refusal>(&read)) return Early::Rejected(std::move(*refusal));
  const auto& request_options = std::get<gateway::RequestOptions>(read);

  SlotRequest& slot = x.slot;
  slot.id = server_.next_slot_id.fetch_add(1);
  slot.tenant_id = x.caller.tenant_id;
  slot.key_id = x.caller.key_id;
  slot.weight = x.caller.weight;
  slot.priority = request_options.priority;
  slot.subjects = x.caller.subjects;
  slot.deployment = deployment;
  slot.input_tokens = x.parsed.estimated_input_tokens;
  slot.reserved_tokens = gateway::ReservedTokens(x.api, x.parsed, kDefaultOutputReserve);
  x.meter.Reserved(slot.reserved_tokens - x.parsed.estimated_input_tokens);
  slot.deadline_ms = x.arrived + request_options.deadline_ms;
  slot.stream = x.parsed.stream;
  return std::nullopt;
}

// The fair queue: an immediate start, or a wait for a grant until the
// deadline, the client's disconnect (which frees the place) or the grant.
awaitable<std::optional<Session::Early>> Session::Queue(Exchange& x) {
  x.interrupts = std::make_shared<Interrupts>();
  x.interrupts->session = weak_from_this();
  running_ = x.interrupts;
  std::optional<net::steady_timer> queue_timer;  // only when the request waits
  Admission admission =
      server_.dispatcher.Admit(x.slot, Now(), [executor = executor_, interrupts = x.interrupts] {
        net::post(executor, [interrupts] {
          if (!interrupts->done && interrupts->queue_timer) interrupts->queue_timer->cancel();
        });
      });
  if (admission.kind == Admission::Kind::kRefused) {
    // The dispatcher refuses with a 429 (a limit) or a 503 (no endpoint).
    co_return Early::Rejected(
        admission.http_status == 429
            ? Refusal::RateLimited(admission.reason, admission.retry_after_ms)
            : Refusal::Unavailable(admission.reason, admission.retry_after_ms));
  }
  if (admission.kind == Admission::Kind::kStarted) {
    x.endpoint = admission.endpoint;
    x.meter.Dequeued(Now());
    server_.DeferWatch(loop_, x.interrupts);
    co_return std::nullopt;
  }
  // The request is to wait: its body waits with it, within its tenant's
  // share of the memory for queued bodies.
  const auto body_bytes = static_cast<int64_t>(x.body.size());
  if (!server_.body_budget.ReserveQueued(x.caller.tenant_id, body_bytes)) {
    if (server_.dispatcher.Cancel(x.slot.id, Now())) {
      x.meter.Dequeued(Now());
      co_return Early::Rejected(
          Refusal::QueuedBodiesFull(server_.body_budget.options().queued_bytes_per_tenant));
    }
    // Granted meanwhile: it waits no longer.
    x.endpoint = server_.dispatcher.TakeGrant(x.slot.id).value_or("");
    x.meter.Dequeued(Now());
    server_.DeferWatch(loop_, x.interrupts);
    co_return std::nullopt;
  }
  struct QueuedHold {
    gateway::BodyBudget& budget;
    const std::string& tenant;
    int64_t bytes;
    ~QueuedHold() { budget.ReleaseQueued(tenant, bytes); }
  } queued_hold{server_.body_budget, x.caller.tenant_id, body_bytes};
  WatchClient(x.interrupts);  // a wait in the queue may be long
  queue_timer.emplace(executor_);
  x.interrupts->queue_timer = &*queue_timer;
  queue_timer->expires_after(Millis(std::max<int64_t>(0, x.slot.deadline_ms - Now())));
  beast::error_code ec;
  if (!x.interrupts->client_gone) {
    co_await queue_timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  x.interrupts->queue_timer = nullptr;
  x.meter.Dequeued(Now());
  if (auto grant = server_.dispatcher.TakeGrant(x.slot.id)) {
    x.endpoint = *grant;
  } else if (server_.dispatcher.Cancel(x.slot.id, Now())) {
    if (x.interrupts->client_gone) co_return Early::Cancelled();
    if (x.interrupts->shutting_down) co_return Early::Rejected(Refusal::ShuttingDown());
    co_return Early::Rejected(Refusal::QueueTimeout(x.slot.deadline_ms - x.arrived));
  } else {  // granted between the wake-up and Cancel()
    x.endpoint = server_.dispatcher.TakeGrant(x.slot.id).value_or("");
  }
  if (x.interrupts->client_gone && !x.endpoint.empty()) {
    server_.dispatcher.Finish(x.slot, x.endpoint, Dispatcher::Outcome::kAbandoned,
                              {x.meter.record().input_tokens, 0, 0}, Now());
    co_return Early::Cancelled();
  }
  co_return std::nullopt;
}

// Sends the request upstream and reads the response's head, retrying
// another endpoint (bounded) only before the first byte: on a connection
// that fails, or a 502/503/504 answer.
awaitable<std::optional<Session::Early>> Session::Route(Exchange& x) {
  const std::string upstream_body = gateway::UpstreamBody(x.body, x.parsed);
  std::vector<std::string> tried;
  std::string failure;  // for the operator's log: may name the endpoint
  int failure_status = 502;
  int64_t failure_retry_after_ms = 0;
  // A tenant's dedicated deployment sends only where the egress policy lets it.
  std::shared_ptr<const gateway::EgressFacts> egress;
  if (x.slot.deployment->visibility != "shared") egress = server_.EgressFactsOf(*x.snapshot);
  AddressCheck egress_check;
  for (int attempt = 0;; ++attempt) {
    tried.push_back(x.endpoint);
    x.meter.Upstream(x.endpoint);
    failure.clear();
    auto address = ParseUpstreamUrl(x.endpoint);
    if (!address.has_value()) {
      failure = address.error().message;
    } else if (egress && !(failure = server_.EgressRefusal(*egress, x.endpoint)).empty()) {
      // Refused like an unreachable endpoint: another may be tried.
    } else {
      std::string head = "POST " + address->base_path + std::string(UpstreamPath(x.api)) +
                         " HTTP/1.1\r\nHost: " + address->host_header +
                         "\r\nContent-Type: application/json\r\nAccept: " +
                         (x.parsed.stream ? "text/event-stream" : "application/json") +
                         // Metered answers must be readable: no compression.
                         "\r\nAccept-Encoding: identity\r\nX-Request-Id: " + x.request_id +
                         "\r\nContent-Length: " + std::to_string(upstream_body.size()) + "\r\n\r\n";
      // A pooled connection the peer closed meanwhile fails at once: then
      // one fresh connection to the same endpoint, which is no verdict on it.
      for (int fresh = 0; fresh < 2; ++fresh) {
        beast::error_code ec;
        x.connection = pool_.TakeIdle(x.endpoint);
        if (!x.connection) {
          if (egress) egress_check = server_.EgressCheck(egress, x.endpoint);
          x.connection =
              co_await ConnectUpstream(pool_, x.endpoint, *address, server_.upstream_tls.get(),
                                       options().connect_timeout_ms, failure, &egress_check);
          if (!x.connection) break;
        }
        UpstreamConnection& connection = *x.connection;
        x.interrupts->upstream = &connection;
        if (x.interrupts->client_gone || x.interrupts->shutting_down) break;
        std::array<net::const_buffer, 2> out{net::buffer(head), net::buffer(upstream_body)};
        connection.tcp().expires_after(Millis(options().first_byte_timeout_ms));
        auto write = connection.With([&](auto& stream) {
          return net::async_write(stream, out, net::redirect_error(net::use_awaitable, ec));
        });
        co_await std::move(write);
        if (!ec) {
          x.meter.Sent();
          x.response.emplace();
          // No limit here (streams run long; non-streamed bodies are capped
          // in Relay). Not boost::none: Boost 1.74 then rejects every
          // Content-Length body.
          x.response->body_limit(std::numeric_limits<std::uint64_t>::max());
          auto read = connection.With([&](auto& stream) {
            return bhttp::async_read_header(stream, connection.buffer, *x.response,
                                            net::redirect_error(net::use_awaitable, ec));
          });
          co_await std::move(read);
        }
        if (!ec) break;
        const bool was_reused = connection.reused;
        x.interrupts->upstream = nullptr;
        x.connection.reset();
        if (ec == beast::error::timeout) {
          failure = "no response from " + x.endpoint + " within " +
                    std::to_string(options().first_byte_timeout_ms) + " ms";
          failure_status = 504;
          break;
        }
        failure = "upstream " + x.endpoint + ": " + ec.message();
        if (!was_reused || x.interrupts->client_gone) break;
      }
    }
    if (x.interrupts->client_gone || x.interrupts->shutting_down) {
      x.interrupts->upstream = nullptr;
      x.connection.reset();
      server_.dispatcher.Finish(x.slot, x.endpoint, Dispatcher::Outcome::kAbandoned,
                                {x.meter.record().input_tokens, 0, 0}, Now());
      if (x.interrupts->client_gone) co_return Early::Cancelled();
      co_return Early{UsageStatus::kInterrupted, Refusal::ShuttingDown()};
    }
    const int upstream_status = x.connection ? static_cast<int>(x.response->get().result_int()) : 0;
    const bool retryable =
        !x.connection || upstream_status == 502 || upstream_status == 503 || upstream_status == 504;
    if (!retryable) co_return std::nullopt;
    if (x.connection) {  // a 5xx verdict: this connection's body is not wanted
      failure = "upstream " + x.endpoint + " answered " + std::to_string(upstream_status);
      // An overloaded server's 503 stays a 503 (clients retry it), with its
      // Retry-After; a broken one's 502 and a slow one's 504 stay as well.
      failure_status = upstream_status;
      failure_retry_after_ms = RetryAfterMs(x.response->get());
      x.interrupts->upstream = nullptr;
      x.connection.reset();
    }
    // Retry() settles the failed endpoint itself; without a next one the
    // request finishes with no endpoint left to settle.
    std::optional<std::string> next;
    bool settled = false;
    if (attempt < options().max_retries) {
      next = server_.dispatcher.Retry(x.slot, x.endpoint, tried, Now());
      settled = true;
    }
    // The operator's log has the endpoint; the tenant's answer never does.
    spdlog::warn("gateway: request {} (deployment {}): {}", x.request_id, x.slot.deployment->id,
                 failure);
    if (!next) {
      server_.dispatcher.Finish(x.slot, settled ? "" : x.endpoint, Dispatcher::Outcome::kFailed,
                                {x.meter.record().input_tokens, 0, 0}, Now());
      co_return Early::Failed(Refusal::UpstreamFailed(
          failure_status, options().first_byte_timeout_ms, failure_retry_after_ms));
    }
    x.endpoint = *next;
  }
}

// Relays the response: a stream event by event as it is read (the usage
// chunk hidden from a client that did not ask for it), a whole body at once;
// then meters the exchange and settles it with the dispatcher.
awaitable<bool> Session::Relay(Exchange& x) {
  auto& response = *x.response;
  UpstreamConnection& connection = *x.connection;
  const int upstream_status = static_cast<int>(response.get().result_int());
  x.meter.Answered(upstream_status);
  auto content_type_field = response.get()[bhttp::field::content_type];
  std::string content_type(content_type_field.data(), content_type_field.size());
  if (content_type.empty()) content_type = "application/json";
  // A compressed answer cannot be read as events or metered from its text:
  // it is relayed whole, with its Content-Encoding, and billed as reserved.
  const std::string encoding = CompressedEncoding(response.get());
  const bool streaming = x.parsed.stream && upstream_status == 200 && encoding.empty() &&
                         content_type.find("text/event-stream") != std::string::npos;
  int64_t received = 0;  // body bytes of a stream read so far
  gateway::SseRelay relay(x.parsed.client_wants_usage);
  std::string whole;  // non-streamed body
  if (piece_.empty()) piece_.resize(kPieceBytes);
  bool client_ok = true;
  bool upstream_ok = true;
  bool body_timed_out = false;  // a whole body not read by its deadline
  int64_t charged = 0;          // output tokens charged to the fair queue so far
  int64_t chunks_since_charge = 0;
  // A stream's first body bytes came: its prefill is over. An answer that is
  // not a stream (an error, say) is whole when its head comes.
  bool first_token = false;
  if (x.slot.stream && !streaming) {
    first_token = true;
    server_.dispatcher.FirstToken(x.slot, Now());
  }

  // Tokens as the upstream reported them (the meter bounds them); without a
  // report a stream's relayed text (the meter bills at least its
  // reservation), or (not streamed, answered) an estimate from the body — a
  // compressed body's bytes say nothing: its reservation.
  auto count_tokens = [&]() {
    if (streaming) {
      x.meter.Received(received);
      x.meter.StreamChunks(relay.content_chunks());
      x.meter.Tokens(relay.usage(), relay.EstimatedOutputTokens());
    } else {
      x.meter.Received(static_cast<int64_t>(whole.size()));
      const gateway::Usage reported =
          encoding.empty() ? gateway::UsageFromResponse(whole) : gateway::Usage{};
      std::optional<int64_t> estimate;  // parses the body again: only when needed
      if (!reported.present && upstream_status == 200) {
        estimate = encoding.empty() ? gateway::EstimateOutputTokens(x.api, whole)
                                    : x.meter.reserved_output();
      }
      x.meter.Tokens(reported, estimate);
    }
  };

  // From a stream's first byte on the client receives tokens: until its final
  // record, a checkpoint (refreshed every second) stands for it should the
  // gateway die.
  int64_t checkpointed_at = 0;
  auto checkpoint = [&]() {
    count_tokens();
    checkpointed_at = Now();
    if (auto s = server_.journal.Checkpoint(x.meter.Snapshot(checkpointed_at)); !s.has_value()) {
      spdlog::warn("gateway: cannot checkpoint request {}: {}", x.request_id, s.error().message);
    }
  };
  if (streaming) {
    checkpoint();
    const std::string head = ResponseHead(200, "text/event-stream", -1, x.keep_alive, x.request_id);
    client_ok = co_await WriteAll(head);
  }
  const size_t max_body = options().max_upstream_body_bytes;
  // A whole body must be read by this time (a stream is bounded by its
  // silences only: it may rightly run long).
  const auto body_deadline =
      std::chrono::steady_clock::now() + Millis(options().upstream_body_timeout_ms);
  while (client_ok && !response.is_done()) {
    // Read piece by piece; a whole body grows as its bytes arrive, never by
    // what its Content-Length announces (a server may announce 64 MiB and
    // send 10 bytes, and the buffer would be committed, zero-filled, anyway).
    response.get().body().data = piece_.data();
    response.get().body().size = piece_.size();
    beast::error_code ec;
    // What arrived with the head (often the whole answer) or with an earlier
    // read is parsed here: Beast's read would hand it over only after a
    // round through the event loop.
    bool deadline_bound = false;  // this read ends at the body's deadline
    if (!ParseBuffered(connection, response, ec)) {
      auto wait = Millis(options().stream_idle_timeout_ms);
      if (!streaming) {
        const auto left =
            std::chrono::duration_cast<Millis>(body_deadline - std::chrono::steady_clock::now());
        if (left <= Millis(0)) {
          body_timed_out = true;
          upstream_ok = false;
          break;
        }
        deadline_bound = left <= wait;
        wait = std::min(wait, left);
      }
      connection.tcp().expires_after(wait);
      // read_some: hand on what has arrived, not a full buffer.
      auto read = connection.With([&](auto& stream) {
        return bhttp::async_read_some(stream, connection.buffer, response,
                                      net::redirect_error(net::use_awaitable, ec));
      });
      co_await std::move(read);
    }
    const size_t n = piece_.size() - response.get().body().size;
    if (ec == bhttp::error::need_buffer) ec = {};
    // A TLS peer that ends a body delimited by the connection's close without
    // a close_notify: the end of the body all the same (over plain TCP that
    // close is an eof, which the parser takes as the end).
    if (ec == net::ssl::error::stream_truncated && response.need_eof()) {
      ec = {};
      response.put_eof(ec);
    }
    if (ec) {
      body_timed_out = deadline_bound && ec == beast::error::timeout;
      upstream_ok = false;
      break;
    }
    if (!streaming) {
      if (whole.size() + n > max_body) {
        upstream_ok = false;
        break;
      }
      whole.append(piece_.data(), n);  // amortised growth: linear in the body
      continue;
    }
    if (!first_token && n > 0) {
      first_token = true;
      server_.dispatcher.FirstToken(x.slot, Now());
      x.meter.FirstByte(Now());  // not the head: a server may send it before its prefill
    }
    received += static_cast<int64_t>(n);
    std::string out = relay.Feed(std::string_view(piece_.data(), n));
    if (relay.saw_done() && !x.meter.finished()) {
      // The client may treat [DONE] as the end: the record is durable first.
      count_tokens();
      Meter(x, UsageStatus::kCompleted, 200);
    }
    if (!out.empty()) {
      char size_line[32];
      int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", out.size());
      out += "\r\n";
      client_ok = co_await WriteAll(std::string_view(size_line, static_cast<size_t>(len)), out);
    }
    if (!x.meter.finished() && Now() - checkpointed_at >= kCheckpointEveryMs) checkpoint();
    if (++chunks_since_charge >= kChargeEveryChunks) {
      chunks_since_charge = 0;
      // A server's claim counts no further than the meter believes it.
      x.meter.Received(received);
      int64_t served = std::min(relay.StreamedTokens(), x.meter.OutputBound());
      if (served > charged) {
        server_.dispatcher.ChargeOutput(x.slot, served - charged);
        charged = served;
      }
    }
  }
  x.interrupts->upstream = nullptr;
  if (x.interrupts->client_gone) client_ok = false;

  Dispatcher::Outcome outcome = Dispatcher::Outcome::kSucceeded;
  bool keep_open = client_ok;
  if (streaming) {
    if (client_ok && upstream_ok) {
      std::string tail = relay.Finish();
      count_tokens();
      if (!x.meter.finished()) Meter(x, UsageStatus::kCompleted, 200);
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
      count_tokens();
      if (!x.meter.finished()) {
        if (client_ok) {
          if (x.interrupts->shutting_down) {
            Meter(x, UsageStatus::kInterrupted, 503);
          } else {
            Meter(x, UsageStatus::kFailed, 502);
          }
        } else {
          Meter(x, UsageStatus::kCancelled, 499);
        }
      }
      outcome = client_ok ? Dispatcher::Outcome::kFailed : Dispatcher::Outcome::kAbandoned;
      keep_open = false;  // the client must see the stream break, not end
    }
  } else if (!upstream_ok) {
    count_tokens();
    if (x.interrupts->client_gone) {
      outcome = Dispatcher::Outcome::kAbandoned;
      Meter(x, UsageStatus::kCancelled, 499);
      keep_open = false;
    } else if (x.interrupts->shutting_down) {
      outcome = Dispatcher::Outcome::kAbandoned;  // no verdict on the endpoint
      Meter(x, UsageStatus::kInterrupted, 503);
      const Refusal error = Refusal::ShuttingDown();
      const bool keep_alive = false;
      keep_open = co_await SendError(error, keep_alive, x.request_id);
    } else if (body_timed_out) {
      outcome = Dispatcher::Outcome::kFailed;
      Meter(x, UsageStatus::kFailed, 504);
      const Refusal error = Refusal::UpstreamBodyTimeout(options().upstream_body_timeout_ms);
      keep_open = co_await SendError(error, x.keep_alive, x.request_id);
    } else {
      outcome = Dispatcher::Outcome::kFailed;
      Meter(x, UsageStatus::kFailed, 502);
      const Refusal error = Refusal::UpstreamBrokeOff();
      keep_open = co_await SendError(error, x.keep_alive, x.request_id);
    }
  } else {
    count_tokens();
    // The whole answer goes out now: its first byte is the first token's.
    x.meter.FirstByte(Now());
    if (upstream_status >= 500) {
      outcome = Dispatcher::Outcome::kFailed;
      Meter(x, UsageStatus::kFailed, upstream_status);
    } else {
      Meter(x, upstream_status < 400 ? UsageStatus::kCompleted : UsageStatus::kFailed,
            upstream_status);
    }
    // The server's advice on when to come back (a 429 or 503 of its own)
    // reaches the client as it was given.
    std::string extra_headers = RetryAdvice(response.get());
    if (!encoding.empty()) extra_headers += "Content-Encoding: " + encoding + "\r\n";
    const std::string head =
        ResponseHead(upstream_status, content_type, static_cast<int64_t>(whole.size()),
                     x.keep_alive, x.request_id, extra_headers);
    keep_open = co_await WriteAll(head, whole);
  }
  const UsageRecord& record = x.meter.record();
  server_.dispatcher.Finish(x.slot, x.endpoint, outcome,
                            {record.input_tokens, record.output_tokens, charged}, Now());
  if (upstream_ok && response.is_done() && response.get().keep_alive() &&
      !x.interrupts->client_gone) {
    x.connection->reused = false;
    pool_.GiveBack(x.endpoint, std::move(x.connection));
  }
  co_return keep_open;
}

}  // namespace atrium::gateway_server
