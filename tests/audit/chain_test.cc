#include "audit/chain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace atrium::audit {
namespace {

constexpr char kTenantA[] = "tn_aaaa";
constexpr char kTenantB[] = "tn_bbbb";

// Builds a trail the way the store does: one global seq, one head per chain.
class Trail {
 public:
  AuditRecord& Append(const std::string& tenant_id, const std::string& action) {
    AuditRecord r;
    r.seq = static_cast<int64_t>(records_.size()) + 1;
    r.chain = ChainOf(tenant_id);
    r.time = 1'790'000'000'000 + r.seq * 1000;
    r.actor = "user:usr_" + std::to_string(r.seq);
    r.actor_role = "tenant-admin";
    r.tenant_id = tenant_id;
    r.action = action;
    r.target = "tenant/" + tenant_id;
    r.outcome = "allowed";
    r.status = 200;
    r.request_id = "req-" + std::to_string(r.seq);
    r.source = "10.0.0.1";
    auto& head = heads_[r.chain];
    Seal(r, head.first, head.second);
    head = {r.chain_seq, r.hash};
    records_.push_back(r);
    return records_.back();
  }

  const std::vector<AuditRecord>& records() const { return records_; }

 private:
  std::vector<AuditRecord> records_;
  std::map<std::string, std::pair<int64_t, std::string>> heads_;
};

// seq:     1  2  3  4  5  6  7  8  9
// chain:   P  A  B  A  A  P  B  A  B
// c_seq:   1  1  1  2  3  2  2  4  3
std::vector<AuditRecord> ThreeChains() {
  Trail t;
  const std::vector<std::string> tenants = {"", kTenantA, kTenantB, kTenantA, kTenantA,
                                            "", kTenantB, kTenantA, kTenantB};
  for (size_t i = 0; i < tenants.size(); ++i) t.Append(tenants[i], "action." + std::to_string(i));
  return t.records();
}

std::vector<AuditRecord> OfTenant(const std::vector<AuditRecord>& all, const std::string& tenant) {
  std::vector<AuditRecord> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [&](const AuditRecord& r) { return r.tenant_id == tenant; });
  return out;
}

TEST(ChainTest, ChainOfSeparatesPlatformFromTenants) {
  EXPECT_EQ(ChainOf(""), "platform");
  EXPECT_EQ(ChainOf(kTenantA), kTenantA);
  EXPECT_EQ(kGenesisHash, std::string(64, '0'));
}

TEST(ChainTest, SealNumbersAndLinksWithinEachChain) {
  std::vector<AuditRecord> trail = ThreeChains();
  const std::vector<int64_t> chain_seq = {1, 1, 1, 2, 3, 2, 2, 4, 3};
  std::map<std::string, std::string> last;
  for (size_t i = 0; i < trail.size(); ++i) {
    const AuditRecord& r = trail[i];
    EXPECT_EQ(r.chain_seq, chain_seq[i]) << "seq " << r.seq;
    auto it = last.find(r.chain);
    EXPECT_EQ(r.prev_hash, it == last.end() ? kGenesisHash : it->second) << "seq " << r.seq;
    EXPECT_EQ(r.hash, ComputeHash(r));
    EXPECT_EQ(r.hash.size(), 64u);
    last[r.chain] = r.hash;
  }
}

TEST(ChainTest, ComputeHashCoversEveryFieldButTheHashItself) {
  const AuditRecord base = ThreeChains()[3];
  const std::string h = ComputeHash(base);
  AuditRecord r = base;
  r.hash = "anything";
  EXPECT_EQ(ComputeHash(r), h);

  const std::vector<std::pair<const char*, std::function<void(AuditRecord&)>>> edits = {
      {"seq", [](AuditRecord& r) { r.seq += 1; }},
      {"chain", [](AuditRecord& r) { r.chain += "x"; }},
      {"chain_seq", [](AuditRecord& r) { r.chain_seq += 1; }},
      {"time", [](AuditRecord& r) { r.time += 1; }},
      {"actor", [](AuditRecord& r) { r.actor += "x"; }},
      {"actor_role", [](AuditRecord& r) { r.actor_role = "platform-admin"; }},
      {"tenant_id", [](AuditRecord& r) { r.tenant_id += "x"; }},
      {"action", [](AuditRecord& r) { r.action += "x"; }},
      {"target", [](AuditRecord& r) { r.target += "x"; }},
      {"outcome", [](AuditRecord& r) { r.outcome = "denied"; }},
      {"status", [](AuditRecord& r) { r.status = 403; }},
      {"request_id", [](AuditRecord& r) { r.request_id += "x"; }},
      {"source", [](AuditRecord& r) { r.source += "x"; }},
      {"prev_hash", [](AuditRecord& r) { r.prev_hash[0] = r.prev_hash[0] == 'a' ? 'b' : 'a'; }},
  };
  for (const auto& [field, edit] : edits) {
    AuditRecord changed = base;
    edit(changed);
    EXPECT_NE(ComputeHash(changed), h) << field;
  }
  // Field boundaries are unambiguous: moving text between fields changes it.
  AuditRecord moved = base;
  moved.actor = base.actor + base.actor_role.substr(0, 1);
  moved.actor_role = base.actor_role.substr(1);
  EXPECT_NE(ComputeHash(moved), h);
}

// A detail (what drove a decision the platform took itself) is hashed
// when present, and a record without one hashes as records always did.
TEST(ChainTest, ADetailIsHashedWhenPresentAndAbsentOneChangesNothing) {
  const AuditRecord base = ThreeChains()[3];
  AuditRecord with = base;
  with.detail = "scaled up: 9 queued (oldest waited 1500 ms); 1 -> 2 replicas";
  EXPECT_NE(ComputeHash(with), ComputeHash(base));
  AuditRecord edited = with;
  edited.detail[0] = 'S';
  EXPECT_NE(ComputeHash(edited), ComputeHash(with));
  // The detail is not a field the others can spill into.
  AuditRecord moved = base;
  moved.prev_hash = base.prev_hash + "x";
  AuditRecord split = base;
  split.detail = "x";
  EXPECT_NE(ComputeHash(moved), ComputeHash(split));
  // Through JSON: present when set, absent (or null) otherwise.
  with.hash = ComputeHash(with);
  nlohmann::json j = ToJson(with);
  EXPECT_EQ(j["detail"], with.detail);
  auto back = FromJson(j);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->detail, with.detail);
  EXPECT_EQ(ComputeHash(*back), with.hash);
  j["detail"] = nullptr;
  EXPECT_EQ(FromJson(j)->detail, "");
  j["detail"] = 5;
  EXPECT_FALSE(FromJson(j).has_value());
}

TEST(ChainTest, ValidMultiChainTrailVerifiesInAnyOrder) {
  std::vector<AuditRecord> trail = ThreeChains();
  VerifyReport report = Verify(trail);
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.records, 9);
  EXPECT_EQ(report.chains, 3);
  EXPECT_EQ(report.broken_seq, 0);

  std::mt19937 rng(42);
  for (int i = 0; i < 5; ++i) {
    std::shuffle(trail.begin(), trail.end(), rng);
    report = Verify(trail);
    EXPECT_TRUE(report.ok) << report.reason;
  }

  report = Verify({});
  EXPECT_TRUE(report.ok);
  EXPECT_EQ(report.records, 0);
  EXPECT_EQ(report.chains, 0);
}

// Editing any one field of a record in the middle of a chain is found, and
// the report names that record.
TEST(ChainTest, EditingAnyFieldIsDetectedAtThatRecord) {
  const std::vector<AuditRecord> trail = ThreeChains();
  const size_t victim = 4;  // seq 5, tenant A, chain_seq 3
  const std::vector<std::pair<const char*, std::function<void(AuditRecord&)>>> edits = {
      {"chain", [](AuditRecord& r) { r.chain = kTenantB; }},
      {"chain_seq", [](AuditRecord& r) { r.chain_seq = 7; }},
      {"time", [](AuditRecord& r) { r.time -= 60'000; }},
      {"actor", [](AuditRecord& r) { r.actor = "user:usr_innocent"; }},
      {"actor_role", [](AuditRecord& r) { r.actor_role = "tenant-viewer"; }},
      {"tenant_id", [](AuditRecord& r) { r.tenant_id = kTenantB; }},
      {"tenant_id and chain",
       [](AuditRecord& r) {
         r.tenant_id = kTenantB;
         r.chain = kTenantB;
       }},
      {"action", [](AuditRecord& r) { r.action = "user.read"; }},
      {"target", [](AuditRecord& r) { r.target = "tenant/other"; }},
      {"outcome", [](AuditRecord& r) { r.outcome = "denied"; }},
      {"status", [](AuditRecord& r) { r.status = 403; }},
      {"request_id", [](AuditRecord& r) { r.request_id = "req-x"; }},
      {"source", [](AuditRecord& r) { r.source = "192.0.2.1"; }},
      {"prev_hash", [](AuditRecord& r) { r.prev_hash = std::string(64, 'f'); }},
      {"hash", [](AuditRecord& r) { r.hash = std::string(64, 'f'); }},
  };
  for (const auto& [field, edit] : edits) {
    SCOPED_TRACE(field);
    std::vector<AuditRecord> tampered = trail;
    edit(tampered[victim]);
    VerifyReport report = Verify(tampered);
    EXPECT_FALSE(report.ok);
    EXPECT_EQ(report.broken_seq, 5);
    EXPECT_FALSE(report.reason.empty());
    EXPECT_EQ(report.broken_chain, tampered[victim].chain);
  }
}

// A recomputed hash still breaks the link to the next record of the chain.
TEST(ChainTest, RecomputingTheEditedHashBreaksTheNextLink) {
  std::vector<AuditRecord> trail = ThreeChains();
  // seq 4 is chain A's chain_seq 2; its successor in the chain is seq 5.
  trail[3].outcome = "denied";
  trail[3].hash = ComputeHash(trail[3]);
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 5);
  EXPECT_EQ(report.broken_chain, kTenantA);
  EXPECT_EQ(report.broken_chain_seq, 3);
  EXPECT_NE(report.reason.find("prev_hash"), std::string::npos) << report.reason;
}

TEST(ChainTest, EditedSeqIsDetected) {
  std::vector<AuditRecord> trail = ThreeChains();
  trail.back().seq = 100;
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 100);
}

TEST(ChainTest, DeletedMiddleRecordIsAGapNamingTheNextRecord) {
  std::vector<AuditRecord> trail = ThreeChains();
  trail.erase(trail.begin() + 3);  // seq 4: chain A, chain_seq 2
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 5);
  EXPECT_EQ(report.broken_chain, kTenantA);
  EXPECT_EQ(report.broken_chain_seq, 3);
  EXPECT_NE(report.reason.find("gap"), std::string::npos) << report.reason;
}

TEST(ChainTest, DeletedFirstRecordOfAChainIsDetected) {
  std::vector<AuditRecord> trail = ThreeChains();
  trail.erase(trail.begin() + 2);  // seq 3: chain B's first
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 7);
  EXPECT_EQ(report.broken_chain, kTenantB);
}

TEST(ChainTest, DuplicateSeqIsDetected) {
  std::vector<AuditRecord> trail = ThreeChains();
  trail.push_back(trail[4]);
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 5);
}

// Swapping when two events happened (their seq numbers) is found at the
// earlier of the two, within a chain and across chains.
TEST(ChainTest, ReorderedRecordsAreDetected) {
  for (auto [i, j] : {std::pair<size_t, size_t>{3, 4}, {1, 3}, {0, 1}, {6, 7}}) {
    std::vector<AuditRecord> trail = ThreeChains();
    std::swap(trail[i].seq, trail[j].seq);
    VerifyReport report = Verify(trail);
    EXPECT_FALSE(report.ok) << "swapped seq " << i + 1 << " and " << j + 1;
    EXPECT_EQ(report.broken_seq, static_cast<int64_t>(i + 1));
  }
  // Swapping whole positions within a chain (chain_seq and links included).
  std::vector<AuditRecord> trail = ThreeChains();
  std::swap(trail[3].chain_seq, trail[4].chain_seq);
  std::swap(trail[3].prev_hash, trail[4].prev_hash);
  trail[3].hash = ComputeHash(trail[3]);
  trail[4].hash = ComputeHash(trail[4]);
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 4);
}

TEST(ChainTest, WrongGenesisIsDetected) {
  std::vector<AuditRecord> trail = ThreeChains();
  trail[1].prev_hash = std::string(64, '1');  // chain A's first record
  trail[1].hash = ComputeHash(trail[1]);
  VerifyReport report = Verify(trail);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 2);
  EXPECT_EQ(report.broken_chain, kTenantA);
  EXPECT_NE(report.reason.find("genesis"), std::string::npos) << report.reason;

  // allow_partial_start trusts a chain that starts late, never a first
  // record with a wrong genesis.
  report = Verify(trail, /*allow_partial_start=*/true);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 2);
}

TEST(ChainTest, OneTenantsRecordsVerifyOnTheirOwn) {
  const std::vector<AuditRecord> trail = ThreeChains();
  for (const std::string tenant : {"", kTenantA, kTenantB}) {
    std::vector<AuditRecord> subset = OfTenant(trail, tenant);
    ASSERT_FALSE(subset.empty());
    VerifyReport report = Verify(subset);
    EXPECT_TRUE(report.ok) << "tenant '" << tenant << "': " << report.reason;
    EXPECT_EQ(report.chains, 1);
    EXPECT_EQ(report.records, static_cast<int64_t>(subset.size()));
  }
  // And tampering inside a subset is still found.
  std::vector<AuditRecord> subset = OfTenant(trail, kTenantA);
  subset[1].actor = "user:usr_innocent";
  VerifyReport report = Verify(subset);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 4);
}

TEST(ChainTest, PartialStartIsAcceptedOnlyWhenAllowed) {
  const std::vector<AuditRecord> trail = ThreeChains();
  // An export of everything from seq 5 on: chain A starts at chain_seq 3,
  // platform at 2, B at 2.
  std::vector<AuditRecord> tail(trail.begin() + 4, trail.end());
  VerifyReport strict = Verify(tail);
  EXPECT_FALSE(strict.ok);
  EXPECT_EQ(strict.broken_seq, 5);
  EXPECT_NE(strict.reason.find("not 1"), std::string::npos) << strict.reason;

  VerifyReport partial = Verify(tail, /*allow_partial_start=*/true);
  EXPECT_TRUE(partial.ok) << partial.reason;
  EXPECT_EQ(partial.chains, 3);

  // Past the trusted first record, links are checked as usual.
  std::vector<AuditRecord> gap = tail;
  gap[3].chain_seq = 5;  // seq 8, chain A's next after seq 5 (chain_seq 3)
  gap[3].hash = ComputeHash(gap[3]);
  partial = Verify(gap, /*allow_partial_start=*/true);
  EXPECT_FALSE(partial.ok);
  EXPECT_EQ(partial.broken_seq, 8);

  std::vector<AuditRecord> edited = tail;
  edited[0].status = 500;
  partial = Verify(edited, /*allow_partial_start=*/true);
  EXPECT_FALSE(partial.ok);
  EXPECT_EQ(partial.broken_seq, 5);
}

TEST(ChainTest, JsonRoundTripsEveryField) {
  for (const AuditRecord& r : ThreeChains()) {
    nlohmann::json j = ToJson(r);
    EXPECT_EQ(j.size(), 15u);
    auto back = FromJson(nlohmann::json::parse(j.dump()));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    EXPECT_EQ(ToJson(*back), j);
    EXPECT_EQ(back->seq, r.seq);
    EXPECT_EQ(back->chain, r.chain);
    EXPECT_EQ(back->chain_seq, r.chain_seq);
    EXPECT_EQ(back->time, r.time);
    EXPECT_EQ(back->actor, r.actor);
    EXPECT_EQ(back->actor_role, r.actor_role);
    EXPECT_EQ(back->tenant_id, r.tenant_id);
    EXPECT_EQ(back->action, r.action);
    EXPECT_EQ(back->target, r.target);
    EXPECT_EQ(back->outcome, r.outcome);
    EXPECT_EQ(back->status, r.status);
    EXPECT_EQ(back->request_id, r.request_id);
    EXPECT_EQ(back->source, r.source);
    EXPECT_EQ(back->prev_hash, r.prev_hash);
    EXPECT_EQ(back->hash, r.hash);
  }
  // A trail that went through JSON still verifies.
  std::vector<AuditRecord> again;
  for (const AuditRecord& r : ThreeChains()) again.push_back(*FromJson(ToJson(r)));
  EXPECT_TRUE(Verify(again).ok);
}

TEST(ChainTest, FromJsonRejectsWrongTypesAndMissingFields) {
  const nlohmann::json good = ToJson(ThreeChains()[0]);
  ASSERT_TRUE(FromJson(good).has_value());

  for (const nlohmann::json& not_object :
       {nlohmann::json::array(), nlohmann::json("record"), nlohmann::json(1), nlohmann::json()}) {
    auto r = FromJson(not_object);
    ASSERT_FALSE(r.has_value()) << not_object.dump();
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  for (auto it = good.begin(); it != good.end(); ++it) {
    const std::string key = it.key();
    SCOPED_TRACE(key);
    nlohmann::json missing = good;
    missing.erase(key);
    EXPECT_FALSE(FromJson(missing).has_value());

    nlohmann::json wrong = good;
    // Strings become numbers, integers become strings or fractions.
    if (it->is_string()) {
      wrong[key] = 1;
    } else {
      wrong[key] = std::to_string(it->get<int64_t>());
    }
    auto r = FromJson(wrong);
    ASSERT_FALSE(r.has_value()) << wrong.dump();
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);

    nlohmann::json null_value = good;
    null_value[key] = nullptr;
    EXPECT_FALSE(FromJson(null_value).has_value());
  }
  nlohmann::json fraction = good;
  fraction["status"] = 200.5;
  EXPECT_FALSE(FromJson(fraction).has_value());
  nlohmann::json boolean = good;
  boolean["seq"] = true;
  EXPECT_FALSE(FromJson(boolean).has_value());
}

}  // namespace
}  // namespace atrium::audit
