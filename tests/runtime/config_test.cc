#include "runtime/config.h"

#include <gtest/gtest.h>

namespace atrium {
namespace {

TEST(ConfigTest, ExampleConfigInTheRepoLoads) {
  auto c = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->store_url, "sqlite:///var/lib/atrium/atrium.db");
  EXPECT_EQ(c->api_listen, "127.0.0.1:8080");
  EXPECT_EQ(c->access_token_ttl_s, 3600);
}

TEST(ConfigTest, SchedulerSection) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->scheduler_fleet, "");
  EXPECT_EQ(defaults->scheduler_grace_s, 30);
  EXPECT_EQ(defaults->scheduler_tick_ms, 1000);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[scheduler]\nfleet = \"1xH100-80GBx8\"\n"
      "grace_seconds = 5\ntick_ms = 250\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->scheduler_fleet, "1xH100-80GBx8");
  EXPECT_EQ(c->scheduler_grace_s, 5);
  EXPECT_EQ(c->scheduler_tick_ms, 250);
  auto bad = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[scheduler]\nfleet = \"2xB300x8\"\n",
                         "t.toml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("'scheduler.fleet'"), std::string::npos);
  auto typo = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[scheduler]\ngrace = 5\n", "t");
  ASSERT_FALSE(typo.has_value());
  EXPECT_NE(typo.error().message.find("'scheduler.grace'"), std::string::npos);
}

TEST(ConfigTest, RolesAndGatewaySection) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_TRUE(defaults->run_control_plane);
  EXPECT_FALSE(defaults->run_gateway);
  EXPECT_EQ(defaults->gateway_queue, "fair");
  EXPECT_EQ(defaults->gateway_policy_poll_ms, 250);
  auto both = ParseConfig(
      "[server]\nroles = \"control-plane, gateway\"\n[store]\nurl = \"sqlite:///x.db\"\n"
      "[gateway]\nlisten = \"127.0.0.1:0\"\njournal_dir = \"/tmp/j\"\nqueue = \"fifo\"\n",
      "t.toml");
  ASSERT_TRUE(both.has_value()) << both.error().message;
  EXPECT_TRUE(both->run_control_plane);
  EXPECT_TRUE(both->run_gateway);
  EXPECT_EQ(both->gateway_queue, "fifo");
  auto gateway_only = ParseConfig(
      "[server]\nroles = \"gateway\"\n[store]\nurl = \"sqlite:///x.db\"\n"
      "[gateway]\njournal_dir = \"/tmp/j\"\n",
      "t.toml");
  ASSERT_TRUE(gateway_only.has_value()) << gateway_only.error().message;
  EXPECT_FALSE(gateway_only->run_control_plane);
  auto no_journal =
      ParseConfig("[server]\nroles = \"gateway\"\n[store]\nurl = \"sqlite:///x.db\"\n", "t");
  ASSERT_FALSE(no_journal.has_value());
  EXPECT_NE(no_journal.error().message.find("'gateway.journal_dir'"), std::string::npos);
  auto bad_role =
      ParseConfig("[server]\nroles = \"scheduler\"\n[store]\nurl = \"sqlite:///x.db\"\n", "t");
  ASSERT_FALSE(bad_role.has_value());
  EXPECT_NE(bad_role.error().message.find("unknown role 'scheduler'"), std::string::npos);
  auto bad_queue =
      ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[gateway]\nqueue = \"lifo\"\n", "t");
  ASSERT_FALSE(bad_queue.has_value());
}

TEST(ConfigTest, UnknownKeyIsRejectedByName) {
  auto c = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\npool_sise = 3\n", "t.toml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("'store.pool_sise'"), std::string::npos) << c.error().message;
}

TEST(ConfigTest, UnknownTableIsRejectedByName) {
  auto c = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[billing]\nx = 1\n", "t.toml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("'billing'"), std::string::npos);
}

TEST(ConfigTest, WrongTypeIsRejected) {
  auto c = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[api]\nthreads = \"four\"\n", "t");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("'api.threads' must be an integer"), std::string::npos);
}

TEST(ConfigTest, SigningKeyFileDefaultsBesideSqliteAndIsRequiredWithPostgres) {
  auto example = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(example.has_value());
  EXPECT_EQ(example->signing_key_file, "/var/lib/atrium/signing.key");
  auto named = ParseConfig(
      "[store]\nurl = \"postgresql://db/atrium\"\n[auth]\nsigning_key_file = \"/etc/k\"\n", "t");
  ASSERT_TRUE(named.has_value()) << named.error().message;
  EXPECT_EQ(named->signing_key_file, "/etc/k");
  auto missing = ParseConfig("[store]\nurl = \"postgresql://db/atrium\"\n", "t");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("'auth.signing_key_file'"), std::string::npos);
}

TEST(ConfigTest, OutOfRangeAndBadValues) {
  EXPECT_FALSE(
      ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[auth]\naccess_token_ttl_s = 7200\n", "t")
          .has_value());
  EXPECT_FALSE(ParseConfig("[store]\nurl = \"mysql://x\"\n", "t").has_value());
  EXPECT_FALSE(ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[api]\nlisten = \"nope\"\n", "t")
                   .has_value());
  EXPECT_FALSE(ParseConfig("[api]\nlisten = \"127.0.0.1:1\"\n", "t").has_value());  // no url
  EXPECT_FALSE(ParseConfig("[store\n", "t").has_value());                           // syntax
}

TEST(ConfigTest, ListenAddress) {
  auto a = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 0);
  auto v6 = ParseListenAddress("[::1]:8080");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->first, "::1");
  EXPECT_FALSE(ParseListenAddress("host:99999").has_value());
  EXPECT_FALSE(ParseListenAddress(":80").has_value());
}

}  // namespace
}  // namespace atrium
