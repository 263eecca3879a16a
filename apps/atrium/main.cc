// The one binary. Only argument parsing and start-up live here; everything
// else is in the libraries under src/ that the tests use too.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "capacity/fleet_spec.h"
#include "cli/cli.h"
#include "engine_sim/command.h"
#include "runtime/config.h"
#include "runtime/dev_models.h"
#include "runtime/platform.h"
#include "sim/sim_command.h"

namespace {

using atrium::Config;
using atrium::Platform;

// Writes the bootstrap admin key to path with mode 0600, keeping an existing
// one if it still authenticates.
bool EnsureAdminToken(Platform& platform, const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string existing;
  if (in && std::getline(in, existing) && platform.identity().IsValidCredential(existing)) {
    return true;
  }
  // The token file is dev's own: a key it no longer holds is replaced, and
  // the replacement is audited like `atrium bootstrap-admin --rotate`.
  auto key = atrium::BootstrapPlatformAdmin(platform.store(), platform.identity(),
                                            atrium::SystemClock::Instance(),
                                            {/*rotate=*/true, "dev:admin.token"});
  if (!key.has_value()) {
    spdlog::error("cannot create the bootstrap admin key: {}", key.error().message);
    return false;
  }
  auto written = atrium::WriteSecretFile(path.string(), key->key_text);
  if (!written.has_value()) {
    spdlog::error("{}", written.error().message);
    return false;
  }
  return true;
}

// `data_dir` is set for `atrium dev`: the admin token, the simulated models
// and the demo tenant's key live there.
int RunPlatform(Config config, const std::filesystem::path* data_dir) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  Platform platform(std::move(config));
  auto urls = platform.Start();
  if (!urls.has_value()) {
    std::cerr << "atrium: cannot start: " << urls.error().message << "\n";
    return 1;
  }
  std::unique_ptr<atrium::DevModels> dev_models;
  if (data_dir) {
    if (!EnsureAdminToken(platform, *data_dir / "admin.token")) return 1;
    auto models = atrium::DevModels::Start(platform, *data_dir);
    if (!models.has_value()) {
      std::cerr << "atrium: cannot start the simulated models: " << models.error().message << "\n";
      return 1;
    }
    dev_models = std::move(*models);
  }
  if (!urls->api.empty()) std::cout << "API: " << urls->api << std::endl;
  if (!urls->gateway.empty()) std::cout << "Gateway: " << urls->gateway << std::endl;
  if (data_dir) {
    std::cout << "Admin token: " << (*data_dir / "admin.token").string() << std::endl;
    std::cout << "Demo tenant key: " << dev_models->demo_key_path() << " (tenant demo, model "
              << atrium::kDevModel << " on " << dev_models->endpoint_urls().size()
              << " engine simulators)" << std::endl;
    std::cout << "Try: curl " << urls->gateway
              << "/v1/chat/completions -H \"Authorization: Bearer $(cat "
              << dev_models->demo_key_path()
              << ")\" -H 'Content-Type: application/json' -d '{\"model\":\"" << atrium::kDevModel
              << "\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'" << std::endl;
  }
  int sig = atrium::WaitForStopSignal();
  spdlog::info("signal {}: draining requests and stopping", sig);
  platform.Stop();
  dev_models.reset();
  spdlog::info("stopped cleanly");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so that only WaitForStopSignal sees them.
  atrium::BlockStopSignals();

  CLI::App app{"Atrium: a multi-tenant GPU cloud platform"};
  app.require_subcommand(1);

  std::string data_dir = ".atrium";
  std::string api_listen = "127.0.0.1:8080";
  auto* dev = app.add_subcommand("dev", "Run every role in one process on an embedded store");
  dev->add_option("--data", data_dir, "State directory (kept across restarts)")
      ->capture_default_str();
  dev->add_option("--api-listen", api_listen, "API listen address HOST:PORT (port 0: any free)")
      ->capture_default_str();
  std::string gateway_listen = "127.0.0.1:8081";
  dev->add_option("--gateway-listen", gateway_listen,
                  "Inference gateway (OpenAI-compatible /v1) listen address HOST:PORT")
      ->capture_default_str();
  std::string gateway_queue = "fair";
  dev->add_option("--gateway-queue", gateway_queue,
                  "Gateway queue discipline: fair (per-tenant VTC) or fifo (a baseline)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fair", "fifo"}));
  int gateway_threads = 2;
  dev->add_option("--gateway-threads", gateway_threads, "Gateway I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  std::string gateway_upstream_ca;
  dev->add_option("--gateway-upstream-ca", gateway_upstream_ca,
                  "PEM file of CAs to trust, besides the system's, for https model endpoints")
      ->check(CLI::ExistingFile);
  std::vector<std::string> egress_allow;
  dev->add_option("--egress-allow", egress_allow,
                  "Network (CIDR) tenants' dedicated deployments may reach besides public "
                  "addresses, e.g. 127.0.0.0/8 for engine-sim servers on this machine "
                  "(repeatable; [egress] allowed_networks)");
  bool dedicated_requires_entitlement = false;
  dev->add_flag("--dedicated-requires-entitlement", dedicated_requires_entitlement,
                "A tenant's dedicated deployment must be of a model it is entitled to");
  std::string fleet_spec;
  dev->add_option("--fleet", fleet_spec,
                  "Simulated GPU fleet as COUNTxMODELxGPUS items, e.g. "
                  "2xH100-80GBx8,1xA100-80GBx8,2xL40Sx4 (the default on a new data dir). "
                  "Without it a restart keeps the stored fleet; a different spec replaces the "
                  "stored fleet only if every held allocation keeps its place on it");

  std::string discover = "auto";
  dev->add_option("--discover", discover,
                  "Where the fleet comes from: auto (this host's GPUs through NVML when it has "
                  "them and no --fleet is given, else simulated), nvml (this host's GPUs or "
                  "refuse to start), off (simulated) ([fleet] discover)")
      ->check(CLI::IsMember({"auto", "nvml", "off"}))
      ->capture_default_str();
  std::string nvml_library = "libnvidia-ml.so.1";
  dev->add_option("--nvml-library", nvml_library, "The NVML library to load ([fleet] nvml_library)")
      ->capture_default_str();
  std::string slurm_dir;
  dev->add_option("--slurm", slurm_dir,
                  "Run jobs on the one-host Slurm that `scripts/slurm-dev.sh start DIR` started "
                  "in DIR (default: the local sandbox backend). Give --fleet a node named as "
                  "its node (SLURM_DEV_NODE)")
      ->check(CLI::ExistingDirectory);
  // The simulated fleet has no GPU to reset: a one-second stand-in keeps
  // "scrubbing" visible in `atrium gpu list` without slowing anyone down.
  std::vector<std::string> scrub_command = {"sleep", "1"};
  dev->add_option("--scrub-command", scrub_command,
                  "The command that scrubs a GPU after an allocation on it ended ([scrub] "
                  "command; placeholders {node} {index} ...). `--scrub-command none`: no "
                  "command, a GPU is free again at once")
      ->expected(1, -1)
      ->capture_default_str();
  int64_t metering_interval_ms = 60'000;
  dev->add_option("--metering-interval-ms", metering_interval_ms,
                  "How often the GPU meter writes the GPU usage records due ([metering] "
                  "interval_ms)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));

  int64_t billing_rating_lag_ms = 10'000;
  dev->add_option("--billing-rating-lag-ms", billing_rating_lag_ms,
                  "How old a usage record must be before billing rates it ([billing] "
                  "rating_lag_ms; rating runs every second under `atrium dev`)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1'000}, int64_t{3'600'000}));

  int64_t autoscale_cooldown_ms = 120'000;
  dev->add_option("--autoscale-cooldown-ms", autoscale_cooldown_ms,
                  "Autoscaling deployments: low load this long before one replica less, and no "
                  "request this long before the last one stops ([serving] "
                  "scale_down_cooldown_ms, idle_to_zero_ms; scale-ups at most every 15 s or this, "
                  "whichever is less). Under `atrium dev` a deployment may scale to zero")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));

  int64_t serving_port_min = 20'000;
  dev->add_option("--serving-port-min", serving_port_min,
                  "The first of the 1,000 ports managed deployments' replicas get ([serving] "
                  "port_min; two platforms on one host need ranges apart)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{64'535}));

  std::string config_path;
  auto* server = app.add_subcommand(
      "server", "Run the control plane and/or the gateway from a configuration file");
  server->add_option("--config", config_path, "TOML configuration file")->required();

  std::string bootstrap_config, bootstrap_out;
  auto* bootstrap = app.add_subcommand(
      "bootstrap-admin",
      "Create an API key for the platform's bootstrap admin directly in the configured store");
  bootstrap->add_option("--config", bootstrap_config, "TOML configuration file")->required();
  bootstrap->add_option("--out", bootstrap_out, "Write the key here (mode 0600), not to stdout");
  bool bootstrap_rotate = false;
  bootstrap->add_flag("--rotate", bootstrap_rotate,
                      "Replace the bootstrap admin's key: create a new one and revoke the old "
                      "(without it, a second run is refused); both are audited");

  atrium::sim::SimCommandOptions sim_options;
  auto* sim = app.add_subcommand(
      "sim", "Replay a GPU cluster trace through the placement policies (trace simulator)");
  sim->add_option("--nodes", sim_options.nodes, "Node list CSV (default: bundled openb GPU nodes)");
  sim->add_option("--pods", sim_options.pods,
                  "Pod list CSV (default: bundled openb default trace)");
  sim->add_option("--policies", sim_options.policies,
                  "Comma-separated policies (default: all; see the table for names)");
  sim->add_option("--seeds", sim_options.seeds, "Runs per policy, seeds 42, 43, ...")
      ->capture_default_str();
  sim->add_option("--first-seed", sim_options.first_seed, "First seed")->capture_default_str();
  sim->add_option("--tune", sim_options.tune_ratio,
                  "Offered GPU request as a multiple of GPU capacity")
      ->capture_default_str();
  sim->add_option("--jobs", sim_options.jobs, "Worker threads (0: one per CPU)")
      ->capture_default_str();
  sim->add_flag("--json", sim_options.json, "Print JSON instead of a table");

  atrium::engine_sim::RegisterEngineSimCommand(app);

  atrium::cli::CliOptions cli_options;
  atrium::cli::RegisterCommands(app, cli_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2.
    int rc = app.exit(e);
    // 1: a command that ran and failed (engine-sim could not start).
    return rc == 0 ? 0 : rc == 1 ? 1 : 2;
  }

  if (dev->parsed()) {
    std::error_code ec;
    std::filesystem::create_directories(data_dir, ec);
    if (ec) {
      std::cerr << "atrium: cannot create " << data_dir << ": " << ec.message() << "\n";
      return 1;
    }
    // Searchable (x) but not readable by others: the workloads' own
    // directories under workloads/ must be reachable by their unprivileged
    // users. Everything else in it is 0600 or 0700 (the database, keys,
    // tokens, the gateway's journal), so nothing else is exposed.
    ::chmod(data_dir.c_str(), 0711);
    std::filesystem::path dir = std::filesystem::absolute(data_dir);
    Config config;
    config.store_url = "sqlite://" + (dir / "atrium.db").string();
    config.signing_key_file = (dir / "signing.key").string();
    config.api_listen = api_listen;
    config.scheduler_fleet = fleet_spec;
    config.fleet_discover = discover;
    config.fleet_nvml_library = nvml_library;
    if (!slurm_dir.empty()) {
      const std::filesystem::path slurm = std::filesystem::absolute(slurm_dir);
      config.jobs_backend = "slurm";
      config.slurm_conf = (slurm / "slurm.conf").string();
      config.slurm_workload_root = (slurm / "jobs" / "atrium").string();
      // scripts/slurm-dev.sh's EpilogSlurmctld marks ended jobs here.
      if (std::filesystem::is_directory(slurm / "ended")) {
        config.slurm_ended_dir = (slurm / "ended").string();
      }
      config.slurm_create_unix_users = true;  // one host: tenants' users are made here
      // The cluster's fake GPUs (gres.conf File=), for template jobs' sandboxes.
      config.jobs_device_dir = (slurm / "fakedev").string();
    }
    if (scrub_command != std::vector<std::string>{"none"}) {
      config.scrub.default_command = scrub_command;
    }
    // Shared managed deployments run as this tenant, once the operator has
    // created it and given it a quota (README, "Managed deployments").
    config.serving_platform_tenant = "platform-serving";
    config.run_gateway = true;
    config.gateway_listen = gateway_listen;
    config.gateway_queue = gateway_queue;
    config.gateway_threads = gateway_threads;
    config.gateway_upstream_ca_file = gateway_upstream_ca;
    config.gateway_journal_dir = (dir / "gateway").string();
    std::filesystem::create_directories(config.gateway_journal_dir, ec);
    ::chmod(config.gateway_journal_dir.c_str(), 0700);  // tenants' usage: the platform's only
    config.audit_checkpoint_file = (dir / "audit-checkpoints.jsonl").string();
    config.audit_signing_key_file = (dir / "audit-signing.key").string();
    config.egress_allowed_networks = egress_allow;
    config.gateway_dedicated_requires_entitlement = dedicated_requires_entitlement;
    config.metering_interval_ms = metering_interval_ms;
    config.billing_interval_ms = 1'000;
    config.billing_rating_lag_ms = billing_rating_lag_ms;
    config.serving_port_min = serving_port_min;
    config.serving_port_max = serving_port_min + 999;
    config.serving_allow_scale_to_zero = true;
    config.serving_scale_down_cooldown_ms = autoscale_cooldown_ms;
    config.serving_idle_to_zero_ms = autoscale_cooldown_ms;
    config.serving_scale_up_cooldown_ms = std::min<int64_t>(15'000, autoscale_cooldown_ms);
    if (auto rules = atrium::EgressRulesOf(config); !rules.has_value()) {
      std::cerr << "atrium: --egress-allow: " << rules.error().message << "\n";
      return 2;
    }
    if (auto fleet = atrium::capacity::ParseFleetSpec(fleet_spec);
        !fleet_spec.empty() && !fleet.has_value()) {
      std::cerr << "atrium: --fleet: " << fleet.error().message << "\n";
      return 2;
    }
    for (const std::string* address : {&api_listen, &gateway_listen}) {
      if (auto listen = atrium::ParseListenAddress(*address); !listen.has_value()) {
        std::cerr << "atrium: " << listen.error().message << "\n";
        return 2;
      }
    }
    return RunPlatform(std::move(config), &dir);
  }
  if (server->parsed()) {
    auto config = atrium::LoadConfigFile(config_path);
    if (!config.has_value()) {
      std::cerr << "atrium: " << config.error().message << "\n";
      return 2;
    }
    return RunPlatform(std::move(*config), nullptr);
  }
  if (sim->parsed()) return atrium::sim::RunSimCommand(sim_options, std::cout, std::cerr);
  if (bootstrap->parsed()) {
    auto config = atrium::LoadConfigFile(bootstrap_config);
    if (!config.has_value()) {
      std::cerr << "atrium: " << config.error().message << "\n";
      return 2;
    }
    auto key = atrium::CreateBootstrapAdminKey(*config, bootstrap_rotate);
    if (!key.has_value()) {
      std::cerr << "atrium: " << key.error().message << "\n";
      return 1;
    }
    if (key->revoked_keys > 0) {
      std::cerr << "atrium: revoked " << key->revoked_keys
                << " older bootstrap admin key(s); the rotation is in the audit trail\n";
    }
    if (bootstrap_out.empty()) {
      std::cout << key->key_text << std::endl;
      return 0;
    }
    auto written = atrium::WriteSecretFile(bootstrap_out, key->key_text);
    if (!written.has_value()) {
      std::cerr << "atrium: " << written.error().message << "\n";
      return 1;
    }
    return 0;
  }
  return atrium::cli::RunSelected(app, cli_options);
}
