#include "cli/audit_check.h"

#include <gtest/gtest.h>

#include <map>

#include "common/json_reader.h"
#include "crypto/crypto.h"
#include "support/audit_trail.h"

namespace atrium::cli {
namespace {

std::vector<AuditRecord> Trail(int n) { return testing_support::SealedTrail(n); }

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

// An export as `atrium audit export` writes it: the records, then the
// summary line.
std::string ExportOf(const std::vector<AuditRecord>& records, const TrailSummary& summary) {
  std::string text;
  for (const auto& r : records) text += audit::ToJson(r).dump() + "\n";
  return text + Json{{"audit_export", TrailSummaryToJson(summary)}}.dump() + "\n";
}

TrailSummary SummaryOf(const std::vector<AuditRecord>& records, const std::string& secret_key) {
  TrailSummary summary;
  audit::TrailState state;
  for (const auto& [chain, head] : HeadsOf(records)) {
    summary.heads.push_back({chain, head.first, head.second});
  }
  state.heads = summary.heads;
  state.last_seq = records.empty() ? 0 : records.back().seq;
  summary.last_seq = state.last_seq;
  auto checkpoint = audit::SignCheckpoint(state, 1, secret_key);
  EXPECT_TRUE(checkpoint.has_value());
  summary.checkpoint = *checkpoint;
  return summary;
}

class CliExportTest : public ::testing::Test {
 protected:
  crypto::SigningKeyPair key_ = crypto::GenerateSigningKeyPair();
  std::string public_hex_ = crypto::HexEncode(key_.public_key);
};

TEST_F(CliExportTest, WholeExportRoundTripsAndVerifiesWithThePinnedKey) {
  auto records = Trail(6);
  auto parsed = ParseAuditExport(ExportOf(records, SummaryOf(records, key_.secret_key)));
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  ASSERT_TRUE(parsed->summary.has_value());
  EXPECT_EQ(parsed->records.size(), 6u);
  EXPECT_EQ(parsed->summary->last_seq, 6);
  std::string note;
  auto report = VerifySummary(parsed->records, *parsed->summary, public_hex_, &note);
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_NE(note.find("pinned"), std::string::npos) << note;
}

// Regression: `audit verify --file` passed an export whose last records were
// cut off — the summary line goes with them, or stays and names the heads.
TEST_F(CliExportTest, ExportCutShortIsFound) {
  auto records = Trail(6);
  std::string text = ExportOf(records, SummaryOf(records, key_.secret_key));
  // Cut in the middle of the file: no summary line is left.
  auto cut = ParseAuditExport(text.substr(0, text.find("\n", text.size() / 2) + 1));
  ASSERT_TRUE(cut.has_value()) << cut.error().message;
  EXPECT_FALSE(cut->summary.has_value());
  // The last records removed, the summary kept.
  auto summary = SummaryOf(records, key_.secret_key);
  records.pop_back();
  records.pop_back();
  auto report = VerifySummary(records, summary, public_hex_, nullptr);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("records removed from the tail"), std::string::npos)
      << report.reason;
}

// Regression: an export from which one tenant's whole chain was removed
// verified.
TEST_F(CliExportTest, ExportWithoutOneTenantsChainIsFound) {
  auto records = Trail(6);
  auto summary = SummaryOf(records, key_.secret_key);
  std::vector<AuditRecord> platform_only;
  for (const auto& r : records) {
    if (r.chain == "platform") platform_only.push_back(r);
  }
  auto report = VerifySummary(platform_only, summary, public_hex_, nullptr);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("gap in the global sequence"), std::string::npos) << report.reason;
  // A tenant's export carries no global number, and still misses nothing.
  summary.last_seq.reset();
  report = VerifySummary(platform_only, summary, public_hex_, nullptr);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_chain, "tn_a");
}

// Someone who cut the file and rewrote its summary to match re-signs the
// checkpoint with a key of their own: the pinned key refuses it.
TEST_F(CliExportTest, SummaryRewrittenWithAnotherKeyIsRefusedByThePinnedKey) {
  auto records = Trail(6);
  records.pop_back();
  auto forger = crypto::GenerateSigningKeyPair();
  auto forged = SummaryOf(records, forger.secret_key);
  std::string note;
  EXPECT_TRUE(VerifySummary(records, forged, "", &note).ok);
  EXPECT_NE(note.find("not pinned"), std::string::npos) << note;
  auto report = VerifySummary(records, forged, public_hex_, nullptr);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("does not verify"), std::string::npos) << report.reason;
}

TEST_F(CliExportTest, RecordAfterTheSummaryLineIsRefused) {
  auto records = Trail(2);
  std::string text = ExportOf(records, SummaryOf(records, key_.secret_key)) +
                     audit::ToJson(records[0]).dump() + "\n";
  auto parsed = ParseAuditExport(text);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().message.find("line 4: a record after the export's summary line"),
            std::string::npos)
      << parsed.error().message;
}

}  // namespace
}  // namespace atrium::cli
