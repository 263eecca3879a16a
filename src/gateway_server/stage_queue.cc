// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::Refusal;

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

}  // namespace atrium::gateway_server
