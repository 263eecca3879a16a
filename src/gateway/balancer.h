// Which upstream endpoint of a deployment serves the next request, and the
// health of each endpoint (by URL; the Dispatcher keeps one Balancer per
// deployment, so two deployments naming one URL each count their own slots
// and verdicts): the active health check's last verdict, passive ejection
// after consecutive failures, and a circuit breaker over a window of
// failures (open, then half-open with one trial request, then closed on a
// success). Pure: the caller passes the time. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/gateway_records.h"

namespace atrium::gateway {

struct BalancerOptions {
  int eject_after_failures = 3;  // consecutive failures that eject (0: never)
  int64_t eject_ms = 5000;       // how long an ejection lasts
  int breaker_failures = 5;      // failures within the window that open the circuit (0: never)
  int64_t breaker_window_ms = 10000;
  int64_t breaker_open_ms = 10000;  // open this long, then half-open
  // Failed active checks in a row before an endpoint counts as unhealthy (one
  // slow answer under load must not empty a deployment); one success heals.
  int unhealthy_after_checks = 2;
};

// What a request may use of an endpoint.
struct PickRule {
  // Waits while max_prefill requests are in prefill (see Pick).
  bool paced = false;
  // May use the endpoint's burst slots above its capacity (see Pick).
  bool burst = false;
};

class Balancer {
 public:
  explicit Balancer(BalancerOptions options = {});

  // The endpoint (index into `endpoints`) with the fewest outstanding requests
  // among the usable ones — healthy by the active check, not ejected, circuit
  // not open (half-open: while no trial is out), outstanding < capacity (at
  // least 1; capacity + burst for a request whose rule allows the burst), url
  // not in `exclude` (already tried for this request) and, for a paced
  // request, fewer than max_prefill requests in prefill (when the endpoint
  // sets it). Ties go to the earlier endpoint. Call Started() for the
  // endpoint picked before picking again.
  //
  // Pacing: an engine without chunked prefill stalls its whole batch while
  // the requests joining a step are prefilled, so a tenant that refills many
  // slots at once (a flood's requests end together when they are of equal
  // length) delays every other tenant's first token by those prefills. The
  // gateway sees a streamed request as in prefill from its start until its
  // first token comes back; the dispatcher paces the requests of tenants
  // asking for at least their share of the deployment (not a light tenant's
  // burst), which spreads their refills over the engine's steps and keeps
  // the lighter tenant's first token near what it is on an idle engine.
  // Counts are per endpoint of the deployment (one Balancer each): another
  // deployment naming the same URL neither sees nor takes these prefills.
  //
  // Burst: the dispatcher lets a tenant that asks for least and runs less
  // than its share of the slots, or has lately been served less than its
  // weighted share of the deployment, start beyond capacity on up to `burst` more slots instead of
  // waiting for a heavier tenant's request to end: a light tenant's bursts
  // find a slot at once, as they would on an idle deployment.
  std::optional<size_t> Pick(const std::vector<DeploymentEndpoint>& endpoints,
                             const std::vector<std::string>& exclude, int64_t now_ms,
                             PickRule rule);
  // Pick would succeed with nothing excluded (and changes nothing).
  bool HasFreeSlot(const std::vector<DeploymentEndpoint>& endpoints, int64_t now_ms,
                   PickRule rule) const;
  // Some endpoint is up: healthy, not ejected, circuit not open (busy counts
  // as up, a half-open circuit's trial in flight too: a full deployment is
  // waited for, a down one is not).
  bool AnyUp(const std::vector<DeploymentEndpoint>& endpoints, int64_t now_ms) const;
  // When none is up: milliseconds until the first ejection or open circuit
  // ends; nullopt when only health checks keep them out (their next verdict
  // is not the balancer's to know).
  std::optional<int64_t> UpAgainInMs(const std::vector<DeploymentEndpoint>& endpoints,
                                     int64_t now_ms) const;

  void Started(const std::string& url);
  // A streamed request sent to `url` awaits its first token / has it (or
  // ended, or moved to another endpoint, before it came). Each request that
  // began a prefill ends it once.
  void PrefillStarted(const std::string& url);
  void PrefillEnded(const std::string& url);
  // Each ends one outstanding request. Failed: connect error, 5xx or timeout.
  void Succeeded(const std::string& url, int64_t now_ms);
  void Failed(const std::string& url, int64_t now_ms);
  // Ended without a verdict on the endpoint (the client left).
  void Abandoned(const std::string& url);
  // The active health check's verdict; it holds until the next check.
  void HealthCheck(const std::string& url, bool ok, int64_t now_ms);

  int Outstanding(const std::string& url) const;
  int Prefilling(const std::string& url) const;
  // "healthy", or what keeps the endpoint out, e.g. "unhealthy (health check
  // failed), ejected until 1700000005000 ms".
  std::string Describe(const std::string& url, int64_t now_ms) const;

 private:
  enum class Circuit { kClosed, kOpen, kHalfOpen };
  struct EndpointState {
    int outstanding = 0;
    int prefilling = 0;     // streamed requests awaiting their first token
    bool healthy = true;    // until checks say otherwise
    int failed_checks = 0;  // in a row
    int consecutive_failures = 0;
    int64_t ejected_until_ms = 0;
    std::deque<int64_t> recent_failures;  // within the breaker window, oldest first
    Circuit circuit = Circuit::kClosed;
    int64_t open_until_ms = 0;
    bool trial_out = false;  // half-open: the one trial request is in flight
  };

  bool Usable(const EndpointState& state, int64_t capacity, int64_t now_ms) const;
  // Pick without its side effect (an open circuit whose time is up turning half-open).
  std::optional<size_t> Find(const std::vector<DeploymentEndpoint>& endpoints,
                             const std::vector<std::string>& exclude, int64_t now_ms,
                             PickRule rule) const;
  void EndOne(EndpointState& state);

  BalancerOptions options_;
  std::unordered_map<std::string, EndpointState> endpoints_;
};

}  // namespace atrium::gateway
