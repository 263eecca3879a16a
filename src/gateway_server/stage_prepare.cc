// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/beast/core/string.hpp>
#include <variant>

#include "gateway/request_options.h"
#include "gateway_server/exchange.h"

namespace atrium::gateway_server {

using gateway::Refusal;

// Parse, entitle, limit: the stages that need no waiting.
std::optional<Session::Early> Session::Prepare(Exchange& x, const HttpRequest& request) {
  x.body = request.body();
  if (!gateway::HasJsonBody(x.api)) {
    auto type = request.find(bhttp::field::content_type);
    if (type != request.end()) x.content_type = std::string(type->value());
  }
  auto parsed = gateway::HasJsonBody(x.api)
                    ? gateway::ParseRequest(x.api, x.body)
                    : gateway::ParseFormRequest(x.api, x.content_type, x.body);
  if (!parsed.has_value()) return Early::Rejected(gateway::RefusalOf(parsed.error()));
  x.parsed = std::move(*parsed);
  x.meter.Parsed(x.parsed);

  auto route = x.snapshot->Resolve(x.caller, x.parsed.model);
  if (!route.has_value()) return Early::Rejected(gateway::RefusalOf(route.error()));
  if (!route->upstream_model.empty() && !gateway::HasJsonBody(x.api)) {
    // An adapter's name is rewritten in a JSON body only.
    return Early::Rejected(gateway::RefusalOf(Error::InvalidArgument(
        "the model `" + x.parsed.model + "` is an adapter, which serves JSON requests only")));
  }
  x.upstream_model = route->upstream_model;
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
  // Budgets: the worst case is held before the request waits or runs, so
  // concurrent requests cannot all pass a nearly spent budget.
  if (BudgetKeeper* budgets = options().budgets.get()) {
    auto decision = budgets->Reserve(x.caller.tenant_id, x.caller.key_id, x.parsed.model,
                                     x.parsed.estimated_input_tokens,
                                     slot.reserved_tokens - x.parsed.estimated_input_tokens);
    if (!decision.allowed) return Early::Rejected(Refusal::BudgetExceeded(decision.reason));
    x.budgets = budgets;
    x.budget_hold = std::move(decision.hold);
  }
  slot.deadline_ms = x.arrived + request_options.deadline_ms;
  slot.stream = x.parsed.stream;
  return std::nullopt;
}

}  // namespace atrium::gateway_server
