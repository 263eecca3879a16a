// Audit-trail verification as the CLI runs it, over records from any source
// (an export file, the store, the API). Pure; tested in tests/cli.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "audit/chain.h"
#include "audit/checkpoint.h"
#include "common/json_reader.h"
#include "common/result.h"

namespace atrium::cli {

// One chain's recorded head, as Store::AuditHeads returns it:
// {chain, {chain_seq, hash}}.
using ChainHead = std::pair<std::string, std::pair<int64_t, std::string>>;

// audit::Verify, then a check that every chain ends at its recorded head (a
// record removed from the tail leaves no broken link, only a short chain).
audit::VerifyReport VerifyAgainstHeads(std::vector<AuditRecord> records,
                                       const std::vector<ChainHead>& heads);

// What the server says about the trail besides its records: the answer of
// GET .../audit/heads, and the last line of an export ({"audit_export":
// <the same object>}). last_seq only for the whole trail.
struct TrailSummary {
  std::optional<int64_t> last_seq;
  std::vector<audit::HeadState> heads;
  std::optional<audit::Checkpoint> checkpoint;  // the latest signed one, if any
};
Json TrailSummaryToJson(const TrailSummary& summary);
// Errors: kInvalidArgument for a malformed object.
Result<TrailSummary> TrailSummaryFromJson(const Json& j);

// An export: its records and, on its last line, the trail summary the
// exporter read before the records. A file whose summary line is missing
// was cut off (or predates summaries).
struct AuditExport {
  std::vector<AuditRecord> records;
  std::optional<TrailSummary> summary;
};
// Errors: kInvalidArgument naming the line (a record after the summary
// line is one).
Result<AuditExport> ParseAuditExport(const std::string& text);

// The records a summary read just before them covers: a live trail grows
// between the two reads, and the newer records are not the summary's.
// Whole trail: seq <= last_seq; a tenant's: chain_seq <= its chain's head.
std::vector<AuditRecord> CoveredBy(std::vector<AuditRecord> records, const TrailSummary& summary);

// Verifies records against a summary: the links, each chain ends at its
// head, a whole trail's global sequence runs 1..last_seq without a gap, and
// everything the signed checkpoint saw is still there. The checkpoint's
// signatures are checked against `trusted_public_key` (hex) or, when that is
// empty, against the key the checkpoint names — which catches a damaged
// file but not a forger; `note` then says which key was used.
audit::VerifyReport VerifySummary(std::vector<AuditRecord> records, const TrailSummary& summary,
                                  const std::string& trusted_public_key, std::string* note);

// Records from JSON Lines text (one API audit object a line; blank lines
// skipped). Errors: kInvalidArgument naming the line.
Result<std::vector<AuditRecord>> ParseAuditJsonLines(const std::string& text);

// "audit chain OK: N records in M chains" or
// "audit chain BROKEN at record seq=N (chain C, #K): reason".
std::string DescribeReport(const audit::VerifyReport& report);

}  // namespace atrium::cli
