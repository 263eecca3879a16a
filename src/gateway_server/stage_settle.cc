// How an exchange ends: its one usage record (or, for a refusal no model
// server saw, a count), and after a relay the dispatcher's verdict on the
// endpoint and the upstream connection's return to the keep-alive pool.
// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include "gateway/relay_outcome.h"
#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::Refusal;
using gateway::UsageStatus;

namespace {

// How a refusal is counted (RefusalTally): its code, else its type.
std::string_view RefusalReason(const Refusal& refusal) {
  if (!refusal.code.empty()) return refusal.code;
  if (!refusal.type.empty()) return refusal.type;
  return "refused";
}

Dispatcher::Outcome DispatcherOutcome(gateway::EndpointVerdict verdict) {
  switch (verdict) {
    case gateway::EndpointVerdict::kSucceeded:
      return Dispatcher::Outcome::kSucceeded;
    case gateway::EndpointVerdict::kFailed:
      return Dispatcher::Outcome::kFailed;
    case gateway::EndpointVerdict::kAbandoned:
      return Dispatcher::Outcome::kAbandoned;
  }
  return Dispatcher::Outcome::kAbandoned;
}

}  // namespace

void Session::Meter(Exchange& x, UsageStatus status, int http_status) {
  UsageRecord record = x.meter.Finish(status, http_status, Now());
  if (x.budgets != nullptr) {
    // The real cost replaces the worst case, counted until billing has it.
    x.budgets->Settle(x.budget_hold, record);
    x.budget_hold = {};
  }
  journal_wait_ = server_.StageRecord(loop_, std::move(record));
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

void Session::Record(Exchange& x, const gateway::RelayOutcome& outcome) {
  if (outcome.usage) Meter(x, *outcome.usage, outcome.record_status);
}

void Session::Settle(Exchange& x, gateway::EndpointVerdict verdict, int64_t charged,
                     bool upstream_ok) {
  const UsageRecord& record = x.meter.record();
  server_.dispatcher.Finish(x.slot, x.endpoint, DispatcherOutcome(verdict),
                            {record.input_tokens, record.output_tokens, charged}, Now());
  if (upstream_ok && x.response->is_done() && x.response->get().keep_alive() &&
      !x.interrupts->client_gone) {
    x.connection->reused = false;
    pool_.GiveBack(x.endpoint, std::move(x.connection));
  }
}

}  // namespace atrium::gateway_server
