// The tamper-evident audit trail: pure hashing and verification, no I/O.
//
// Records form one hash chain per tenant (chain = tenant id) plus one for the
// platform (chain = "platform"), so a tenant admin's export of their own
// trail verifies on its own. Each record's hash is SHA-256 over the previous
// record's hash in the same chain and the record's canonical form; editing,
// reordering or removing a record breaks every later link.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/records.h"

namespace atrium::audit {

inline constexpr char kPlatformChain[] = "platform";
inline const std::string kGenesisHash(64, '0');

// The chain a record belongs to: its tenant's, or the platform's.
std::string ChainOf(const std::string& tenant_id);

// SHA-256 (hex) of prev_hash and the record's fields in a fixed order.
// Ignores record.hash itself.
std::string ComputeHash(const AuditRecord& record);

// Fills chain_seq, prev_hash and hash given the chain's current head
// (nullopt head: the chain is empty).
void Seal(AuditRecord& record, int64_t head_chain_seq, const std::string& head_hash);

nlohmann::json ToJson(const AuditRecord& record);
Result<AuditRecord> FromJson(const nlohmann::json& j);

struct VerifyReport {
  bool ok = true;
  int64_t records = 0;
  int64_t chains = 0;
  // Set when !ok: the first broken record (lowest seq) and why.
  int64_t broken_seq = 0;
  std::string broken_chain;
  int64_t broken_chain_seq = 0;
  std::string reason;
};

// Checks every chain in `records` (any order). A chain may start past 1 only
// if `allow_partial_start` (an export from the middle of the trail); then its
// first record's prev_hash is taken on trust.
VerifyReport Verify(std::vector<AuditRecord> records, bool allow_partial_start = false);

}  // namespace atrium::audit
