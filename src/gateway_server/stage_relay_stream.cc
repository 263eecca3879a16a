// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "gateway/relay_outcome.h"
#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::UsageStatus;

namespace {

// A chunk of the client's chunked answer: its size line, then `data`.
size_t SizeLine(char (&line)[32], size_t size) {
  return static_cast<size_t>(std::snprintf(line, sizeof line, "%zx\r\n", size));
}

}  // namespace

// Relays a stream event by event as it is read (the usage chunk hidden from
// a client that did not ask for it), charges its output to the fair queue as
// it goes and keeps its checkpoint fresh; then ends it as the outcome table
// (gateway/relay_outcome.h) says.
awaitable<bool> Session::RelayStream(Exchange& x) {
  auto& response = *x.response;
  UpstreamConnection& connection = *x.connection;
  int64_t received = 0;  // body bytes read so far
  gateway::SseRelay relay(x.parsed.client_wants_usage, x.api);
  bool client_ok = true;
  bool upstream_ok = true;
  int64_t charged = 0;  // output tokens charged to the fair queue so far
  int64_t chunks_since_charge = 0;
  bool first_token = false;  // its first body bytes came: its prefill is over

  // Tokens as the upstream reported them (the meter bounds them); without a
  // report the relayed text (the meter bills at least its reservation).
  auto count_tokens = [&]() {
    x.meter.Received(received);
    x.meter.StreamChunks(relay.content_chunks());
    x.meter.Tokens(relay.usage(), relay.EstimatedOutputTokens());
  };
  // From the stream's first byte on the client receives tokens: until its
  // final record, a checkpoint (refreshed every second) stands for it should
  // the gateway die.
  int64_t checkpointed_at = 0;
  auto checkpoint = [&]() {
    count_tokens();
    checkpointed_at = Now();
    if (auto s = server_.journal.Checkpoint(x.meter.Snapshot(checkpointed_at)); !s.has_value()) {
      spdlog::warn("gateway: cannot checkpoint request {}: {}", x.request_id, s.error().message);
    }
  };
  checkpoint();
  const std::string head = ResponseHead(200, "text/event-stream", -1, x.keep_alive, x.request_id);
  client_ok = co_await WriteAll(head);
  while (client_ok && !response.is_done()) {
    response.get().body().data = piece_.data();
    response.get().body().size = piece_.size();
    beast::error_code ec;
    // What arrived with the head or with an earlier read is parsed here:
    // Beast's read would hand it over only after a round through the event
    // loop. A stream is bounded by its silences only: it may rightly run long.
    if (!ParseBuffered(connection, response, ec)) {
      connection.tcp().expires_after(Millis(options().stream_idle_timeout_ms));
      auto read = ReadSomeOf(connection, response, ec);
      co_await std::move(read);
    }
    const size_t n = TakePiece(response, piece_.size(), ec);
    if (ec) {
      upstream_ok = false;
      break;
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
      const size_t len = SizeLine(size_line, out.size());
      out += "\r\n";
      client_ok = co_await WriteAll(std::string_view(size_line, len), out);
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

  const gateway::RelayOutcome outcome = gateway::RelayOutcomeOf(
      {.streaming = true,
       .client = client_ok ? gateway::ClientState::kConnected : gateway::ClientState::kGone,
       .upstream =
           upstream_ok ? gateway::UpstreamState::kIntact : gateway::UpstreamState::kBrokeOff,
       .shutting_down = x.interrupts->shutting_down,
       .upstream_status = x.answer.status,
       .recorded_at_done = x.meter.finished()});
  bool keep_open = false;  // a stream cut short: the client must see it break, not end
  if (outcome.reply == gateway::Reply::kStreamEnd) {
    std::string tail = relay.Finish();
    count_tokens();
    Record(x, outcome);
    std::string framed;
    if (!tail.empty()) {
      char size_line[32];
      framed.append(size_line, SizeLine(size_line, tail.size()));
      framed += tail;
      framed += "\r\n";
    }
    framed += "0\r\n\r\n";
    keep_open = co_await WriteAll(framed);
  } else {
    count_tokens();
    Record(x, outcome);
  }
  Settle(x, outcome.verdict, charged, upstream_ok);
  co_return keep_open;
}

}  // namespace atrium::gateway_server
