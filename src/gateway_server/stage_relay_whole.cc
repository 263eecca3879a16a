// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <chrono>

#include "gateway/relay_outcome.h"
#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::Refusal;

namespace {

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

// Reads a whole (not streamed) answer, bounded in size and time, then sends
// it at once, or the error the outcome table (gateway/relay_outcome.h) says.
awaitable<bool> Session::RelayWhole(Exchange& x) {
  auto& response = *x.response;
  UpstreamConnection& connection = *x.connection;
  std::string whole;
  bool upstream_ok = true;
  bool body_timed_out = false;  // not read by its deadline
  const size_t max_body = options().max_upstream_body_bytes;
  // A whole body must be read by this time (a stream is bounded by its
  // silences only: it may rightly run long).
  const auto body_deadline =
      std::chrono::steady_clock::now() + Millis(options().upstream_body_timeout_ms);
  while (!response.is_done()) {
    // Read piece by piece; the body grows as its bytes arrive, never by what
    // its Content-Length announces (a server may announce 64 MiB and send 10
    // bytes, and the buffer would be committed, zero-filled, anyway).
    response.get().body().data = piece_.data();
    response.get().body().size = piece_.size();
    beast::error_code ec;
    // What arrived with the head (often the whole answer) or with an earlier
    // read is parsed here: Beast's read would hand it over only after a
    // round through the event loop.
    bool deadline_bound = false;  // this read ends at the body's deadline
    if (!ParseBuffered(connection, response, ec)) {
      auto wait = Millis(options().stream_idle_timeout_ms);
      const auto left =
          std::chrono::duration_cast<Millis>(body_deadline - std::chrono::steady_clock::now());
      if (left <= Millis(0)) {
        body_timed_out = true;
        upstream_ok = false;
        break;
      }
      deadline_bound = left <= wait;
      wait = std::min(wait, left);
      connection.tcp().expires_after(wait);
      auto read = ReadSomeOf(connection, response, ec);
      co_await std::move(read);
    }
    const size_t n = TakePiece(response, piece_.size(), ec);
    if (ec) {
      body_timed_out = deadline_bound && ec == beast::error::timeout;
      upstream_ok = false;
      break;
    }
    if (whole.size() + n > max_body) {
      upstream_ok = false;
      break;
    }
    whole.append(piece_.data(), n);  // amortised growth: linear in the body
  }
  x.interrupts->upstream = nullptr;

  const gateway::RelayOutcome outcome = gateway::RelayOutcomeOf(
      {.streaming = false,
       .client = x.interrupts->client_gone ? gateway::ClientState::kGone
                                           : gateway::ClientState::kConnected,
       .upstream = upstream_ok      ? gateway::UpstreamState::kIntact
                   : body_timed_out ? gateway::UpstreamState::kTimedOut
                                    : gateway::UpstreamState::kBrokeOff,
       .shutting_down = x.interrupts->shutting_down,
       .upstream_status = x.answer.status,
       .recorded_at_done = false});
  // Tokens as the upstream reported them (the meter bounds them); without a
  // report, for an answer, an estimate from the body — a compressed body's
  // bytes say nothing: its reservation.
  const std::string& encoding = x.answer.encoding;
  x.meter.Received(static_cast<int64_t>(whole.size()));
  const gateway::Usage reported =
      encoding.empty() ? gateway::UsageFromResponse(whole, x.api) : gateway::Usage{};
  std::optional<int64_t> estimate;  // parses the body again: only when needed
  if (!reported.present && x.answer.status == 200) {
    estimate =
        encoding.empty() ? gateway::EstimateOutputTokens(x.api, whole) : x.meter.reserved_output();
  }
  x.meter.Tokens(reported, estimate);

  bool keep_open = false;
  if (outcome.reply == gateway::Reply::kUpstreamAnswer) {
    // The whole answer goes out now: its first byte is the first token's.
    x.meter.FirstByte(Now());
    Record(x, outcome);
    // The server's advice on when to come back (a 429 or 503 of its own)
    // reaches the client as it was given.
    std::string extra_headers = RetryAdvice(response.get());
    if (!encoding.empty()) extra_headers += "Content-Encoding: " + encoding + "\r\n";
    const std::string head =
        ResponseHead(x.answer.status, x.answer.content_type, static_cast<int64_t>(whole.size()),
                     x.keep_alive, x.request_id, extra_headers);
    keep_open = co_await WriteAll(head, whole);
  } else if (outcome.reply != gateway::Reply::kNothing) {
    Record(x, outcome);
    const Refusal error = outcome.reply == gateway::Reply::kShuttingDown ? Refusal::ShuttingDown()
                          : outcome.reply == gateway::Reply::kBodyTimeout
                              ? Refusal::UpstreamBodyTimeout(options().upstream_body_timeout_ms)
                              : Refusal::UpstreamBrokeOff();
    // A stopping gateway closes the connection after its answer.
    const bool keep_alive = x.keep_alive && outcome.reply != gateway::Reply::kShuttingDown;
    keep_open = co_await SendError(error, keep_alive, x.request_id);
  } else {
    Record(x, outcome);  // the client has gone: close
  }
  const int64_t charged = 0;  // only streams charge as they go
  Settle(x, outcome.verdict, charged, upstream_ok);
  co_return keep_open;
}

}  // namespace atrium::gateway_server
