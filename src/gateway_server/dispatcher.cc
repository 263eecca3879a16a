#include "gateway_server/dispatcher.h"

#include <algorithm>
#include <utility>

namespace atrium::gateway_server {
namespace {

// Idle limiter state is dropped this often (memory stays bounded with many keys).
constexpr int64_t kSweepEveryMs = 60'000;
// A full queue asks the client to come back after this long.
constexpr int64_t kQueueFullRetryMs = 1000;
// A deployment whose endpoints fail their health checks asks the client to
// come back after this long (the next check may pass).
constexpr int64_t kDownRetryMs = 1000;

// Runs DispatcherOptions::on_change as it goes out of scope: declared
// before the lock, so after the lock is released and the wake-ups have run.
class ChangeNotice {
 public:
  explicit ChangeNotice(const std::function<void()>& on_change) : on_change_(on_change) {}
  ~ChangeNotice() {
    if (on_change_) on_change_();
  }
  ChangeNotice(const ChangeNotice&) = delete;
  ChangeNotice& operator=(const ChangeNotice&) = delete;

 private:
  const std::function<void()>& on_change_;
};

gateway::QueuedItem ItemOf(const SlotRequest& r) {
  gateway::QueuedItem item;
  item.id = r.id;
  item.tenant = r.tenant_id;
  item.key_id = r.key_id;
  item.weight = r.weight;
  item.priority = r.priority;
  item.input_tokens = r.input_tokens;
  return item;
}

}  // namespace

gateway::SlotRules Dispatcher::RulesOf(const DeploymentQueue& queue, int64_t now_ms) {
  return gateway::SlotRules(queue.shares, queue.load, queue.queued, now_ms);
}

void Dispatcher::StartLocked(DeploymentQueue& queue, const SlotRequest& request,
                             const std::string& url, int64_t now_ms) {
  limiter_.Started(request.subjects);
  queue.balancer.Started(url);
  if (request.stream) StartPrefillLocked(queue, request, url);
  queue.shares.Started(request.tenant_id);
  // A request's input counts as served when it starts (its output when it
  // ends), so a tenant that starts flooding is seen as heavy at once.
  if (queue.load.TracksService()) {
    queue.shares.Served(request.tenant_id, static_cast<double>(request.input_tokens), now_ms);
  }
  ++queue.load.in_flight;
}

void Dispatcher::StartPrefillLocked(DeploymentQueue& queue, const SlotRequest& request,
                                    const std::string& url) {
  queue.balancer.PrefillStarted(url);
  prefilling_[request.id] = url;
}

Dispatcher::Dispatcher(DispatcherOptions options) : options_(std::move(options)) {}

Dispatcher::DeploymentQueue& Dispatcher::StateOfLocked(const std::string& deployment_id) {
  auto [it, inserted] = queues_.try_emplace(deployment_id, options_.balancer);
  DeploymentQueue& queue = it->second;
  if (inserted) {
    queue.load.fair = options_.discipline == QueueDiscipline::kFair;
    if (queue.load.fair) {
      queue.backlog = std::make_unique<gateway::FairQueue>(options_.fair);
    } else {
      queue.backlog = std::make_unique<gateway::FifoQueue>();
    }
    queue.queued = [&backlog = *queue.backlog](const std::string& tenant) {
      return static_cast<int64_t>(backlog.QueuedFor(tenant));
    };
  }
  return queue;
}

Dispatcher::DeploymentQueue& Dispatcher::QueueOf(const DeploymentRecord& deployment) {
  DeploymentQueue& queue = StateOfLocked(deployment.id);
  SetEndpoints(queue, deployment.endpoints);
  return queue;
}

void Dispatcher::SetEndpoints(DeploymentQueue& queue,
                              const std::vector<DeploymentEndpoint>& endpoints) {
  // The newest snapshot's endpoints: a deployment change applies to the
  // queue. Compared first: copying the list on every request is hot-path work.
  if (queue.endpoints == endpoints) return;
  queue.endpoints = endpoints;
  queue.load.capacity = 0;
  for (const auto& e : queue.endpoints) queue.load.capacity += std::max<int64_t>(1, e.capacity);
  queue.load.paces = std::any_of(queue.endpoints.begin(), queue.endpoints.end(),
                                 [](const DeploymentEndpoint& e) { return e.max_prefill > 0; });
  queue.load.bursts = std::any_of(queue.endpoints.begin(), queue.endpoints.end(),
                                  [](const DeploymentEndpoint& e) { return e.burst > 0; });
}

void Dispatcher::Refresh(const std::vector<DeploymentRecord>& deployments, int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::vector<Wake> wakes;
  {
    std::lock_guard lock(mu_);
    for (const DeploymentRecord& d : deployments) {
      auto q = queues_.find(d.id);
      if (q == queues_.end() || q->second.backlog->size() == 0) continue;
      SetEndpoints(q->second, d.endpoints);
      PumpLocked(q->second, now_ms, wakes);
    }
  }
  for (auto& w : wakes) w();
}

std::vector<DeploymentLoadReport> Dispatcher::Loads(int64_t now_ms) const {
  std::lock_guard lock(mu_);
  std::unordered_map<std::string, int64_t> oldest;  // deployment id -> earliest queued_at
  for (const auto& [id, w] : waiting_) {
    auto [it, added] = oldest.emplace(w.request.deployment->id, w.queued_at_ms);
    if (!added) it->second = std::min(it->second, w.queued_at_ms);
  }
  std::vector<DeploymentLoadReport> out;
  out.reserve(queues_.size());
  for (const auto& [id, queue] : queues_) {
    DeploymentLoadReport r;
    r.deployment_id = id;
    r.queued = static_cast<int64_t>(queue.backlog->size());
    r.in_flight = queue.load.in_flight;
    if (auto it = oldest.find(id); it != oldest.end()) {
      r.oldest_wait_ms = std::max<int64_t>(0, now_ms - it->second);
    }
    out.push_back(std::move(r));
  }
  return out;
}

Admission Dispatcher::Admit(const SlotRequest& request, int64_t now_ms, Wake wake) {
  const ChangeNotice notice(options_.on_change);
  Admission admission;
  std::vector<Wake> wakes;
  {
    std::lock_guard lock(mu_);
    if (now_ms - last_sweep_ms_ >= kSweepEveryMs) {
      limiter_.Sweep(now_ms);
      for (auto& [id, queue] : queues_) queue.shares.Sweep(now_ms);
      last_sweep_ms_ = now_ms;
    }
    // A managed deployment without a ready replica (at zero, or its only
    // one being replaced) gets one from the platform: its requests wait
    // for it, up to their deadline. An external one answers at once.
    const bool awaits_replica =
        request.deployment->endpoints.empty() && request.deployment->managed();
    if (request.deployment->endpoints.empty() && !awaits_replica) {
      admission.http_status = 503;
      admission.reason = "the model's deployment has no endpoints";
      return admission;
    }
    DeploymentQueue& queue = QueueOf(*request.deployment);
    if (!awaits_replica && !queue.balancer.AnyUp(queue.endpoints, now_ms)) {
      // Down, not busy: an answer now beats a wait until the deadline.
      admission.http_status = 503;
      admission.retry_after_ms =
          queue.balancer.UpAgainInMs(queue.endpoints, now_ms).value_or(kDownRetryMs);
      admission.reason = "every endpoint of the model's deployment is down";
      return admission;
    }
    gateway::LimitDecision rate = limiter_.Admit(request.subjects, request.reserved_tokens, now_ms);
    if (!rate.allowed) {
      admission.http_status = 429;
      // -1: larger than the bucket itself; a minute is when the window has turned over.
      admission.retry_after_ms = rate.retry_after_ms < 0 ? 60'000 : rate.retry_after_ms;
      admission.reason = rate.reason;
      return admission;
    }
    queue.shares.Seen(request.tenant_id, request.weight, now_ms);
    const gateway::SlotRules rules = RulesOf(queue, now_ms);
    if (queue.backlog->size() == 0 && limiter_.CanStart(request.subjects) &&
        rules.MayTakeSlot(request.tenant_id)) {
      if (auto pick =
              queue.balancer.Pick(queue.endpoints, {}, now_ms,
                                  rules.RuleFor(request.tenant_id, request.stream, false))) {
        const std::string& url = queue.endpoints[*pick].url;
        StartLocked(queue, request, url, now_ms);
        queue.backlog->StartedWithoutWaiting(request.tenant_id, request.weight, request.priority,
                                             request.input_tokens);
        admission.kind = Admission::Kind::kStarted;
        admission.endpoint = url;
        return admission;
      }
    }
    gateway::LimitDecision depth = limiter_.TryQueue(request.subjects);
    if (!depth.allowed) {
      limiter_.Reconcile(request.subjects, request.reserved_tokens, 0, now_ms);
      admission.http_status = 429;
      admission.retry_after_ms = kQueueFullRetryMs;
      admission.reason = depth.reason;
      return admission;
    }
    queue.backlog->Push(ItemOf(request));
    queue.shares.Queued(request.tenant_id);
    waiting_.emplace(request.id, Waiter{request, std::move(wake), now_ms});
    admission.kind = Admission::Kind::kQueued;
    PumpLocked(queue, now_ms, wakes);
  }
  for (auto& w : wakes) w();
  return admission;
}

void Dispatcher::StopGranting() {
  std::lock_guard lock(mu_);
  granting_stopped_ = true;
}

void Dispatcher::PumpLocked(DeploymentQueue& queue, int64_t now_ms, std::vector<Wake>& wakes) {
  if (granting_stopped_) return;
  const gateway::SlotRules rules = RulesOf(queue, now_ms);
  auto can_start = [&](const gateway::QueuedItem& item) {
    auto it = waiting_.find(item.id);
    if (it == waiting_.end()) return false;
    const SlotRequest& r = it->second.request;
    return limiter_.CanStart(r.subjects) && rules.MayTakeSlot(r.tenant_id) &&
           queue.balancer.HasFreeSlot(queue.endpoints, now_ms,
                                      rules.RuleFor(r.tenant_id, r.stream, true));
  };
  auto goes_first = [&rules](const gateway::QueuedItem& candidate) {
    return rules.GoesFirst(candidate.tenant);
  };
  // No request can start without a slot free: one within the capacity, or
  // a burst slot while tenants share the deployment (only then may one
  // take it).
  const bool burst = rules.BurstSlotsOpen();
  while (queue.backlog->size() > 0 &&
         queue.balancer.HasFreeSlot(queue.endpoints, now_ms, {.burst = burst})) {
    std::optional<gateway::QueuedItem> item = queue.backlog->Pop(can_start, goes_first);
    if (!item) break;  // everything waiting is held back by its own concurrency limit
    auto it = waiting_.find(item->id);
    if (it == waiting_.end()) {
      queue.shares.Dequeued(item->tenant);
      continue;
    }
    const SlotRequest& r = it->second.request;
    auto pick = queue.balancer.Pick(queue.endpoints, {}, now_ms,
                                    rules.RuleFor(r.tenant_id, r.stream, false));
    if (!pick) {  // can_start said yes; keep the item rather than lose it
      queue.backlog->Push(*item);
      break;
    }
    const std::string& url = queue.endpoints[*pick].url;
    limiter_.Unqueued(r.subjects);
    queue.shares.Dequeued(r.tenant_id);
    StartLocked(queue, r, url, now_ms);
    granted_[item->id] = url;
    wakes.push_back(std::move(it->second.wake));
    waiting_.erase(it);
  }
}

std::optional<std::string> Dispatcher::TakeGrant(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = granted_.find(id);
  if (it == granted_.end()) return std::nullopt;
  std::string url = std::move(it->second);
  granted_.erase(it);
  return url;
}

bool Dispatcher::Cancel(uint64_t id, int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::lock_guard lock(mu_);
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return false;
  const SlotRequest& r = it->second.request;
  auto q = queues_.find(r.deployment->id);
  if (q != queues_.end()) {
    q->second.backlog->Remove(id);
    q->second.shares.Dequeued(r.tenant_id);
  }
  limiter_.Unqueued(r.subjects);
  limiter_.Reconcile(r.subjects, r.reserved_tokens, 0, now_ms);  // it ran nothing
  waiting_.erase(it);
  return true;
}

std::optional<std::string> Dispatcher::Retry(const SlotRequest& request,
                                             const std::string& failed_url,
                                             const std::vector<std::string>& tried,
                                             int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::vector<Wake> wakes;
  std::optional<std::string> next;
  {
    std::lock_guard lock(mu_);
    DeploymentQueue& queue = StateOfLocked(request.deployment->id);
    queue.balancer.Failed(failed_url, now_ms);
    const bool prefill_ended = EndPrefillLocked(request);
    // Not paced: the request already holds its slot.
    auto pick = queue.balancer.Pick(request.deployment->endpoints, tried, now_ms, {});
    if (pick) {
      next = request.deployment->endpoints[*pick].url;
      queue.balancer.Started(*next);
      if (request.stream) StartPrefillLocked(queue, request, *next);
    }
    // The failed endpoint's prefill is free again.
    if (prefill_ended) PumpPacedLocked(now_ms, wakes);
  }
  for (auto& w : wakes) w();
  return next;
}

bool Dispatcher::EndPrefillLocked(const SlotRequest& request) {
  auto it = prefilling_.find(request.id);
  if (it == prefilling_.end()) return false;
  StateOfLocked(request.deployment->id).balancer.PrefillEnded(it->second);
  prefilling_.erase(it);
  return true;
}

void Dispatcher::PumpAllLocked(int64_t now_ms, std::vector<Wake>& wakes) {
  for (auto& [id, queue] : queues_) {
    if (queue.backlog->size() > 0) PumpLocked(queue, now_ms, wakes);
  }
}

void Dispatcher::PumpPacedLocked(int64_t now_ms, std::vector<Wake>& wakes) {
  for (auto& [id, queue] : queues_) {
    if (queue.load.paces && queue.backlog->size() > 0) PumpLocked(queue, now_ms, wakes);
  }
}

void Dispatcher::FirstToken(const SlotRequest& request, int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::vector<Wake> wakes;
  {
    std::lock_guard lock(mu_);
    if (!EndPrefillLocked(request)) return;
    PumpPacedLocked(now_ms, wakes);
  }
  for (auto& w : wakes) w();
}

void Dispatcher::Finish(const SlotRequest& request, const std::string& endpoint, Outcome outcome,
                        const Usage& usage, int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::vector<Wake> wakes;
  {
    std::lock_guard lock(mu_);
    EndPrefillLocked(request);
    limiter_.Finished(request.subjects);
    limiter_.Reconcile(request.subjects, request.reserved_tokens,
                       usage.input_tokens + usage.output_tokens, now_ms);
    gateway::Balancer& balancer = StateOfLocked(request.deployment->id).balancer;
    switch (endpoint.empty() ? Outcome::kAbandoned : outcome) {
      case Outcome::kSucceeded:
        balancer.Succeeded(endpoint, now_ms);
        break;
      case Outcome::kFailed:
        balancer.Failed(endpoint, now_ms);
        break;
      case Outcome::kAbandoned:
        if (!endpoint.empty()) balancer.Abandoned(endpoint);
        break;
    }
    auto q = queues_.find(request.deployment->id);
    if (q != queues_.end()) {
      DeploymentQueue& queue = q->second;
      queue.shares.Finished(request.tenant_id);
      if (queue.load.TracksService()) {
        queue.shares.Served(
            request.tenant_id,
            static_cast<double>(usage.input_tokens - request.input_tokens + usage.output_tokens),
            now_ms);
      }
      if (queue.load.in_flight > 0) --queue.load.in_flight;
      queue.backlog->ChargeInput(request.tenant_id, request.weight,
                                 usage.input_tokens - request.input_tokens);
      queue.backlog->ChargeOutput(request.tenant_id, request.weight,
                                  usage.output_tokens - usage.output_charged);
    }
    // The freed slot (or the tenant's freed concurrency) may let any queue move.
    PumpAllLocked(now_ms, wakes);
  }
  for (auto& w : wakes) w();
}

void Dispatcher::ChargeOutput(const SlotRequest& request, int64_t output_tokens) {
  std::lock_guard lock(mu_);
  auto q = queues_.find(request.deployment->id);
  if (q != queues_.end()) {
    q->second.backlog->ChargeOutput(request.tenant_id, request.weight, output_tokens);
  }
}

void Dispatcher::HealthCheck(const std::string& deployment_id, const std::string& url, bool ok,
                             int64_t now_ms) {
  std::lock_guard lock(mu_);
  StateOfLocked(deployment_id).balancer.HealthCheck(url, ok, now_ms);
}

const DeploymentRecord* Dispatcher::Choose(const std::vector<const DeploymentRecord*>& candidates,
                                           int64_t now_ms) const {
  if (candidates.size() == 1) return candidates.front();
  std::lock_guard lock(mu_);
  for (const DeploymentRecord* d : candidates) {
    auto q = queues_.find(d->id);
    if (q == queues_.end() || q->second.balancer.AnyUp(d->endpoints, now_ms)) return d;
  }
  return candidates.front();
}

void Dispatcher::Pump(int64_t now_ms) {
  const ChangeNotice notice(options_.on_change);
  std::vector<Wake> wakes;
  {
    std::lock_guard lock(mu_);
    PumpAllLocked(now_ms, wakes);
  }
  for (auto& w : wakes) w();
}

size_t Dispatcher::QueuedFor(const std::string& deployment_id) const {
  std::lock_guard lock(mu_);
  auto q = queues_.find(deployment_id);
  return q == queues_.end() ? 0 : q->second.backlog->size();
}

int Dispatcher::OutstandingOn(const std::string& deployment_id, const std::string& url) const {
  std::lock_guard lock(mu_);
  auto q = queues_.find(deployment_id);
  return q == queues_.end() ? 0 : q->second.balancer.Outstanding(url);
}

}  // namespace atrium::gateway_server
