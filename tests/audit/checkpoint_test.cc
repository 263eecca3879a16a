#include "audit/checkpoint.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "crypto/crypto.h"
#include "support/audit_trail.h"

namespace atrium::audit {
namespace {

std::vector<AuditRecord> Trail(int n) { return testing_support::SealedTrail(n); }

TrailState StateOf(const std::vector<AuditRecord>& records) {
  std::map<std::string, HeadState> heads;
  TrailState state;
  for (const auto& r : records) {
    heads[r.chain] = {r.chain, r.chain_seq, r.hash};
    state.last_seq = std::max(state.last_seq, r.seq);
  }
  for (auto& [chain, head] : heads) state.heads.push_back(head);
  return state;
}

TrailClaims WholeTrail(const TrailState& state, const Checkpoint* checkpoint = nullptr) {
  return TrailClaims{state.heads, state.last_seq, checkpoint};
}

class CheckpointTest : public ::testing::Test {
 protected:
  crypto::SigningKeyPair key_ = crypto::GenerateSigningKeyPair();
  std::string public_hex_ = crypto::HexEncode(key_.public_key);

  Checkpoint Sign(const std::vector<AuditRecord>& records) {
    auto signed_state = SignCheckpoint(StateOf(records), 123, key_.secret_key);
    EXPECT_TRUE(signed_state.has_value());
    return *signed_state;
  }
};

TEST_F(CheckpointTest, SignedCheckpointVerifiesAndSurvivesJson) {
  Checkpoint cp = Sign(Trail(5));
  EXPECT_EQ(cp.last_seq, 5);
  EXPECT_EQ(cp.heads.size(), 2u);
  EXPECT_EQ(cp.public_key, public_hex_);
  ASSERT_TRUE(VerifyCheckpointSignatures(cp, public_hex_).has_value());
  auto back = CheckpointFromJson(CheckpointToJson(cp));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(CheckpointToJson(*back), CheckpointToJson(cp));
  EXPECT_TRUE(VerifyCheckpointSignatures(*back, public_hex_).has_value());
}

TEST_F(CheckpointTest, ForgedHeadOrForeignKeyDoesNotVerify) {
  Checkpoint cp = Sign(Trail(5));
  Checkpoint rewound = cp;
  rewound.heads[0].head.chain_seq -= 1;
  auto forged = VerifyCheckpointSignatures(rewound, public_hex_);
  ASSERT_FALSE(forged.has_value());
  EXPECT_NE(forged.error().message.find("chain " + cp.heads[0].head.chain), std::string::npos);
  // A checkpoint re-signed with the attacker's own key names that key; the
  // verifier's trusted key refuses it.
  auto other = crypto::GenerateSigningKeyPair();
  auto resigned = SignCheckpoint(StateOf(Trail(3)), 123, other.secret_key);
  ASSERT_TRUE(resigned.has_value());
  EXPECT_FALSE(VerifyCheckpointSignatures(*resigned, public_hex_).has_value());
  EXPECT_FALSE(VerifyCheckpointSignatures(cp, "not-hex").has_value());
  EXPECT_FALSE(CheckpointFromJson(nlohmann::json{{"time", 1}}).has_value());
}

TEST_F(CheckpointTest, TenantSeesOnlyItsOwnChainAndItStillVerifies) {
  Checkpoint only = OnlyChain(Sign(Trail(5)), "tn_a");
  ASSERT_EQ(only.heads.size(), 1u);
  EXPECT_EQ(only.heads[0].head.chain, "tn_a");
  EXPECT_TRUE(VerifyCheckpointSignatures(only, public_hex_).has_value());
}

TEST_F(CheckpointTest, AnchorFileGivesTheLastCheckpointAndSkipsATornLastLine) {
  Checkpoint first = Sign(Trail(2));
  Checkpoint second = Sign(Trail(4));
  std::string file = CheckpointToJson(first).dump() + "\n" + CheckpointToJson(second).dump() + "\n";
  auto latest = LatestCheckpointIn(file);
  ASSERT_TRUE(latest.has_value()) << latest.error().message;
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->last_seq, 4);
  auto torn = LatestCheckpointIn(file + "{\"time\": 1, \"last_s");
  ASSERT_TRUE(torn.has_value());
  EXPECT_EQ((*torn)->last_seq, 4);
  auto damaged = LatestCheckpointIn("{}\n" + file);
  ASSERT_FALSE(damaged.has_value());
  EXPECT_NE(damaged.error().message.find("line 1"), std::string::npos);
  auto empty = LatestCheckpointIn("");
  ASSERT_TRUE(empty.has_value());
  EXPECT_FALSE(empty->has_value());
}

TEST(VerifyTrailTest, IntactTrailMeetsEveryClaim) {
  auto records = Trail(6);
  auto cp = SignCheckpoint(StateOf(Trail(4)), 1, crypto::GenerateSigningKeyPair().secret_key);
  ASSERT_TRUE(cp.has_value());
  auto report = VerifyTrail(records, WholeTrail(StateOf(records), &*cp));
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.records, 6);
}

// Removing the newest records of the whole trail leaves every link intact;
// the counter shows it.
TEST(VerifyTrailTest, TailCutFromTheWholeTrailIsFound) {
  auto records = Trail(6);
  TrailState state = StateOf(records);
  records.pop_back();
  records.pop_back();
  TrailClaims claims;
  claims.last_seq = state.last_seq;
  auto report = VerifyTrail(records, claims);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("records removed from the tail"), std::string::npos)
      << report.reason;
}

// The tenant chain's newest record (seq 7) removed and its head set back,
// the platform's record after it kept: no link breaks, the hole shows.
TEST(VerifyTrailTest, GapInTheGlobalSequenceIsFound) {
  auto trail = Trail(8);
  trail.erase(trail.begin() + 6);  // seq 7, tn_a's #4
  TrailClaims claims;
  claims.heads = StateOf(trail).heads;
  claims.last_seq = 8;
  auto holed = VerifyTrail(trail, claims);
  EXPECT_FALSE(holed.ok);
  EXPECT_EQ(holed.broken_seq, 8);
  EXPECT_NE(holed.reason.find("gap in the global sequence: records 7..7 are missing"),
            std::string::npos)
      << holed.reason;
}

TEST(VerifyTrailTest, ChainMissingEntirelyIsFound) {
  auto records = Trail(6);
  TrailState state = StateOf(records);
  std::vector<AuditRecord> platform_only;
  for (const auto& r : records) {
    if (r.chain == kPlatformChain) platform_only.push_back(r);
  }
  TrailClaims claims;
  claims.heads = state.heads;
  auto report = VerifyTrail(platform_only, claims);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_chain, "tn_a");
  EXPECT_NE(report.reason.find("ends at #0 but its recorded head is #3"), std::string::npos)
      << report.reason;
}

// The attacker with the database deletes a chain's newest rows and sets its
// head and the counter back: the trail agrees with itself, not with the
// checkpoint signed before.
TEST(VerifyTrailTest, RewoundChainAndCounterAreFoundByTheCheckpoint) {
  auto key = crypto::GenerateSigningKeyPair();
  auto records = Trail(6);
  auto cp = SignCheckpoint(StateOf(records), 1, key.secret_key);
  ASSERT_TRUE(cp.has_value());
  records.pop_back();  // seq 6, the platform chain's #3
  TrailState rewound = StateOf(records);
  auto without = VerifyTrail(records, WholeTrail(rewound));
  EXPECT_TRUE(without.ok) << "the rewind is invisible without a checkpoint";
  auto report = VerifyTrail(records, WholeTrail(rewound, &*cp));
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_chain, kPlatformChain);
  EXPECT_NE(report.reason.find("signed checkpoint of seq 6 saw it at #3"), std::string::npos)
      << report.reason;
}

TEST(VerifyTrailTest, RewrittenChainUnderTheCheckpointIsFound) {
  auto key = crypto::GenerateSigningKeyPair();
  auto records = Trail(6);
  auto cp = SignCheckpoint(StateOf(records), 1, key.secret_key);
  ASSERT_TRUE(cp.has_value());
  // Re-sealed from #2 on: every link holds, the hashes are new.
  std::map<std::string, std::pair<int64_t, std::string>> heads;
  for (auto& r : records) {
    if (r.seq == 4) r.action = "tenant.delete";
    auto& head = heads[r.chain];
    Seal(r, head.first, head.second);
    head = {r.chain_seq, r.hash};
  }
  auto report = VerifyTrail(records, WholeTrail(StateOf(records), &*cp));
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("the chain was rewritten"), std::string::npos) << report.reason;
}

}  // namespace
}  // namespace atrium::audit
