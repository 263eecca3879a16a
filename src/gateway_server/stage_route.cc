// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <limits>
#include <vector>

#include "common/json_reader.h"
#include "gateway/cache_salt.h"
#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::Refusal;
using gateway::UsageStatus;

namespace {

// The head of the request to a model server at `address`.
std::string UpstreamRequestHead(const UpstreamAddress& address, gateway::Api api, bool stream,
                                const std::string& request_id, size_t body_bytes,
                                std::string_view content_type) {
  return "POST " + address.base_path + std::string(gateway::PathOf(api)) +
         " HTTP/1.1\r\nHost: " + address.host_header + "\r\nContent-Type: " +
         (content_type.empty() ? std::string("application/json") : std::string(content_type)) +
         "\r\nAccept: " + (stream ? "text/event-stream" : "application/json") +
         // Metered answers must be readable: no compression.
         "\r\nAccept-Encoding: identity\r\nX-Request-Id: " + request_id +
         "\r\nContent-Length: " + std::to_string(body_bytes) + "\r\n\r\n";
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

}  // namespace

// Sends the request upstream and reads the response's head, retrying
// another endpoint (bounded) only before the first byte: on a connection
// that fails, or a 502/503/504 answer.
awaitable<std::optional<Session::Early>> Session::Route(Exchange& x) {
  std::string upstream_body = gateway::UpstreamBody(x.body, x.parsed);
  if (options().set_cache_salt && gateway::HasJsonBody(x.api) &&
      !gateway::GeneratesNothing(x.api)) {
    // The tenant's own prefix cache, whatever the client sent (openai.h).
    auto salted = gateway::WithCacheSalt(
        upstream_body, gateway::CacheSalt(options().cache_salt_key, x.caller.tenant_id));
    if (!salted.has_value()) co_return Early::Rejected(gateway::RefusalOf(salted.error()));
    upstream_body = std::move(*salted);
  }
  if (!x.upstream_model.empty()) {
    // A tenant's adapter: the engine knows it by its id (Prepare let only
    // JSON bodies through).
    auto renamed =
        gateway::WithTopLevelMember(upstream_body, "model", Json(x.upstream_model).dump());
    if (!renamed.has_value()) co_return Early::Rejected(gateway::RefusalOf(renamed.error()));
    upstream_body = std::move(*renamed);
  }
  if (x.api == gateway::Api::kResponses) {
    // The platform keeps no responses, and a shared engine must keep none
    // one tenant could fetch or continue by id (ParseRequest refuses what
    // would need them).
    auto unstored = gateway::WithTopLevelMember(upstream_body, "store", "false");
    if (!unstored.has_value()) co_return Early::Rejected(gateway::RefusalOf(unstored.error()));
    upstream_body = std::move(*unstored);
  }
  std::vector<std::string> tried;
  std::string failure;  // for the operator's log: may name the endpoint
  int failure_status = 502;
  int64_t failure_retry_after_ms = 0;
  // A tenant's dedicated deployment sends only where the egress policy lets it.
  std::shared_ptr<const gateway::EgressFacts> egress;
  if (gateway::UnderEgressPolicy(*x.slot.deployment)) egress = server_.EgressFactsOf(*x.snapshot);
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
      const std::string head = UpstreamRequestHead(*address, x.api, x.parsed.stream, x.request_id,
                                                   upstream_body.size(), x.content_type);
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
          // in RelayWhole). Not boost::none: Boost 1.74 then rejects every
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
        x.DropConnection();
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
      x.DropConnection();
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
      x.DropConnection();
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

}  // namespace atrium::gateway_server
