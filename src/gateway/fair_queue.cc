#include "gateway/fair_queue.h"

#include <algorithm>
#include <cassert>
#include <vector>

namespace atrium::gateway {

namespace {

int ClassOf(Priority priority) { return priority == Priority::kBatch ? 1 : 0; }

double Weighted(double cost, double weight) { return weight > 0 ? cost / weight : cost; }

}  // namespace

FairQueue::FairQueue(FairQueueOptions options) : options_(options) {}

FairQueue::TenantState& FairQueue::StateOf(const std::string& tenant) {
  auto [it, inserted] = tenants_.try_emplace(tenant);
  if (inserted) it->second.name = it->first;
  return it->second;
}

void FairQueue::AddToCounter(TenantState& tenant, double amount) {
  for (int k = 0; k < 2; ++k) {
    if (tenant.classes[k].size == 0) continue;
    backlog_[k].erase({tenant.counter, tenant.name, &tenant});
    backlog_[k].insert({tenant.counter + amount, tenant.name, &tenant});
  }
  tenant.counter += amount;
}

void FairQueue::Lift(TenantState& tenant, int k) {
  // A tenant that was not waiting banks at most max_credit for the time it
  // was away.
  std::optional<double> floor;
  if (!backlog_[k].empty()) {
    floor = backlog_[k].begin()->counter - options_.max_credit;
  } else if (last_left_[k]) {
    floor = Counter(*last_left_[k]) - options_.max_credit;
  }
  if (floor && *floor > tenant.counter) AddToCounter(tenant, *floor - tenant.counter);
}

void FairQueue::StartedWithoutWaiting(const std::string& tenant, double weight, Priority priority,
                                      int64_t input_tokens) {
  TenantState& state = StateOf(tenant);
  const int k = ClassOf(priority);
  if (state.classes[k].size == 0) {
    Lift(state, k);
    last_left_[k] = tenant;
  }
  AddToCounter(state, Weighted(options_.input_weight * static_cast<double>(input_tokens), weight));
}

void FairQueue::Push(QueuedItem item) {
  if (items_.count(item.id) != 0) {
    assert(false && "FairQueue::Push: duplicate id");
    return;
  }
  TenantState& tenant = StateOf(item.tenant);
  int k = ClassOf(item.priority);
  ClassQueue& queue = tenant.classes[k];
  if (queue.size == 0) {
    Lift(tenant, k);
    backlog_[k].insert({tenant.counter, tenant.name, &tenant});
  }
  uint64_t seq = next_seq_++;
  auto& fifo = queue.by_key[item.key_id];
  if (fifo.empty()) queue.heads.insert({seq, item.id});
  fifo.emplace(seq, item.id);
  ++queue.size;
  uint64_t id = item.id;
  items_.emplace(id, Entry{std::move(item), seq});
}

QueuedItem FairQueue::Take(uint64_t id) {
  auto entry = items_.find(id);
  QueuedItem item = std::move(entry->second.item);
  uint64_t seq = entry->second.seq;
  items_.erase(entry);

  TenantState& tenant = tenants_.find(item.tenant)->second;
  int k = ClassOf(item.priority);
  ClassQueue& queue = tenant.classes[k];
  auto fifo = queue.by_key.find(item.key_id);
  if (fifo->second.begin()->first == seq) {
    queue.heads.erase({seq, id});
    auto next = std::next(fifo->second.begin());
    if (next != fifo->second.end()) queue.heads.insert({next->first, next->second});
  }
  fifo->second.erase(seq);
  if (fifo->second.empty()) queue.by_key.erase(fifo);
  if (--queue.size == 0) {
    backlog_[k].erase({tenant.counter, tenant.name, &tenant});
    last_left_[k] = item.tenant;
  }
  return item;
}

bool FairQueue::Remove(uint64_t id) {
  if (items_.count(id) == 0) return false;
  Take(id);
  return true;
}

std::optional<QueuedItem> FairQueue::PopFromClass(int k, const CanStartFn& can_start,
                                                  const CanStartFn& first) {
  for (const BacklogEntry& entry : backlog_[k]) {
    // heads holds one item per key, so a refused key is skipped whole.
    for (const auto& [seq, id] : entry.state->classes[k].heads) {
      const QueuedItem& candidate = items_.find(id)->second.item;
      if (first && !first(candidate)) continue;
      if (can_start && !can_start(candidate)) continue;
      TenantState& tenant = *entry.state;
      QueuedItem item = Take(id);
      AddToCounter(tenant, Weighted(options_.input_weight * static_cast<double>(item.input_tokens),
                                    item.weight));
      return item;
    }
  }
  return std::nullopt;
}

std::optional<QueuedItem> FairQueue::Pop(const CanStartFn& can_start, const CanStartFn& first) {
  for (int k = 0; k < 2; ++k) {
    if (first) {
      if (auto item = PopFromClass(k, can_start, first)) return item;
    }
    if (auto item = PopFromClass(k, can_start, nullptr)) return item;
  }
  return std::nullopt;
}

void FairQueue::ChargeOutput(const std::string& tenant, double weight, int64_t output_tokens) {
  AddToCounter(StateOf(tenant),
               Weighted(options_.output_weight * static_cast<double>(output_tokens), weight));
}

void FairQueue::ChargeInput(const std::string& tenant, double weight, int64_t input_tokens) {
  AddToCounter(StateOf(tenant),
               Weighted(options_.input_weight * static_cast<double>(input_tokens), weight));
}

size_t FairQueue::QueuedFor(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return 0;
  return it->second.classes[0].size + it->second.classes[1].size;
}

double FairQueue::Counter(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.counter;
}

void FifoQueue::Push(QueuedItem item) {
  if (seq_of_.count(item.id) != 0) {
    assert(false && "FifoQueue::Push: duplicate id");
    return;
  }
  uint64_t seq = next_seq_++;
  seq_of_.emplace(item.id, seq);
  order_.emplace(seq, std::move(item));
}

QueuedItem FifoQueue::Take(uint64_t id) {
  auto seq = seq_of_.find(id);
  auto it = order_.find(seq->second);
  QueuedItem item = std::move(it->second);
  order_.erase(it);
  seq_of_.erase(seq);
  return item;
}

bool FifoQueue::Remove(uint64_t id) {
  if (seq_of_.count(id) == 0) return false;
  Take(id);
  return true;
}

std::optional<QueuedItem> FifoQueue::Pop(const CanStartFn& can_start, const CanStartFn& /*first*/) {
  // A plain scan: the baseline does not need FairQueue's per-key index, only
  // its contract (a refused tenant/key is not offered again in this call).
  std::vector<std::pair<std::string_view, std::string_view>> refused;
  for (const auto& [seq, item] : order_) {
    std::pair<std::string_view, std::string_view> who{item.tenant, item.key_id};
    if (std::find(refused.begin(), refused.end(), who) != refused.end()) continue;
    if (can_start && !can_start(item)) {
      refused.push_back(who);
      continue;
    }
    return Take(item.id);
  }
  return std::nullopt;
}

size_t FifoQueue::QueuedFor(const std::string& tenant) const {
  return static_cast<size_t>(std::count_if(order_.begin(), order_.end(), [&](const auto& entry) {
    return entry.second.tenant == tenant;
  }));
}

}  // namespace atrium::gateway
