#include "gateway/balancer.h"

#include <algorithm>

namespace atrium::gateway {

Balancer::Balancer(BalancerOptions options) : options_(options) {}

bool Balancer::Usable(const EndpointState& state, int64_t capacity, int64_t now_ms) const {
  if (!state.healthy || now_ms < state.ejected_until_ms) return false;
  if (state.outstanding >= std::max<int64_t>(capacity, 1)) return false;
  switch (state.circuit) {
    case Circuit::kClosed:
      return true;
    case Circuit::kOpen:
      return now_ms >= state.open_until_ms && !state.trial_out;
    case Circuit::kHalfOpen:
      return !state.trial_out;
  }
  return false;
}

std::optional<size_t> Balancer::Find(const std::vector<DeploymentEndpoint>& endpoints,
                                     const std::vector<std::string>& exclude, int64_t now_ms,
                                     PickRule rule) const {
  static const EndpointState kFresh;
  std::optional<size_t> best;
  int best_outstanding = 0;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const DeploymentEndpoint& endpoint = endpoints[i];
    if (std::find(exclude.begin(), exclude.end(), endpoint.url) != exclude.end()) continue;
    auto it = endpoints_.find(endpoint.url);
    const EndpointState& state = it == endpoints_.end() ? kFresh : it->second;
    const int64_t capacity = std::max<int64_t>(endpoint.capacity, 1) +
                             (rule.burst ? std::max<int64_t>(endpoint.burst, 0) : 0);
    if (!Usable(state, capacity, now_ms)) continue;
    if (rule.paced && endpoint.max_prefill > 0 && state.prefilling >= endpoint.max_prefill) {
      continue;
    }
    if (!best || state.outstanding < best_outstanding) {
      best = i;
      best_outstanding = state.outstanding;
    }
  }
  return best;
}

std::optional<size_t> Balancer::Pick(const std::vector<DeploymentEndpoint>& endpoints,
                                     const std::vector<std::string>& exclude, int64_t now_ms,
                                     PickRule rule) {
  std::optional<size_t> best = Find(endpoints, exclude, now_ms, rule);
  if (best) {
    // An open circuit whose time is up lets this request through as its trial.
    auto it = endpoints_.find(endpoints[*best].url);
    if (it != endpoints_.end() && it->second.circuit == Circuit::kOpen) {
      it->second.circuit = Circuit::kHalfOpen;
    }
  }
  return best;
}

bool Balancer::HasFreeSlot(const std::vector<DeploymentEndpoint>& endpoints, int64_t now_ms,
                           PickRule rule) const {
  return Find(endpoints, {}, now_ms, rule).has_value();
}

bool Balancer::AnyUp(const std::vector<DeploymentEndpoint>& endpoints, int64_t now_ms) const {
  for (const DeploymentEndpoint& endpoint : endpoints) {
    auto it = endpoints_.find(endpoint.url);
    if (it == endpoints_.end()) return true;  // never failed
    EndpointState state = it->second;
    state.outstanding = 0;    // busy is up
    state.trial_out = false;  // and so is a circuit testing its trial
    if (Usable(state, 1, now_ms)) return true;
  }
  return false;
}

std::optional<int64_t> Balancer::UpAgainInMs(const std::vector<DeploymentEndpoint>& endpoints,
                                             int64_t now_ms) const {
  std::optional<int64_t> soonest;
  for (const DeploymentEndpoint& endpoint : endpoints) {
    auto it = endpoints_.find(endpoint.url);
    if (it == endpoints_.end()) continue;
    const EndpointState& state = it->second;
    if (!state.healthy) continue;  // out until a check passes
    int64_t at = state.ejected_until_ms;
    if (state.circuit == Circuit::kOpen) at = std::max(at, state.open_until_ms);
    if (at <= now_ms) continue;
    if (!soonest || at - now_ms < *soonest) soonest = at - now_ms;
  }
  return soonest;
}

void Balancer::Started(const std::string& url) {
  EndpointState& state = endpoints_[url];
  ++state.outstanding;
  if (state.circuit == Circuit::kHalfOpen) state.trial_out = true;
}

void Balancer::PrefillStarted(const std::string& url) { ++endpoints_[url].prefilling; }

void Balancer::PrefillEnded(const std::string& url) {
  auto it = endpoints_.find(url);
  if (it != endpoints_.end() && it->second.prefilling > 0) --it->second.prefilling;
}

void Balancer::EndOne(EndpointState& state) {
  if (state.outstanding > 0) --state.outstanding;
}

void Balancer::Succeeded(const std::string& url, int64_t now_ms) {
  EndpointState& state = endpoints_[url];
  EndOne(state);
  state.consecutive_failures = 0;
  if (state.circuit == Circuit::kHalfOpen) {
    state.circuit = Circuit::kClosed;
    state.trial_out = false;
    state.recent_failures.clear();
  }
}

void Balancer::Failed(const std::string& url, int64_t now_ms) {
  EndpointState& state = endpoints_[url];
  EndOne(state);
  if (options_.eject_after_failures > 0 &&
      ++state.consecutive_failures >= options_.eject_after_failures) {
    state.ejected_until_ms = now_ms + options_.eject_ms;
    state.consecutive_failures = 0;
  }
  if (options_.breaker_failures <= 0) return;
  if (state.circuit == Circuit::kHalfOpen) {
    // The trial failed: open again for a full period.
    state.circuit = Circuit::kOpen;
    state.open_until_ms = now_ms + options_.breaker_open_ms;
    state.trial_out = false;
    return;
  }
  if (state.circuit == Circuit::kOpen) return;
  auto& recent = state.recent_failures;
  while (!recent.empty() && recent.front() <= now_ms - options_.breaker_window_ms) {
    recent.pop_front();
  }
  recent.push_back(now_ms);
  if (static_cast<int>(recent.size()) >= options_.breaker_failures) {
    state.circuit = Circuit::kOpen;
    state.open_until_ms = now_ms + options_.breaker_open_ms;
    recent.clear();
  }
}

void Balancer::Abandoned(const std::string& url) {
  EndpointState& state = endpoints_[url];
  EndOne(state);
  // A trial that ended without a verdict: let another one through.
  state.trial_out = false;
}

void Balancer::HealthCheck(const std::string& url, bool ok, int64_t now_ms) {
  EndpointState& state = endpoints_[url];
  state.failed_checks = ok ? 0 : state.failed_checks + 1;
  state.healthy = state.failed_checks < std::max(1, options_.unhealthy_after_checks);
}

int Balancer::Outstanding(const std::string& url) const {
  auto it = endpoints_.find(url);
  return it == endpoints_.end() ? 0 : it->second.outstanding;
}

int Balancer::Prefilling(const std::string& url) const {
  auto it = endpoints_.find(url);
  return it == endpoints_.end() ? 0 : it->second.prefilling;
}

std::string Balancer::Describe(const std::string& url, int64_t now_ms) const {
  auto it = endpoints_.find(url);
  if (it == endpoints_.end()) return "healthy";
  const EndpointState& state = it->second;
  std::vector<std::string> problems;
  if (!state.healthy) problems.push_back("unhealthy (health check failed)");
  if (now_ms < state.ejected_until_ms) {
    problems.push_back("ejected until " + std::to_string(state.ejected_until_ms) + " ms");
  }
  if (state.circuit == Circuit::kOpen && now_ms < state.open_until_ms) {
    problems.push_back("circuit open until " + std::to_string(state.open_until_ms) + " ms");
  } else if (state.circuit != Circuit::kClosed) {
    problems.push_back(state.trial_out ? "circuit half-open, trial in flight"
                                       : "circuit half-open");
  }
  if (problems.empty()) return "healthy";
  std::string out = problems[0];
  for (size_t i = 1; i < problems.size(); ++i) out += ", " + problems[i];
  return out;
}

}  // namespace atrium::gateway
