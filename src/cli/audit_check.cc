#include "cli/audit_check.h"

#include <functional>
#include <map>
#include <sstream>

#include "common/json_reader.h"

namespace atrium::cli {

audit::VerifyReport VerifyAgainstHeads(std::vector<AuditRecord> records,
                                       const std::vector<ChainHead>& heads) {
  audit::TrailClaims claims;
  claims.heads.emplace();
  for (const auto& [chain, head] : heads) claims.heads->push_back({chain, head.first, head.second});
  return audit::VerifyTrail(std::move(records), claims);
}

Json TrailSummaryToJson(const TrailSummary& summary) {
  Json heads = Json::array();
  for (const auto& h : summary.heads) {
    heads.push_back({{"chain", h.chain}, {"chain_seq", h.chain_seq}, {"hash", h.hash}});
  }
  Json j = {{"heads", std::move(heads)},
            {"checkpoint",
             summary.checkpoint ? audit::CheckpointToJson(*summary.checkpoint) : Json(nullptr)}};
  if (summary.last_seq) j["last_seq"] = *summary.last_seq;
  return j;
}

Result<TrailSummary> TrailSummaryFromJson(const Json& j) {
  auto bad = [](const std::string& what) {
    return Error::InvalidArgument("malformed audit trail summary: " + what);
  };
  if (!j.is_object()) return bad("not an object");
  TrailSummary summary;
  if (auto it = j.find("last_seq"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("last_seq");
    summary.last_seq = it->get<int64_t>();
  }
  auto heads = j.find("heads");
  if (heads == j.end() || !heads->is_array()) return bad("heads");
  for (const auto& h : *heads) {
    if (!h.is_object() || !h.contains("chain") || !h["chain"].is_string() ||
        !h.contains("chain_seq") || !h["chain_seq"].is_number_integer() || !h.contains("hash") ||
        !h["hash"].is_string()) {
      return bad("a head");
    }
    summary.heads.push_back({h["chain"], h["chain_seq"].get<int64_t>(), h["hash"]});
  }
  if (auto it = j.find("checkpoint"); it != j.end() && !it->is_null()) {
    ATRIUM_ASSIGN_OR_RETURN(audit::Checkpoint checkpoint, audit::CheckpointFromJson(*it));
    summary.checkpoint = std::move(checkpoint);
  }
  return summary;
}

namespace {

// Calls `fn(json)` for each non-blank line of `text` parsed as JSON; an
// error (the line's, or the first `fn` returns) is prefixed with its line
// number.
Status ForEachJsonLine(const std::string& text,
                       const std::function<Status(const nlohmann::json&)>& fn) {
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto json = ParseJson(line);
    Status done = json.has_value() ? fn(*json) : Status(std::move(json).error());
    if (!done.has_value()) {
      return Error::InvalidArgument("line " + std::to_string(number) + ": " + done.error().message);
    }
  }
  return OkStatus();
}

}  // namespace

Result<AuditExport> ParseAuditExport(const std::string& text) {
  AuditExport parsed;
  ATRIUM_RETURN_IF_ERROR(ForEachJsonLine(text, [&](const nlohmann::json& json) -> Status {
    if (parsed.summary) return Error::InvalidArgument("a record after the export's summary line");
    if (json.is_object() && json.contains("audit_export")) {
      ATRIUM_ASSIGN_OR_RETURN(parsed.summary, TrailSummaryFromJson(json["audit_export"]));
      return OkStatus();
    }
    ATRIUM_ASSIGN_OR_RETURN(auto record, audit::FromJson(json));
    parsed.records.push_back(std::move(record));
    return OkStatus();
  }));
  return parsed;
}

std::vector<AuditRecord> CoveredBy(std::vector<AuditRecord> records, const TrailSummary& summary) {
  std::map<std::string, int64_t> head_of;
  for (const auto& h : summary.heads) head_of[h.chain] = h.chain_seq;
  std::erase_if(records, [&](const AuditRecord& r) {
    if (summary.last_seq) return r.seq > *summary.last_seq;
    auto it = head_of.find(r.chain);
    return it == head_of.end() || r.chain_seq > it->second;
  });
  return records;
}

audit::VerifyReport VerifySummary(std::vector<AuditRecord> records, const TrailSummary& summary,
                                  const std::string& trusted_public_key, std::string* note) {
  audit::TrailClaims claims;
  claims.heads = summary.heads;
  claims.last_seq = summary.last_seq;
  if (summary.checkpoint) {
    const std::string& key =
        trusted_public_key.empty() ? summary.checkpoint->public_key : trusted_public_key;
    if (auto verified = audit::VerifyCheckpointSignatures(*summary.checkpoint, key);
        !verified.has_value()) {
      audit::VerifyReport report;
      report.ok = false;
      report.records = static_cast<int64_t>(records.size());
      report.reason = verified.error().message;
      return report;
    }
    claims.checkpoint = &*summary.checkpoint;
    if (note) {
      *note = trusted_public_key.empty()
                  ? "checkpoint of seq " + std::to_string(summary.checkpoint->last_seq) +
                        " signed by key " + key +
                        " (not pinned: pass --public-key with the key the operator publishes)"
                  : "checkpoint of seq " + std::to_string(summary.checkpoint->last_seq) +
                        " verified with the pinned key";
    }
  } else if (note) {
    *note = "no signed checkpoint: a trail rewound by someone with database access would not show";
  }
  return audit::VerifyTrail(std::move(records), claims);
}

Result<std::vector<AuditRecord>> ParseAuditJsonLines(const std::string& text) {
  std::vector<AuditRecord> records;
  ATRIUM_RETURN_IF_ERROR(ForEachJsonLine(text, [&](const nlohmann::json& json) -> Status {
    ATRIUM_ASSIGN_OR_RETURN(auto record, audit::FromJson(json));
    records.push_back(std::move(record));
    return OkStatus();
  }));
  return records;
}

std::string DescribeReport(const audit::VerifyReport& report) {
  if (report.ok) {
    return "audit chain OK: " + std::to_string(report.records) + " records in " +
           std::to_string(report.chains) + " chains";
  }
  return "audit chain BROKEN at record seq=" + std::to_string(report.broken_seq) + " (chain " +
         report.broken_chain + ", #" + std::to_string(report.broken_chain_seq) +
         "): " + report.reason;
}

}  // namespace atrium::cli
