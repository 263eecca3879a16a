// Per-deployment request queues. FairQueue serves tenants by the Virtual
// Token Counter (Sheng et al., "Fairness in Serving Large Language Models",
// OSDI 2024): each tenant has a counter of the service it received —
// input_weight·input tokens + output_weight·output tokens, divided by its
// weight — and the backlogged tenant with the smallest counter goes next.
// When a tenant becomes backlogged its counter is lifted to the smallest
// counter among backlogged tenants (to the counter of the tenant that last
// left the backlog when there is none) less `max_credit`, so idle time banks
// at most max_credit of credit (none with the paper's max_credit = 0). Then
// two tenants that stay backlogged receive service within about
// 2·max(input_weight·L_in, output_weight·M) + max_credit of each other (L_in
// the longest input, M the longest output), weighted by their weights. The
// credit is what lets a tenant that sends below its share have its
// occasional burst served ahead of a tenant that floods.
//
// Priority classes are strict: interactive items go before batch ones. Each
// class has its own backlog; the counters are the tenant's, shared by both.
//
// FifoQueue is the baseline benchmarks compare against: arrival order only.
// Both are a RequestQueue, so the dispatcher holds either without knowing
// which (a virtual call per operation; nothing allocated for it).
//
// A queued item's deadline is its caller's to keep (the gateway arms a
// timer and Removes the item when it fires); the queues keep no deadlines.
//
// Pure and deterministic: the caller passes every time and charge in. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace atrium::gateway {

struct FairQueueOptions {
  double input_weight = 1.0;   // w_in: cost of one input (prompt) token
  double output_weight = 2.0;  // w_out: cost of one output token
  // How far below the backlog's smallest counter a tenant's counter may stay
  // when it becomes backlogged (weighted tokens).
  double max_credit = 0;
};

enum class Priority { kInteractive = 0, kBatch = 1 };

struct QueuedItem {
  uint64_t id = 0;  // unique among queued items
  std::string tenant;
  std::string key_id;
  double weight = 1;  // the tenant's fair-share weight (> 0)
  Priority priority = Priority::kInteractive;
  int64_t input_tokens = 0;  // estimated; corrected later with ChargeInput
};

// Decides whether an item may start now (its tenant's and key's concurrency
// limits). Within one Pop the verdict is taken to depend only on the item's
// tenant and key: after a refusal, that key's later items are not offered.
// It must not modify the queue.
using CanStartFn = std::function<bool(const QueuedItem&)>;

// One deployment's waiting requests, in the order of its discipline.
class RequestQueue {
 public:
  virtual ~RequestQueue() = default;

  // Queues `item`. A duplicate id is a caller bug (asserts; ignored).
  virtual void Push(QueuedItem item) = 0;
  // Removes a queued item (cancelled, deadline passed, client gone); false
  // if not queued.
  virtual bool Remove(uint64_t id) = 0;
  // The next item to serve, removed from the queue, skipping items
  // `can_start` (may be null: any) refuses; nullopt when the queue is empty
  // or nothing may start. Where the discipline ranks by more than arrival,
  // the items `first` (may be null) accepts go first within their rank
  // (FairQueue: their priority class); FifoQueue, arrival order only, does
  // not ask it.
  virtual std::optional<QueuedItem> Pop(const CanStartFn& can_start, const CanStartFn& first) = 0;
  // A request that started without being queued (nothing was waiting).
  virtual void StartedWithoutWaiting(const std::string& tenant, double weight, Priority priority,
                                     int64_t input_tokens) = 0;
  // Service to charge after Pop: output tokens as they stream and/or at
  // completion, and corrections of the input estimate (negative allowed).
  virtual void ChargeOutput(const std::string& tenant, double weight, int64_t output_tokens) = 0;
  virtual void ChargeInput(const std::string& tenant, double weight, int64_t input_tokens) = 0;

  virtual size_t size() const = 0;
  // How many items of `tenant` are queued.
  virtual size_t QueuedFor(const std::string& tenant) const = 0;
};

class FairQueue final : public RequestQueue {
 public:
  explicit FairQueue(FairQueueOptions options = {});

  // Lifts the item's tenant's counter if the tenant was not backlogged in the
  // item's class.
  void Push(QueuedItem item) override;
  bool Remove(uint64_t id) override;
  // Interactive before batch; within a class the items `first` accepts
  // before the others, and within those the backlogged tenant with the
  // smallest counter (ties by tenant name), FIFO within a tenant. Charges
  // input_weight·input_tokens/weight to the tenant.
  std::optional<QueuedItem> Pop(const CanStartFn& can_start, const CanStartFn& first) override;
  // Lifted and charged as if pushed and popped at once, so that its tenant
  // counts as the last to leave the backlog and a tenant arriving after it
  // is lifted to its level.
  void StartedWithoutWaiting(const std::string& tenant, double weight, Priority priority,
                             int64_t input_tokens) override;
  void ChargeOutput(const std::string& tenant, double weight, int64_t output_tokens) override;
  void ChargeInput(const std::string& tenant, double weight, int64_t input_tokens) override;

  size_t size() const override { return items_.size(); }
  size_t QueuedFor(const std::string& tenant) const override;
  double Counter(const std::string& tenant) const;  // 0 for an unknown tenant

 private:
  // One tenant's items of one class: FIFO per key, and each key's oldest item
  // in arrival order, so that a refused key costs one step, not one per item.
  struct ClassQueue {
    std::unordered_map<std::string, std::map<uint64_t, uint64_t>> by_key;  // key → seq → id
    std::set<std::pair<uint64_t, uint64_t>> heads;                         // (seq, id)
    size_t size = 0;
  };
  struct TenantState {
    std::string_view name;  // the key of this state in tenants_
    double counter = 0;
    ClassQueue classes[2];
  };
  struct BacklogEntry {
    double counter;
    std::string_view tenant;
    TenantState* state;
    bool operator<(const BacklogEntry& o) const {
      return counter != o.counter ? counter < o.counter : tenant < o.tenant;
    }
  };
  struct Entry {
    QueuedItem item;
    uint64_t seq = 0;
  };

  TenantState& StateOf(const std::string& tenant);
  void AddToCounter(TenantState& tenant, double amount);
  // The VTC lift of a tenant joining class k's backlog.
  void Lift(TenantState& tenant, int k);
  // Takes a queued item out of every index.
  QueuedItem Take(uint64_t id);
  // Pop within class k (0 interactive, 1 batch), of the items `first` (when
  // set) accepts.
  std::optional<QueuedItem> PopFromClass(int k, const CanStartFn& can_start,
                                         const CanStartFn& first);

  FairQueueOptions options_;
  uint64_t next_seq_ = 0;
  // Node-based, so TenantState addresses and names stay put; tenants are
  // kept after they drain because their counters still matter.
  std::unordered_map<std::string, TenantState> tenants_;
  std::set<BacklogEntry> backlog_[2];        // tenants with queued items, per class
  std::optional<std::string> last_left_[2];  // the tenant that last left each backlog
  std::unordered_map<uint64_t, Entry> items_;
};

// Plain arrival order (still honouring can_start), for comparison with
// FairQueue in benchmarks; it charges nobody.
class FifoQueue final : public RequestQueue {
 public:
  void Push(QueuedItem item) override;
  bool Remove(uint64_t id) override;
  // Arrival order; `first` is not asked.
  std::optional<QueuedItem> Pop(const CanStartFn& can_start, const CanStartFn& first) override;
  void StartedWithoutWaiting(const std::string& tenant, double weight, Priority priority,
                             int64_t input_tokens) override {}
  void ChargeOutput(const std::string& tenant, double weight, int64_t output_tokens) override {}
  void ChargeInput(const std::string& tenant, double weight, int64_t input_tokens) override {}
  size_t size() const override { return order_.size(); }
  // A scan of the queue: the fair discipline's slot rules ask it, FIFO's
  // do not.
  size_t QueuedFor(const std::string& tenant) const override;

 private:
  QueuedItem Take(uint64_t id);

  uint64_t next_seq_ = 0;
  std::map<uint64_t, QueuedItem> order_;           // seq → item
  std::unordered_map<uint64_t, uint64_t> seq_of_;  // id → seq
};

}  // namespace atrium::gateway
