// A sealed audit trail for tests, built as the store seals one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "audit/chain.h"

namespace atrium::testing_support {

// n records alternating between tenant "tn_a" (odd seq) and the platform,
// each sealed onto its chain's head.
inline std::vector<AuditRecord> SealedTrail(int n) {
  std::vector<AuditRecord> records;
  std::map<std::string, std::pair<int64_t, std::string>> heads;
  for (int i = 1; i <= n; ++i) {
    AuditRecord r;
    r.seq = i;
    r.tenant_id = i % 2 ? "tn_a" : "";
    r.chain = audit::ChainOf(r.tenant_id);
    r.time = 1000 * i;
    r.actor = "user:u";
    r.action = "tenant.update";
    r.outcome = "allowed";
    r.status = 200;
    auto& head = heads[r.chain];
    audit::Seal(r, head.first, head.second);
    head = {r.chain_seq, r.hash};
    records.push_back(r);
  }
  return records;
}

}  // namespace atrium::testing_support
