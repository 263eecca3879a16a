#include "gateway/refusal_tally.h"

#include <limits>

namespace atrium::gateway {

namespace {

constexpr int64_t kMinuteMs = 60'000;

int64_t MinuteOf(int64_t at_ms) {
  const int64_t m = at_ms / kMinuteMs * kMinuteMs;
  return m > at_ms ? m - kMinuteMs : m;  // floor for times before the epoch too
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace

void RefusalTally::Add(const std::string& tenant_id, const std::string& key_id,
                       std::string_view reason, int64_t at_ms) {
  AddCount(tenant_id, key_id, reason, MinuteOf(at_ms), 1);
}

void RefusalTally::Restore(const std::vector<RefusalCount>& counts) {
  for (const RefusalCount& c : counts) {
    if (c.count > 0) AddCount(c.tenant_id, c.key_id, c.reason, c.minute_at, c.count);
  }
}

void RefusalTally::AddCount(const std::string& tenant_id, const std::string& key_id,
                            std::string_view reason, int64_t minute_at, int64_t count) {
  Key key{minute_at, tenant_id, key_id, std::string(reason)};
  auto it = counts_.find(key);
  if (it == counts_.end()) {
    if (counts_.size() >= max_rows_) {
      dropped_ = SaturatingAdd(dropped_, count);
      return;
    }
    it = counts_.emplace(std::move(key), 0).first;
  }
  it->second = SaturatingAdd(it->second, count);
  total_ = SaturatingAdd(total_, count);
}

std::vector<RefusalCount> RefusalTally::Take() {
  std::vector<RefusalCount> out;
  out.reserve(counts_.size());
  for (auto& [key, count] : counts_) {
    auto& [minute_at, tenant_id, key_id, reason] = key;
    out.push_back({tenant_id, key_id, reason, minute_at, count});
  }
  counts_.clear();
  return out;
}

}  // namespace atrium::gateway
