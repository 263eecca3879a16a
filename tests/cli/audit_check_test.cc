#include "cli/audit_check.h"

#include <gtest/gtest.h>

#include <map>

#include "common/json_reader.h"

namespace atrium::cli {
namespace {

// A sealed trail: records alternate between tenant "tn_a" and the platform.
std::vector<AuditRecord> Trail(int n) {
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

std::vector<ChainHead> HeadsOf(const std::vector<AuditRecord>& records) {
  std::map<std::string, std::pair<int64_t, std::string>> heads;
  for (const auto& r : records) heads[r.chain] = {r.chain_seq, r.hash};
  return {heads.begin(), heads.end()};
}

TEST(CliVerifyAgainstHeadsTest, IntactTrailIsOk) {
  auto records = Trail(5);
  auto report = VerifyAgainstHeads(records, HeadsOf(records));
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(DescribeReport(report), "audit chain OK: 5 records in 2 chains");
}

TEST(CliVerifyAgainstHeadsTest, EditedRecordIsNamed) {
  auto records = Trail(5);
  auto heads = HeadsOf(records);
  records[2].action = "x";  // seq 3
  auto report = VerifyAgainstHeads(records, heads);
  ASSERT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 3);
  EXPECT_EQ(DescribeReport(report),
            "audit chain BROKEN at record seq=3 (chain tn_a, #2): record content does not match "
            "its hash (edited)");
}

TEST(CliVerifyAgainstHeadsTest, TruncatedTailIsCaughtOnlyByTheHeads) {
  auto records = Trail(5);
  auto heads = HeadsOf(records);
  records.pop_back();  // seq 5, tn_a #3: every remaining link still holds
  EXPECT_TRUE(audit::Verify(records).ok);
  auto report = VerifyAgainstHeads(records, heads);
  ASSERT_FALSE(report.ok);
  EXPECT_EQ(report.broken_chain, "tn_a");
  EXPECT_EQ(report.broken_seq, 3);
  EXPECT_NE(report.reason.find("ends at #2 but its recorded head is #3"), std::string::npos);
}

TEST(CliVerifyAgainstHeadsTest, WholeChainRemovedOrHeadMissing) {
  auto records = Trail(4);
  auto heads = HeadsOf(records);
  std::vector<AuditRecord> platform_only;
  for (const auto& r : records) {
    if (r.chain == "platform") platform_only.push_back(r);
  }
  auto gone = VerifyAgainstHeads(platform_only, heads);
  ASSERT_FALSE(gone.ok);
  EXPECT_EQ(gone.broken_chain, "tn_a");
  EXPECT_EQ(gone.broken_chain_seq, 0);

  heads.erase(heads.begin());  // "platform" sorts first
  auto headless = VerifyAgainstHeads(records, heads);
  ASSERT_FALSE(headless.ok);
  EXPECT_EQ(headless.reason, "the chain has no recorded head");
}

TEST(CliParseAuditJsonLinesTest, ReadsApiObjectsAndNamesBadLines) {
  auto records = Trail(3);
  std::string text;
  for (const auto& r : records) {
    Json j = audit::ToJson(r);
    j["time_text"] = "ignored";  // the API adds it; verification does not use it
    text += j.dump() + "\n\n";
  }
  auto parsed = ParseAuditJsonLines(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_TRUE(audit::Verify(*parsed).ok);

  auto bad = ParseAuditJsonLines(text + "{\"seq\": 4}\n");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message.rfind("line 7: ", 0), 0u) << bad.error().message;
  EXPECT_FALSE(ParseAuditJsonLines("{oops\n").has_value());
  EXPECT_TRUE(ParseAuditJsonLines("")->empty());
}

}  // namespace
}  // namespace atrium::cli
