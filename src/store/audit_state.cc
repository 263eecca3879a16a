#include "store/audit_state.h"

namespace atrium {

Result<audit::TrailState> ReadAuditState(sql::Database& db) {
  // A write transaction for its lock: appenders hold the counter row (FOR
  // UPDATE on PostgreSQL, the write lock on SQLite), so the counter and the
  // heads are read between two appends.
  return db.Transact<audit::TrailState>([](sql::Connection& c) -> Result<audit::TrailState> {
    const bool pg = c.dialect() == sql::Dialect::kPostgres;
    ATRIUM_ASSIGN_OR_RETURN(auto counter,
                            c.Exec(pg ? "SELECT last_seq FROM audit_counter WHERE id = 1 FOR UPDATE"
                                      : "SELECT last_seq FROM audit_counter WHERE id = 1",
                                   {}));
    if (counter.rows.empty()) return Error::Internal("audit counter row missing");
    audit::TrailState state;
    state.last_seq = counter.rows[0].Int(0);
    ATRIUM_ASSIGN_OR_RETURN(
        auto rows, c.Exec("SELECT chain, chain_seq, hash FROM audit_heads ORDER BY chain", {}));
    for (const auto& r : rows.rows) state.heads.push_back({r.Text(0), r.Int(1), r.Text(2)});
    return state;
  });
}

Result<std::optional<std::string>> ReadAuditHashAt(sql::Database& db, const std::string& chain,
                                                   int64_t chain_seq) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db.Exec("SELECT hash FROM audit_log WHERE chain = $1 AND chain_seq = $2",
                                  {chain, chain_seq}));
  if (rows.rows.empty()) return std::optional<std::string>();
  return std::optional<std::string>(rows.rows[0].Text(0));
}

}  // namespace atrium
