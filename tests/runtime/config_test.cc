#include "runtime/config.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "crypto/ids.h"
#include "slurm/slurm_commands.h"

namespace atrium {
namespace {

TEST(ConfigTest, ExampleConfigInTheRepoLoads) {
  auto c = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->store_url, "sqlite:///var/lib/atrium/atrium.db");
  EXPECT_EQ(c->api_listen, "127.0.0.1:8080");
  EXPECT_EQ(c->access_token_ttl_s, 3600);
}

TEST(ConfigTest, TemplatesSectionNamesAnAbsoluteImageStore) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->templates_images_dir, "");
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[templates]\nimages_dir = \"/srv/images\"\n", "t");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->templates_images_dir, "/srv/images");
  auto relative =
      ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[templates]\nimages_dir = \"images\"\n", "t");
  ASSERT_FALSE(relative.has_value());
  EXPECT_NE(relative.error().message.find("'templates.images_dir' must be an absolute"),
            std::string::npos);
}

TEST(ConfigTest, SlurmEndedDirIsAnAbsolutePath) {
  const std::string slurm =
      "[store]\nurl = \"sqlite:///x.db\"\n[jobs]\nbackend = \"slurm\"\n[slurm]\n"
      "conf = \"/etc/slurm/slurm.conf\"\nworkload_root = \"/shared/jobs\"\n";
  auto none = ParseConfig(slurm, "t");
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_EQ(none->slurm_ended_dir, "");  // ends seen at the next reconcile
  auto c = ParseConfig(slurm + "ended_dir = \"/shared/ended\"\n", "t");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->slurm_ended_dir, "/shared/ended");
  auto relative = ParseConfig(slurm + "ended_dir = \"ended\"\n", "t");
  ASSERT_FALSE(relative.has_value());
  EXPECT_NE(relative.error().message.find("'slurm.ended_dir' must be an absolute"),
            std::string::npos);
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

TEST(ConfigTest, JobsSandboxBoundsAndTheTiersThatDemandFullConfinement) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->jobs_full_confinement_tiers,
            (std::vector<std::string>{"dedicated-gpu", "dedicated-node", "dedicated-pool"}));
  EXPECT_EQ(defaults->jobs_default_memory_mib, 4096);
  EXPECT_EQ(defaults->jobs_tmpfs_mib, 1024);
  EXPECT_EQ(defaults->jobs_max_file_mib, 0);
  EXPECT_EQ(defaults->jobs_log_retention_days, 30);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[jobs]\nfull_confinement_tiers = []\n"
      "default_memory_mib = 512\ntmpfs_mib = 64\nmax_file_mib = 100\nlog_retention_days = 0\n",
      "t");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_TRUE(c->jobs_full_confinement_tiers.empty());
  EXPECT_EQ(c->jobs_default_memory_mib, 512);
  EXPECT_EQ(c->jobs_tmpfs_mib, 64);
  EXPECT_EQ(c->jobs_max_file_mib, 100);
  EXPECT_EQ(c->jobs_log_retention_days, 0);
  for (const char* bad : {"full_confinement_tiers = [\"gold\"]", "default_memory_mib = 0",
                          "tmpfs_mib = 0", "max_file_mib = -1", "log_retention_days = -1"}) {
    auto refused =
        ParseConfig(std::string("[store]\nurl = \"sqlite:///x.db\"\n[jobs]\n") + bad + "\n", "t");
    EXPECT_FALSE(refused.has_value()) << bad;
  }
}

TEST(ConfigTest, MeteringSectionHasDefaultsAndBounds) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->metering_interval_ms, 60'000);
  EXPECT_EQ(defaults->metering_open_lag_ms, 60'000);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[metering]\ninterval_ms = 500\nopen_lag_ms = 0\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->metering_interval_ms, 500);
  EXPECT_EQ(c->metering_open_lag_ms, 0);
  for (const char* bad :
       {"interval_ms = 0", "interval_ms = 3600001", "open_lag_ms = -1", "interval = 5"}) {
    auto refused = ParseConfig(
        std::string("[store]\nurl = \"sqlite:///x.db\"\n[metering]\n") + bad + "\n", "t.toml");
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_NE(refused.error().message.find("metering."), std::string::npos)
        << bad << ": " << refused.error().message;
  }
}

TEST(ConfigTest, AutoscalingHasDefaultsAndBounds) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_FALSE(defaults->serving_allow_scale_to_zero);
  EXPECT_EQ(defaults->serving_scale_down_cooldown_ms, 120'000);
  EXPECT_EQ(defaults->gateway_load_report_ms, 1'000);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[serving]\nallow_scale_to_zero = true\n"
      "scale_up_wait_ms = 0\nscale_up_cooldown_ms = 1000\nscale_down_cooldown_ms = 5000\n"
      "idle_to_zero_ms = 60000\nload_fresh_ms = 3000\n[gateway]\nload_report_ms = 500\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_TRUE(c->serving_allow_scale_to_zero);
  EXPECT_EQ(c->serving_scale_up_wait_ms, 0);
  EXPECT_EQ(c->serving_scale_up_cooldown_ms, 1'000);
  EXPECT_EQ(c->serving_scale_down_cooldown_ms, 5'000);
  EXPECT_EQ(c->serving_idle_to_zero_ms, 60'000);
  EXPECT_EQ(c->serving_load_fresh_ms, 3'000);
  EXPECT_EQ(c->gateway_load_report_ms, 500);
  for (const char* bad : {"[serving]\nallow_scale_to_zero = 1", "[serving]\nscale_up_wait_ms = -1",
                          "[serving]\nload_fresh_ms = 10", "[serving]\nidle_to_zero_ms = 86400001",
                          "[gateway]\nload_report_ms = 99"}) {
    auto refused =
        ParseConfig(std::string("[store]\nurl = \"sqlite:///x.db\"\n") + bad + "\n", "t.toml");
    ASSERT_FALSE(refused.has_value()) << bad;
  }
}

TEST(ConfigTest, OperatorsServingTemplatesAreReadAndChecked) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_TRUE(defaults->serving_templates.empty());
  EXPECT_EQ(defaults->serving_max_adapters_per_tenant, 20);
  const std::string base = "[store]\nurl = \"sqlite:///x.db\"\n";
  auto c = ParseConfig(base +
                           "[serving]\nadapter_dir = \"/srv/adapters\"\n"
                           "[serving.templates.vllm-70b]\nengine = \"vllm\"\n"
                           "command = [\"vllm\", \"serve\", \"{source}\", \"--port\", \"{port}\"]\n"
                           "env = { HF_HOME = \"/srv/models\" }\n"
                           "read_only_binds = { \"/srv/models\" = \"/data/models\" }\n"
                           "readiness_timeout_s = 1800\nmax_batch = 128\n"
                           "adapter_args = [\"--enable-lora\"]\n"
                           "adapter_load_path = \"/v1/load_lora_adapter\"\n"
                           "adapter_unload_path = \"/v1/unload_lora_adapter\"\n",
                       "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->serving_adapter_dir, "/srv/adapters");
  ASSERT_EQ(c->serving_templates.size(), 1U);
  const serving::ServingTemplate& t = c->serving_templates[0];
  EXPECT_EQ(t.name, "vllm-70b");
  EXPECT_EQ(t.engine, "vllm");
  EXPECT_EQ(t.command.back(), "{port}");
  EXPECT_EQ(t.env, (std::vector<std::pair<std::string, std::string>>{{"HF_HOME", "/srv/models"}}));
  EXPECT_EQ(t.read_only_binds.at(0).second, "/data/models");
  EXPECT_EQ(t.readiness_timeout_s, 1800);
  EXPECT_EQ(t.max_batch, 128);
  EXPECT_TRUE(t.loads_adapters());
  // What ValidateTemplate refuses, and what the reader does, named.
  for (const char* bad :
       {"[serving.templates.x]\nengine = \"vllm\"\ncommand = [\"vllm\"]\n",  // no {port}
        "[serving.templates.x]\nengine = \"triton\"\ncommand = [\"t\", \"{port}\"]\n",
        "[serving.templates.x]\nengine = \"vllm\"\ncommand = [\"v\", \"{port}\", \"{gpu}\"]\n",
        "[serving.templates.x]\nengine = \"vllm\"\ncommand = [\"v\", \"{port}\"]\nflags = 1\n",
        "[serving.templates.x]\nengine = \"vllm\"\ncommand = [\"v\", \"{port}\"]\n"
        "adapter_load_path = \"/load\"\n",
        "[serving.templates.x]\nengine = \"vllm\"\ncommand = \"v {port}\"\n",
        "[serving.templates.Bad_Name]\nengine = \"vllm\"\ncommand = [\"v\", \"{port}\"]\n",
        "[serving]\ntemplates = 3\n"}) {
    auto refused = ParseConfig(base + bad, "t.toml");
    EXPECT_FALSE(refused.has_value()) << bad;
    if (!refused.has_value()) {
      EXPECT_NE(refused.error().message.find("serving"), std::string::npos)
          << refused.error().message;
    }
  }
}

TEST(ConfigTest, PendingRequestCapsHaveDefaultsAndBounds) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->scheduler_max_pending_per_tenant, 1000);
  EXPECT_EQ(defaults->scheduler_max_pending_per_project, 500);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[scheduler]\nmax_pending_per_tenant = 20\n"
      "max_pending_per_project = 5\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->scheduler_max_pending_per_tenant, 20);
  EXPECT_EQ(c->scheduler_max_pending_per_project, 5);
  auto zero = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[scheduler]\nmax_pending_per_tenant = 0\n", "t.toml");
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.error().message.find("max_pending_per_tenant"), std::string::npos);
}

TEST(ConfigTest, ScrubSectionTakesArgvPerModelAndRefusesBadPlaceholders) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  const scheduling::ScrubOptions none;
  EXPECT_TRUE(defaults->scrub.default_command.empty());
  EXPECT_TRUE(defaults->scrub.commands.empty());
  EXPECT_EQ(defaults->scrub.timeout_ms, none.timeout_ms);
  EXPECT_EQ(defaults->scrub.workload_timeout_ms, none.workload_timeout_ms);
  EXPECT_EQ(defaults->scrub.workers, none.workers);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[scrub]\n"
      "command = [\"nvidia-smi\", \"--gpu-reset\", \"-i\", \"{index}\"]\ntimeout_ms = 5000\n"
      "workers = 2\n[scrub.commands]\n\"A100-80GB\" = [\"clear-mem\", \"{node}\", "
      "\"{mig_start}\"]\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->scrub.default_command,
            (std::vector<std::string>{"nvidia-smi", "--gpu-reset", "-i", "{index}"}));
  EXPECT_EQ(c->scrub.commands.at("A100-80GB"),
            (std::vector<std::string>{"clear-mem", "{node}", "{mig_start}"}));
  EXPECT_EQ(c->scrub.timeout_ms, 5000);
  EXPECT_EQ(c->scrub.workers, 2);
  for (const std::string& bad : {
           std::string("[scrub]\ncommand = [\"reset\", \"{uuid}\"]\n"),
           std::string("[scrub]\ncommand = \"nvidia-smi --gpu-reset\"\n"),
           std::string("[scrub.commands]\n\"B999\" = [\"reset\"]\n"),
           std::string("[scrub.commands]\n\"L40S\" = []\n"),
           std::string("[scrub]\ntimeout_ms = 0\n"),
           std::string("[scrub]\nshell = true\n"),
       }) {
    auto refused = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n" + bad, "t.toml");
    EXPECT_FALSE(refused.has_value()) << bad;
    if (!refused.has_value()) {
      EXPECT_NE(refused.error().message.find("scrub"), std::string::npos)
          << refused.error().message;
    }
  }
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

TEST(ConfigTest, EgressSectionAndDedicatedEntitlement) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value()) << defaults.error().message;
  EXPECT_TRUE(defaults->egress_allowed_networks.empty()) << "closed unless the operator opens it";
  EXPECT_TRUE(defaults->egress_denied_networks.empty());
  EXPECT_EQ(defaults->egress_allowed_hosts, std::vector<std::string>{"*"});
  EXPECT_FALSE(defaults->gateway_dedicated_requires_entitlement);
  EXPECT_TRUE(defaults->gateway_cache_salt) << "tenants' prefix caches apart unless turned off";
  auto rules = EgressRulesOf(*defaults);
  ASSERT_TRUE(rules.has_value());
  EXPECT_TRUE(rules->allowed_networks.empty());

  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[gateway]\ndedicated_requires_entitlement = true\n"
      "cache_salt = false\n[egress]\nallowed_networks = [\"10.20.0.0/16\", \"fd00::/8\"]\n"
      "denied_networks = [\"10.20.1.0/24\"]\nallowed_hosts = [\"*.models.example.com\"]\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_TRUE(c->gateway_dedicated_requires_entitlement);
  EXPECT_FALSE(c->gateway_cache_salt);
  auto parsed = EgressRulesOf(*c);
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->allowed_networks.size(), 2u);
  EXPECT_EQ(parsed->allowed_networks[0].text, "10.20.0.0/16");
  ASSERT_EQ(parsed->denied_networks.size(), 1u);
  EXPECT_EQ(parsed->allowed_hosts, std::vector<std::string>{"*.models.example.com"});

  struct Bad {
    const char* toml;
    const char* says;
  };
  const Bad bads[] = {
      {"[egress]\nallowed_networks = [\"10.0.0.1/8\"]\n", "'egress.allowed_networks'"},
      {"[egress]\ndenied_networks = [\"nope\"]\n", "'egress.denied_networks'"},
      {"[egress]\nallowed_hosts = [\"a*b\"]\n", "'egress.allowed_hosts'"},
      {"[egress]\nallowed_networks = \"10.0.0.0/8\"\n", "'egress.allowed_networks'"},
      {"[egress]\nallowed_networks = [8]\n", "array of strings"},
      {"[egress]\nallow = []\n", "'egress.allow'"},
      {"[gateway]\ndedicated_requires_entitlement = 1\n", "true or false"},
  };
  for (const Bad& b : bads) {
    auto r = ParseConfig(std::string("[store]\nurl = \"sqlite:///x.db\"\n") + b.toml, "t.toml");
    ASSERT_FALSE(r.has_value()) << b.toml;
    EXPECT_NE(r.error().message.find(b.says), std::string::npos) << r.error().message;
  }
}

TEST(ConfigTest, UnknownKeyIsRejectedByName) {
  auto c = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\npool_sise = 3\n", "t.toml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("'store.pool_sise'"), std::string::npos) << c.error().message;
}

TEST(ConfigTest, UnknownTableIsRejectedByName) {
  auto c = ParseConfig("[store]\nurl = \"sqlite:///x.db\"\n[money]\nx = 1\n", "t.toml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("'money'"), std::string::npos);
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

TEST(ConfigTest, SqliteDirOfNamesTheDatabasesFolderOnlyForSqlite) {
  EXPECT_EQ(SqliteDirOf("sqlite:///var/lib/atrium/atrium.db"),
            std::filesystem::path("/var/lib/atrium"));
  EXPECT_EQ(SqliteDirOf("sqlite:///data/a.db?mode=rwc"), std::filesystem::path("/data"));
  EXPECT_EQ(SqliteDirOf("postgresql://db/atrium"), std::nullopt);
  EXPECT_EQ(SqliteDirOf("postgres://db/sqlite:///x.db"), std::nullopt);
  auto parsed = ParseConfig("[store]\nurl = \"sqlite:///srv/x/atrium.db?cache=shared\"\n", "t");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->signing_key_file, "/srv/x/signing.key");
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

TEST(ConfigTest, FleetSection) {
  auto defaults = LoadConfigFile(ATRIUM_EXAMPLE_CONFIG);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->fleet_discover, "auto");
  EXPECT_EQ(defaults->fleet_nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(defaults->fleet_node_name, "");
  EXPECT_EQ(defaults->fleet_health_check_s, 60);
  auto c = ParseConfig(
      "[store]\nurl = \"sqlite:///x.db\"\n[fleet]\ndiscover = \"nvml\"\n"
      "nvml_library = \"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\"\nnode_name = \"dgx-01\"\n",
      "t.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->fleet_discover, "nvml");
  EXPECT_EQ(c->fleet_nvml_library, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  EXPECT_EQ(c->fleet_node_name, "dgx-01");
  for (const char* bad : {"discover = \"yes\"", "nvml_library = \"\"", "node_name = \"../etc\"",
                          "node_name = \"a b\"", "probe = true", "health_check_seconds = -1"}) {
    auto refused = ParseConfig(
        std::string("[store]\nurl = \"sqlite:///x.db\"\n[fleet]\n") + bad + "\n", "t.toml");
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_NE(refused.error().message.find("fleet."), std::string::npos)
        << bad << ": " << refused.error().message;
  }
  EXPECT_FALSE(ValidateNodeName(std::string(254, 'a')).has_value());
  EXPECT_TRUE(ValidateNodeName("gpu-host-1.example.com").has_value());
}

}  // namespace
// Regression: the default prefix made "atr_" + a 29-character tenant id, one
// more than a Unix user name may have, so no tenant could sync into Slurm.
TEST(ConfigTest, DefaultSlurmUserPrefixFitsARealTenantId) {
  ManualClock clock(1'700'000'000'000);
  const std::string tenant_id = NewId("tn", clock);
  auto user = slurm::UnixUserForTenant(Config{}.slurm_unix_user_prefix, tenant_id);
  ASSERT_TRUE(user.has_value()) << user.error().message;
  EXPECT_EQ(*user, tenant_id);
}

}  // namespace atrium
