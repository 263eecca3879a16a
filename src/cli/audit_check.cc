#include "cli/audit_check.h"

#include <map>
#include <sstream>

#include "common/json_reader.h"

namespace atrium::cli {

audit::VerifyReport VerifyAgainstHeads(std::vector<AuditRecord> records,
                                       const std::vector<ChainHead>& heads) {
  // The last record of each chain, before Verify takes the vector.
  std::map<std::string, const AuditRecord*> last;
  for (const auto& r : records) {
    auto& at = last[r.chain];
    if (at == nullptr || r.chain_seq > at->chain_seq) at = &r;
  }
  std::map<std::string, AuditRecord> tails;
  for (const auto& [chain, record] : last) tails[chain] = *record;
  audit::VerifyReport report = audit::Verify(std::move(records));
  if (!report.ok) return report;

  auto broken = [&](const std::string& chain, std::string reason) {
    report.ok = false;
    report.broken_chain = chain;
    auto it = tails.find(chain);
    report.broken_seq = it == tails.end() ? 0 : it->second.seq;
    report.broken_chain_seq = it == tails.end() ? 0 : it->second.chain_seq;
    report.reason = std::move(reason);
  };
  std::map<std::string, bool> has_head;
  for (const auto& [chain, head] : heads) {
    has_head[chain] = true;
    auto it = tails.find(chain);
    int64_t have = it == tails.end() ? 0 : it->second.chain_seq;
    if (have != head.first) {
      broken(chain, "the chain ends at #" + std::to_string(have) + " but its recorded head is #" +
                        std::to_string(head.first) + ": records removed from the tail");
      return report;
    }
    if (it->second.hash != head.second) {
      broken(chain, "the last record's hash differs from the chain's recorded head");
      return report;
    }
  }
  for (const auto& [chain, record] : tails) {
    if (!has_head.count(chain)) {
      broken(chain, "the chain has no recorded head");
      return report;
    }
  }
  return report;
}

Result<std::vector<AuditRecord>> ParseAuditJsonLines(const std::string& text) {
  std::vector<AuditRecord> records;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto json = ParseJson(line);
    if (!json.has_value()) {
      return Error::InvalidArgument("line " + std::to_string(number) + ": " + json.error().message);
    }
    auto record = audit::FromJson(*json);
    if (!record.has_value()) {
      return Error::InvalidArgument("line " + std::to_string(number) + ": " +
                                    record.error().message);
    }
    records.push_back(std::move(record).value());
  }
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
