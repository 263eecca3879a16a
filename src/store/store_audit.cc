// Store: the audit trail — appends that assign the global sequence and link
// each record into its chain, listing, and the chains' heads.
#include "audit/chain.h"
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

namespace {

constexpr char kAuditColumns[] =
    "seq, chain, chain_seq, time, actor, actor_role, tenant_id, action, target, outcome, status, "
    "request_id, source, prev_hash, hash, detail";

AuditRecord AuditFromRow(const Row& r) {
  AuditRecord a;
  a.seq = r.Int(0);
  a.chain = r.Text(1);
  a.chain_seq = r.Int(2);
  a.time = r.Int(3);
  a.actor = r.Text(4);
  a.actor_role = r.Text(5);
  a.tenant_id = r.Text(6);
  a.action = r.Text(7);
  a.target = r.Text(8);
  a.outcome = r.Text(9);
  a.status = r.Int(10);
  a.request_id = r.Text(11);
  a.source = r.Text(12);
  a.prev_hash = r.Text(13);
  a.hash = r.Text(14);
  a.detail = r.Text(15);
  return a;
}

}  // namespace

namespace store_internal {

// Appends one audit record on an open write transaction: assigns the global
// seq and links the record into its chain. The counter row serializes
// appenders (FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already
// holds the write lock).
Result<AuditRecord> AppendAuditOn(sql::Connection& c, AuditRecord record) {
  record.chain = audit::ChainOf(record.tenant_id);
  const bool pg = c.dialect() == sql::Dialect::kPostgres;
  ATRIUM_ASSIGN_OR_RETURN(auto counter,
                          c.Exec(pg ? "SELECT last_seq FROM audit_counter WHERE id = 1 FOR UPDATE"
                                    : "SELECT last_seq FROM audit_counter WHERE id = 1",
                                 {}));
  if (counter.rows.empty()) return Error::Internal("audit counter row missing");
  record.seq = counter.rows[0].Int(0) + 1;
  ATRIUM_ASSIGN_OR_RETURN(
      auto head,
      c.Exec("SELECT chain_seq, hash FROM audit_heads WHERE chain = $1", {record.chain}));
  int64_t head_seq = head.rows.empty() ? 0 : head.rows[0].Int(0);
  std::string head_hash = head.rows.empty() ? "" : head.rows[0].Text(1);
  audit::Seal(record, head_seq, head_hash);
  const auto& r = record;
  ATRIUM_RETURN_IF_ERROR(c.Exec(
      std::string("INSERT INTO audit_log (") + kAuditColumns +
          ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
      {r.seq, r.chain, r.chain_seq, r.time, r.actor, r.actor_role, r.tenant_id, r.action, r.target,
       r.outcome, r.status, r.request_id, r.source, r.prev_hash, r.hash, r.detail}));
  ATRIUM_RETURN_IF_ERROR(c.Exec("UPDATE audit_counter SET last_seq = $1 WHERE id = 1", {r.seq}));
  if (head.rows.empty()) {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO audit_heads (chain, chain_seq, hash) VALUES ($1, $2, $3)",
               {r.chain, r.chain_seq, r.hash}));
  } else {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("UPDATE audit_heads SET chain_seq = $2, hash = $3 WHERE chain = $1",
               {r.chain, r.chain_seq, r.hash}));
  }
  return record;
}

}  // namespace store_internal

// ---------------------------------------------------------------- audit

Result<AuditRecord> Store::AppendAudit(AuditRecord record) {
  return db_->Transact<AuditRecord>(
      [&](sql::Connection& c) -> Result<AuditRecord> { return AppendAuditOn(c, record); });
}

Result<Page<AuditRecord>> Store::ListAudit(const std::optional<std::string>& tenant_id,
                                           const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  int64_t after = opts.after.empty() ? 0 : std::strtoll(opts.after.c_str(), nullptr, 10);
  std::string q = std::string("SELECT ") + kAuditColumns + " FROM audit_log WHERE seq > $1";
  std::vector<Value> params = {after};
  if (tenant_id) {
    params.push_back(*tenant_id);
    q += " AND tenant_id = $2";
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY seq LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<AuditRecord> items;
  for (const auto& r : rows.rows) items.push_back(AuditFromRow(r));
  return MakePage(std::move(items), limit,
                  [](const AuditRecord& a) { return std::to_string(a.seq); });
}

Result<std::vector<std::pair<std::string, std::pair<int64_t, std::string>>>> Store::AuditHeads() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT chain, chain_seq, hash FROM audit_heads ORDER BY chain"));
  std::vector<std::pair<std::string, std::pair<int64_t, std::string>>> heads;
  for (const auto& r : rows.rows) heads.push_back({r.Text(0), {r.Int(1), r.Text(2)}});
  return heads;
}

}  // namespace atrium
