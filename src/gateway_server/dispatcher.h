// Dispatcher: the gateway's one piece of shared, mutable request state. It
// owns the rate and concurrency limiter, and per deployment a fair queue, its
// slot shares and an endpoint balancer, behind one mutex, and hands out upstream slots: a request
// either starts at once (its deployment has no backlog, a free endpoint slot,
// and its tenant and key are under their concurrency limits), waits in its
// deployment's queue until Pump() grants it a slot and calls its Wake, or is
// refused (429 with when to retry). The cores it combines are pure
// (src/gateway; the slot, pacing and burst rules are gateway::SlotRules);
// this class only adds the lock and the wake-ups.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/balancer.h"
#include "gateway/fair_queue.h"
#include "gateway/limiter.h"
#include "gateway/slot_rules.h"
#include "gateway/slot_shares.h"
#include "model/gateway_records.h"

namespace atrium::gateway_server {

enum class QueueDiscipline { kFair, kFifo };

// A tenant's counter may lag the backlog by this much service (weighted
// tokens: a few typical chat requests), so that the bursts of a tenant that
// sends below its share go ahead of a flooding tenant's requests.
constexpr double kDefaultFairCredit = 1024;

struct DispatcherOptions {
  QueueDiscipline discipline = QueueDiscipline::kFair;
  gateway::FairQueueOptions fair{.max_credit = kDefaultFairCredit};
  gateway::BalancerOptions balancer;
  // Called after every call that may change what waits or runs (Admit,
  // Cancel, Retry, FirstToken, Finish, Pump), on the caller's thread,
  // without the lock held; it must not call back into the dispatcher.
  // For tests that wait for a request to queue or start; empty (the
  // default) costs one branch a call.
  std::function<void()> on_change;
};

// What one request asks for.
struct SlotRequest {
  uint64_t id = 0;
  std::string tenant_id;
  std::string key_id;
  double weight = 1;
  gateway::Priority priority = gateway::Priority::kInteractive;
  std::vector<gateway::LimitSubject> subjects;
  const DeploymentRecord* deployment = nullptr;  // kept alive by the caller's snapshot
  int64_t input_tokens = 0;                      // estimate, charged to the fair queue
  int64_t reserved_tokens = 0;  // input estimate + max_tokens, taken from token buckets
  int64_t deadline_ms = 0;
  bool stream = false;  // streamed: in prefill until FirstToken() (see SlotRules::Paced)
};

struct Admission {
  enum class Kind { kStarted, kQueued, kRefused } kind = Kind::kRefused;
  std::string endpoint;   // kStarted: the chosen endpoint URL
  int http_status = 429;  // kRefused: 429, or 503 when the deployment has no usable endpoint
  int64_t retry_after_ms = 0;
  std::string reason;
};

class Dispatcher {
 public:
  using Wake = std::function<void()>;

  explicit Dispatcher(DispatcherOptions options);

  // Rate limits, then an immediate start or a place in the queue. `wake` is
  // called (from whichever thread frees a slot, without the lock held) once
  // the queued request has a slot; then TakeGrant() returns it.
  Admission Admit(const SlotRequest& request, int64_t now_ms, Wake wake);
  std::optional<std::string> TakeGrant(uint64_t id);
  // The request left the queue without a slot (deadline, client gone); the
  // tokens it reserved go back to its buckets. False when a slot was granted
  // meanwhile: TakeGrant() it and Finish().
  bool Cancel(uint64_t id, int64_t now_ms);

  // A started request picks another endpoint after `failed_url` failed
  // before any byte reached the client. Empty when none is free.
  std::optional<std::string> Retry(const SlotRequest& request, const std::string& failed_url,
                                   const std::vector<std::string>& tried, int64_t now_ms);

  enum class Outcome { kSucceeded, kFailed, kAbandoned };
  struct Usage {
    int64_t input_tokens = 0;  // as the upstream counted them (or the estimate)
    int64_t output_tokens = 0;
    int64_t output_charged = 0;  // already passed to ChargeOutput
  };
  // A streamed request's first token came back from its endpoint: its
  // prefill is over, which may let a paced request start.
  void FirstToken(const SlotRequest& request, int64_t now_ms);
  // The request is over: frees its endpoint slot and concurrency, settles its
  // token reservation with what it really used and charges the fair queue the
  // rest of its cost. `endpoint` "" when Retry() already settled the last one.
  void Finish(const SlotRequest& request, const std::string& endpoint, Outcome outcome,
              const Usage& usage, int64_t now_ms);
  // Output tokens served so far, charged to the tenant's counter while a
  // stream runs (VTC charges as tokens are produced).
  void ChargeOutput(const SlotRequest& request, int64_t output_tokens);

  // The active health check's verdict on `url` as an endpoint of deployment
  // `deployment_id` (each deployment keeps its own state of an endpoint).
  void HealthCheck(const std::string& deployment_id, const std::string& url, bool ok,
                   int64_t now_ms);
  // Of a model's candidate deployments (preferred first), the first with an
  // endpoint up; the first of all when every one is down (its queue waits).
  const DeploymentRecord* Choose(const std::vector<const DeploymentRecord*>& candidates,
                                 int64_t now_ms) const;
  // Grants free slots to queued requests; called after every Finish and on a
  // timer (ejections and open circuits end with time).
  void Pump(int64_t now_ms);

  // The gateway is cutting what is left of its requests (Stop() after its
  // drain time): from now on no queued request is granted a slot, not even
  // one a cut request frees, so each leaves its queue by its own cut
  // (Cancel) instead of racing it to a model server. Cannot be undone.
  void StopGranting();

  // The newest snapshot's deployments: the endpoints of every deployment
  // with requests waiting follow them at once (a replica of a managed
  // deployment that was at zero becomes ready: its waiting requests start).
  void Refresh(const std::vector<DeploymentRecord>& deployments, int64_t now_ms);
  // What this gateway sees of each deployment it has state for (requests
  // waiting, the oldest one's wait, requests running), gateway_id and
  // reported_at left for the caller: the autoscaler's signals.
  std::vector<DeploymentLoadReport> Loads(int64_t now_ms) const;

  size_t QueuedFor(const std::string& deployment_id) const;
  // Requests running on `url` as an endpoint of deployment `deployment_id`.
  int OutstandingOn(const std::string& deployment_id, const std::string& url) const;

 private:
  struct Waiter {
    SlotRequest request;
    Wake wake;
    int64_t queued_at_ms = 0;
  };
  // Everything kept per deployment. Its endpoints' slots, prefills, health
  // and circuits are its own even where another deployment names the same
  // URL: a tenant's dedicated deployment never takes, nor counts against,
  // a shared deployment's slots outside that one's fair queue.
  struct DeploymentQueue {
    explicit DeploymentQueue(const gateway::BalancerOptions& options) : balancer(options) {}
    gateway::Balancer balancer;
    // The requests waiting for a slot, in the order of the discipline.
    std::unique_ptr<gateway::RequestQueue> backlog;
    // Counts a tenant's requests in `backlog`, for the slot rules (made once:
    // nothing is allocated per decision).
    gateway::SlotShares::QueuedFn queued;
    std::vector<DeploymentEndpoint> endpoints;  // as of the newest request
    gateway::SlotShares shares;                 // who may take the last free slots
    gateway::DeploymentLoad load;               // capacity, in flight, pacing, bursts
  };
  DeploymentQueue& QueueOf(const DeploymentRecord& deployment);
  static void SetEndpoints(DeploymentQueue& queue,
                           const std::vector<DeploymentEndpoint>& endpoints);
  // The deployment's state, made on first use (a health check may come first).
  DeploymentQueue& StateOfLocked(const std::string& deployment_id);
  // The slot rules over `queue` as it is now; the view refers to `queue`.
  static gateway::SlotRules RulesOf(const DeploymentQueue& queue, int64_t now_ms);
  void StartLocked(DeploymentQueue& queue, const SlotRequest& request, const std::string& url,
                   int64_t now_ms);
  void StartPrefillLocked(DeploymentQueue& queue, const SlotRequest& request,
                          const std::string& url);
  // Ends the request's prefill if it is in one (first token, retry, finish).
  bool EndPrefillLocked(const SlotRequest& request);
  // Grants what can start in every queue (after a slot freed), or in every
  // queue that paces (after a prefill ended: only those can have waited for it).
  void PumpAllLocked(int64_t now_ms, std::vector<Wake>& wakes);
  void PumpPacedLocked(int64_t now_ms, std::vector<Wake>& wakes);
  // Pops what can start in `queue`, collecting wake-ups to run unlocked.
  void PumpLocked(DeploymentQueue& queue, int64_t now_ms, std::vector<Wake>& wakes);

  const DispatcherOptions options_;
  mutable std::mutex mu_;
  gateway::Limiter limiter_;                                 // GUARDED_BY(mu_)
  std::unordered_map<std::string, DeploymentQueue> queues_;  // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Waiter> waiting_;             // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::string> granted_;        // GUARDED_BY(mu_)
  // Streamed requests awaiting their first token, and where.
  std::unordered_map<uint64_t, std::string> prefilling_;  // GUARDED_BY(mu_)
  int64_t last_sweep_ms_ = 0;                             // GUARDED_BY(mu_)
  bool granting_stopped_ = false;                         // GUARDED_BY(mu_)
};

}  // namespace atrium::gateway_server
