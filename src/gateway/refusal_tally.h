// Refusals counted instead of recorded one by one: a request the gateway
// refuses before any model server sees it (a limit, an unknown model, an
// invalid body) costs the platform nothing to serve, so it must cost
// nothing unbounded to record. The tally adds them up per tenant, key,
// reason and minute until the journal's shipper takes the counts for the
// store (Store::AddGatewayRefusals). A flood of any size then makes one row
// per key, reason and minute. Pure: the caller passes the time. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "model/gateway_records.h"

namespace atrium::gateway {

class RefusalTally {
 public:
  // At most `max_rows` distinct (tenant, key, reason, minute) wait to be
  // taken; beyond that new ones are only counted in dropped() (the store is
  // down for long: memory stays bounded).
  explicit RefusalTally(size_t max_rows = 100'000) : max_rows_(max_rows) {}

  // One refusal at `at_ms`, counted in the minute that holds it. `reason`
  // is the refusal's code (rate_limit_exceeded, model_not_found, ...).
  void Add(const std::string& tenant_id, const std::string& key_id, std::string_view reason,
           int64_t at_ms);
  // Counts taken earlier that could not be stored, added back.
  void Restore(const std::vector<RefusalCount>& counts);
  // Everything counted since the last Take(), oldest minute first.
  std::vector<RefusalCount> Take();

  size_t rows() const { return counts_.size(); }
  int64_t total() const { return total_; }      // refusals counted, ever
  int64_t dropped() const { return dropped_; }  // refusals not counted: the tally was full

 private:
  void AddCount(const std::string& tenant_id, const std::string& key_id, std::string_view reason,
                int64_t minute_at, int64_t count);

  using Key =
      std::tuple<int64_t, std::string, std::string, std::string>;  // minute, tenant, key, reason
  const size_t max_rows_;
  std::map<Key, int64_t> counts_;
  int64_t total_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace atrium::gateway
