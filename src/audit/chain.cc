#include "audit/chain.h"

#include <algorithm>
#include <map>

#include "crypto/crypto.h"

namespace atrium::audit {

std::string ChainOf(const std::string& tenant_id) {
  return tenant_id.empty() ? std::string(kPlatformChain) : tenant_id;
}

std::string ComputeHash(const AuditRecord& r) {
  // A JSON array gives an unambiguous encoding (strings are escaped and
  // delimited), so no two different records serialize alike.
  nlohmann::json canonical = nlohmann::json::array(
      {r.seq, r.chain, r.chain_seq, r.time, r.actor, r.actor_role, r.tenant_id, r.action, r.target,
       r.outcome, r.status, r.request_id, r.source, r.prev_hash});
  if (!r.detail.empty()) canonical.push_back(r.detail);
  return crypto::Sha256Hex(canonical.dump());
}

void Seal(AuditRecord& record, int64_t head_chain_seq, const std::string& head_hash) {
  record.chain_seq = head_chain_seq + 1;
  record.prev_hash = head_chain_seq == 0 ? kGenesisHash : head_hash;
  record.hash = ComputeHash(record);
}

nlohmann::json ToJson(const AuditRecord& r) {
  nlohmann::json j = {{"seq", r.seq},
                      {"chain", r.chain},
                      {"chain_seq", r.chain_seq},
                      {"time", r.time},
                      {"actor", r.actor},
                      {"actor_role", r.actor_role},
                      {"tenant_id", r.tenant_id},
                      {"action", r.action},
                      {"target", r.target},
                      {"outcome", r.outcome},
                      {"status", r.status},
                      {"request_id", r.request_id},
                      {"source", r.source},
                      {"prev_hash", r.prev_hash},
                      {"hash", r.hash}};
  if (!r.detail.empty()) j["detail"] = r.detail;
  return j;
}

Result<AuditRecord> FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Error::InvalidArgument("audit record must be a JSON object");
  AuditRecord r;
  auto str = [&](const char* k, std::string& out) -> bool {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  auto num = [&](const char* k, int64_t& out) -> bool {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer()) return false;
    out = it->get<int64_t>();
    return true;
  };
  if (!num("seq", r.seq) || !str("chain", r.chain) || !num("chain_seq", r.chain_seq) ||
      !num("time", r.time) || !str("actor", r.actor) || !str("actor_role", r.actor_role) ||
      !str("tenant_id", r.tenant_id) || !str("action", r.action) || !str("target", r.target) ||
      !str("outcome", r.outcome) || !num("status", r.status) || !str("request_id", r.request_id) ||
      !str("source", r.source) || !str("prev_hash", r.prev_hash) || !str("hash", r.hash)) {
    return Error::InvalidArgument("audit record is missing a field or has a wrong type");
  }
  // Optional: absent, null or "" all mean none.
  if (auto it = j.find("detail"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Error::InvalidArgument("audit record's detail must be a string");
    r.detail = it->get<std::string>();
  }
  return r;
}

VerifyReport Verify(std::vector<AuditRecord> records, bool allow_partial_start) {
  VerifyReport report;
  report.records = static_cast<int64_t>(records.size());
  std::sort(records.begin(), records.end(),
            [](const AuditRecord& a, const AuditRecord& b) { return a.seq < b.seq; });

  struct Head {
    int64_t chain_seq = 0;
    std::string hash;
  };
  std::map<std::string, Head> heads;
  auto fail = [&](const AuditRecord& r, std::string why) {
    report.ok = false;
    report.broken_seq = r.seq;
    report.broken_chain = r.chain;
    report.broken_chain_seq = r.chain_seq;
    report.reason = std::move(why);
  };
  int64_t prev_seq = 0;
  for (const auto& r : records) {
    if (r.seq == prev_seq) {
      fail(r, "duplicate sequence number");
      break;
    }
    prev_seq = r.seq;
    if (r.chain != ChainOf(r.tenant_id)) {
      fail(r, "record is in the wrong chain for its tenant");
      break;
    }
    auto it = heads.find(r.chain);
    if (it == heads.end()) {
      if (r.chain_seq != 1 && !allow_partial_start) {
        fail(r, "chain starts at " + std::to_string(r.chain_seq) + ", not 1: records missing");
        break;
      }
      if (r.chain_seq == 1 && r.prev_hash != kGenesisHash) {
        fail(r, "first record of the chain does not link to the genesis hash");
        break;
      }
    } else {
      if (r.chain_seq != it->second.chain_seq + 1) {
        fail(r, "gap in chain: expected chain_seq " + std::to_string(it->second.chain_seq + 1));
        break;
      }
      if (r.prev_hash != it->second.hash) {
        fail(r, "prev_hash does not match the previous record's hash");
        break;
      }
    }
    if (ComputeHash(r) != r.hash) {
      fail(r, "record content does not match its hash (edited)");
      break;
    }
    heads[r.chain] = Head{r.chain_seq, r.hash};
  }
  report.chains = static_cast<int64_t>(heads.size());
  return report;
}

}  // namespace atrium::audit
