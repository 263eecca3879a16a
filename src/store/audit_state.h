// Reads of the audit trail's state for the checkpointer and verifiers
// (runtime/audit_checkpointer.h, cli/commands_audit.cc). Kept beside Store
// rather than in it: only those two need them.
#pragma once

#include <optional>
#include <string>

#include "audit/checkpoint.h"
#include "common/result.h"
#include "store/sql.h"

namespace atrium {

// The global sequence counter and every chain's head, read in one
// transaction so they agree: what a checkpoint signs and an export ends at.
// `db` is the store's (Store::database()).
Result<audit::TrailState> ReadAuditState(sql::Database& db);

// The hash of a chain's record #chain_seq; nullopt if there is none.
Result<std::optional<std::string>> ReadAuditHashAt(sql::Database& db, const std::string& chain,
                                                   int64_t chain_seq);

}  // namespace atrium
