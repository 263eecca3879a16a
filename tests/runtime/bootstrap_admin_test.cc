#include "runtime/bootstrap_admin.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "audit/chain.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"

namespace atrium {
namespace {

class BootstrapAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("bootstrap-admin");
    std::filesystem::create_directories(dir_);
    auto store = Store::Open("sqlite://" + (dir_ / "atrium.db").string(), 2);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    store_ = std::move(*store);
    IdentityOptions options;
    options.fast_password_hashing = true;
    identity_ = std::make_unique<IdentityService>(*store_, clock_, options);
    ASSERT_OK(identity_->Init());
  }

  std::vector<AuditRecord> Trail() {
    ListOptions options;
    options.limit = 1000;
    auto page = store_->ListAudit(std::nullopt, options);
    EXPECT_TRUE(page.has_value());
    return page.has_value() ? page->items : std::vector<AuditRecord>{};
  }

  std::filesystem::path dir_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
};

// Regression: the bootstrap account and key had no audit record.
TEST_F(BootstrapAdminTest, FirstRunRecordsTheAccountAndTheKeyInThePlatformChain) {
  auto first = BootstrapPlatformAdmin(*store_, *identity_, clock_, {false, "cli:bootstrap-admin"});
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_TRUE(first->created_account);
  EXPECT_TRUE(identity_->IsValidCredential(first->key_text));

  auto trail = Trail();
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[0].action, "user.create");
  EXPECT_EQ(trail[1].action, "key.create");
  EXPECT_EQ(trail[1].target, "platform/key/" + first->key_id);
  for (const auto& r : trail) {
    EXPECT_EQ(r.chain, "platform");
    EXPECT_EQ(r.actor, "system:bootstrap-admin");
    EXPECT_EQ(r.source, "cli:bootstrap-admin");
    EXPECT_EQ(r.outcome, "allowed");
  }
  EXPECT_TRUE(audit::Verify(trail).ok);
}

// Regression: each run added another platform-admin key, silently.
TEST_F(BootstrapAdminTest, SecondRunIsRefusedUnlessItRotatesAndThenItIsAudited) {
  auto first = BootstrapPlatformAdmin(*store_, *identity_, clock_, {false, "cli:bootstrap-admin"});
  ASSERT_TRUE(first.has_value()) << first.error().message;
  const size_t records = Trail().size();

  auto again = BootstrapPlatformAdmin(*store_, *identity_, clock_, {false, "cli:bootstrap-admin"});
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  EXPECT_NE(again.error().message.find("--rotate"), std::string::npos) << again.error().message;
  EXPECT_EQ(Trail().size(), records) << "a refused run changed the trail";
  auto user = store_->GetUserByName(TenantScope::Platform(), kBootstrapAdminName);
  ASSERT_TRUE(user.has_value());
  auto keys = store_->ListApiKeys(TenantScope::Platform(), user->id, ListOptions{"", 100});
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ(keys->items.size(), 1u) << "a refused run added a key";

  auto rotated = BootstrapPlatformAdmin(*store_, *identity_, clock_, {true, "cli:bootstrap-admin"});
  ASSERT_TRUE(rotated.has_value()) << rotated.error().message;
  EXPECT_FALSE(rotated->created_account);
  EXPECT_EQ(rotated->revoked_keys, 1);
  EXPECT_TRUE(identity_->IsValidCredential(rotated->key_text));
  EXPECT_FALSE(identity_->IsValidCredential(first->key_text));
  auto trail = Trail();
  ASSERT_EQ(trail.size(), records + 2);
  EXPECT_EQ(trail[records].action, "key.create");
  EXPECT_EQ(trail[records].target, "platform/key/" + rotated->key_id);
  EXPECT_EQ(trail[records + 1].action, "key.revoke");
  EXPECT_EQ(trail[records + 1].target, "platform/key/" + first->key_id);
}

}  // namespace
}  // namespace atrium
