// Audit-trail verification as the CLI runs it, over records from any source
// (an export file, the store, the API). Pure; tested in tests/cli.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "audit/chain.h"
#include "common/result.h"

namespace atrium::cli {

// One chain's recorded head, as Store::AuditHeads returns it:
// {chain, {chain_seq, hash}}.
using ChainHead = std::pair<std::string, std::pair<int64_t, std::string>>;

// audit::Verify, then a check that every chain ends at its recorded head (a
// record removed from the tail leaves no broken link, only a short chain).
audit::VerifyReport VerifyAgainstHeads(std::vector<AuditRecord> records,
                                       const std::vector<ChainHead>& heads);

// Records from JSON Lines text (one API audit object a line; blank lines
// skipped). Errors: kInvalidArgument naming the line.
Result<std::vector<AuditRecord>> ParseAuditJsonLines(const std::string& text);

// "audit chain OK: N records in M chains" or
// "audit chain BROKEN at record seq=N (chain C, #K): reason".
std::string DescribeReport(const audit::VerifyReport& report);

}  // namespace atrium::cli
