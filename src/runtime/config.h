// Configuration of `atrium server`, read from a TOML file. Every key is
// declared here with its default; an unknown key or a wrong type is an error
// naming it, so a typo never silently falls back to a default.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "gateway/egress_policy.h"
#include "scheduling/scrub_runner.h"
#include "serving/serving_spec.h"

namespace atrium {

// Fields follow the file's sections, not the best packing: one per process.
struct Config {  // NOLINT(clang-analyzer-optin.performance.Padding)
  // [server]
  // Roles this process runs: "control-plane" (API, scheduler), "gateway"
  // (the OpenAI-compatible data plane), or both, comma-separated.
  bool run_control_plane = true;
  bool run_gateway = false;
  // [store]
  std::string store_url;  // sqlite:///path or postgresql://... (required)
  int store_pool_size = 4;
  // [api]
  std::string api_listen = "127.0.0.1:8080";
  int api_threads = 4;
  int64_t api_max_body_bytes = int64_t{1024} * 1024;
  int64_t api_read_timeout_ms = 30'000;
  int64_t api_idle_timeout_ms = 60'000;
  int64_t api_max_connections = 10'000;
  // [auth]
  int64_t access_token_ttl_s = 3600;
  // The key file that seals token signing keys in the store (created, mode
  // 0600, at first start). "" = "signing.key" beside a SQLite database;
  // required with PostgreSQL, and the same file on every server sharing it.
  std::string signing_key_file;
  // [log]
  std::string log_level = "info";
  // [scheduler]
  // The simulated fleet spec, e.g. "2xH100-80GBx8,1xA100-80GBx8". "" = the
  // stored fleet, or the default simulated fleet on an empty store (see
  // scheduling/scheduling_service.h for a stored fleet that differs).
  std::string scheduler_fleet;
  int64_t scheduler_grace_s = 30;  // reclaim victims' grace period
  std::string scheduler_policy = "atrium";
  int64_t scheduler_tick_ms = 1000;  // how often queued work is retried
  // The most pending allocation requests per tenant and per project (429
  // beyond): one tenant's backlog must not slow every tenant's scheduling.
  int64_t scheduler_max_pending_per_tenant = 1000;
  int64_t scheduler_max_pending_per_project = 500;
  // [fleet] Where the fleet comes from at start (runtime/fleet_discovery.h):
  // "auto" = this host's GPUs through NVML when the library loads and
  // reports at least one GPU (unless scheduler.fleet names a simulated
  // fleet), else the simulated fleet; "nvml" = this host's GPUs, and start
  // fails when NVML cannot give them; "off" = the simulated fleet.
  std::string fleet_discover = "auto";
  std::string fleet_nvml_library = "libnvidia-ml.so.1";  // dlopen'ed; a path or a bare name
  std::string fleet_node_name;                           // "" = this host's name
  // How often the host's GPU health is read again while its GPUs are used;
  // a GPU that turns unhealthy is taken out of placement. 0 = never.
  int64_t fleet_health_check_s = 60;
  // [jobs] What runs tenants' jobs (runtime/workloads.h): "local" =
  // processes on this machine in bubblewrap sandboxes (exec_local), "slurm"
  // = a Slurm cluster Atrium drives ([slurm] below).
  std::string jobs_backend = "local";
  // local: where workloads' records, logs and directories live. "" =
  // "workloads" beside a SQLite database when its users can reach it there,
  // else /var/lib/atrium/workloads/<hash of its folder>; with PostgreSQL
  // /var/lib/atrium/workloads/server.
  std::string jobs_state_dir;
  // local: where GPU device files are. "" = /dev on a discovered host; on a
  // simulated fleet, fake GPU devices made beside the state dir. slurm:
  // where they are on the nodes ("" = /dev), for template jobs' sandboxes.
  std::string jobs_device_dir;
  // Refuse to start a workload the host cannot fully confine (cgroups).
  bool jobs_require_full_confinement = false;
  // Tenant tiers whose workloads are refused rather than run with less
  // confinement than the backend enforces at best ([] = none).
  std::vector<std::string> jobs_full_confinement_tiers = {"dedicated-gpu", "dedicated-node",
                                                          "dedicated-pool"};
  // local: every workload's memory limit when its job gives none; the size
  // of its /tmp and /dev/shm (each); the largest file it may write (0 =
  // any); how long a finished workload's log is kept (0 = until its tenant
  // is deleted).
  int64_t jobs_default_memory_mib = 4096;
  int64_t jobs_tmpfs_mib = 1024;
  int64_t jobs_max_file_mib = 0;
  int64_t jobs_log_retention_days = 30;
  int64_t jobs_cancel_grace_s = 30;  // SIGTERM → SIGKILL on cancel and time limit
  int64_t jobs_tick_ms = 1000;       // how often jobs are reconciled with the backend
  // Uploaded job archives (kept in "<state dir>/archives"): the largest
  // upload (a larger one is 413), what one may unpack to and hold, and how
  // many one tenant may keep.
  int64_t jobs_max_archive_bytes = int64_t{64} << 20;
  int64_t jobs_max_archive_unpacked_bytes = int64_t{512} << 20;
  int64_t jobs_max_archive_entries = 20'000;
  int64_t jobs_max_archives_per_tenant = 100;
  // [slurm] With jobs.backend = "slurm": the cluster's slurm.conf, the
  // folder every node mounts where workloads' files go, the partition ("" =
  // the default), tenants' Unix users (prefix + tenant id; created on this
  // host when create_unix_users, for one-host clusters), the most log bytes
  // kept per workload (0 = all) and how long one Slurm command may take.
  std::string slurm_conf;
  std::string slurm_workload_root;
  std::string slurm_partition;
  std::string slurm_unix_user_prefix;  // tenant ids are 29 characters; user names 32 at most
  bool slurm_create_unix_users = false;
  int64_t slurm_log_max_bytes = 8 << 20;
  int64_t slurm_command_timeout_ms = 30'000;
  // How often tenants' accounts and limits are checked against Slurm's.
  int64_t slurm_tenant_sync_ms = 10'000;
  // Where the controller's EpilogSlurmctld marks ended jobs
  // (deploy/slurm/job_ended.sh.in); "" = none: ends are seen at the job
  // service's next reconcile ([jobs] tick_ms).
  std::string slurm_ended_dir;
  // [scrub] How a GPU is scrubbed after an allocation on it ended, before
  // anyone else is placed there (scheduling/scrub_runner.h): `command` (the
  // default argv), `timeout_ms`, `workload_timeout_ms`, `workers`, and a
  // [scrub.commands] table of argv per GPU model. No command: the scrub is
  // immediate (the GPU still passes through "scrubbing").
  scheduling::ScrubOptions scrub;
  // [templates]
  // The operator's image store: environment templates' root filesystems,
  // <images_dir>/sha256-<hex>/rootfs (everyone's) and
  // <images_dir>/tenants/<tenant id>/sha256-<hex>/rootfs (one tenant's).
  // "" = none: templates still carry environment and node requirements,
  // but resolve to no root filesystem.
  std::string templates_images_dir;
  // [metering] The GPU meter (metering/gpu_meter.h): how often it writes
  // the GPU usage records due, and how long after an hour boundary a
  // held allocation's record for that hour is written (an end recorded up
  // to that late is still billed exactly).
  int64_t metering_interval_ms = 60'000;
  int64_t metering_open_lag_ms = 60'000;
  // [billing] The billing service (billing/billing_service.h): how often
  // it rates usage, how old a record must be to be rated (longer than a
  // price change takes to store), and how long after a period ends its
  // invoices are finalised (0: only when an operator asks).
  int64_t billing_interval_ms = 5'000;
  int64_t billing_rating_lag_ms = 10'000;
  int64_t billing_finalize_after_ms = 3'600'000;
  // [serving] Managed deployments (serving/deployment_controller.h), run
  // where jobs run. platform_tenant: the name of the tenant whose jobs a
  // shared deployment's replicas are (the platform's own; "" = shared
  // managed deployments are refused). Replicas get ports in
  // port_min..port_max, bind bind_host, and the gateway reaches them at
  // node_address (every node) or node_addresses[node].
  bool serving_enabled = true;
  std::string serving_platform_tenant;
  int64_t serving_port_min = 20'000;
  int64_t serving_port_max = 20'999;
  std::string serving_bind_host = "127.0.0.1";
  std::string serving_node_address = "127.0.0.1";
  std::map<std::string, std::string> serving_node_addresses;
  int64_t serving_tick_ms = 1000;
  // Autoscaling (serving/autoscale.h): a request waiting longer than
  // scale_up_wait_ms asks for a replica more; scale-ups at least
  // scale_up_cooldown_ms apart, scale-downs after scale_down_cooldown_ms
  // of low load; to zero only with allow_scale_to_zero, after
  // idle_to_zero_ms without a request. A gateway's report counts for
  // load_fresh_ms.
  bool serving_allow_scale_to_zero = false;
  int64_t serving_scale_up_wait_ms = 1'000;
  int64_t serving_scale_up_cooldown_ms = 15'000;
  int64_t serving_scale_down_cooldown_ms = 120'000;
  int64_t serving_idle_to_zero_ms = 300'000;
  int64_t serving_load_fresh_ms = 5'000;
  // Tenants' LoRA adapters (serving/adapters.h): where the controller
  // unpacks them ("": under the local backend's state dir; the Slurm
  // backend needs a folder every node mounts at the same path, else
  // deployments allowing adapters are refused), and how many one tenant
  // may hold.
  std::string serving_adapter_dir;
  int64_t serving_max_adapters_per_tenant = 20;
  // The operator's serving templates ([serving.templates.NAME]: engine,
  // command, env, read_only_binds, health_path, readiness_timeout_s,
  // metrics_path, running_metric, max_batch, adapter_args, adapter_env,
  // adapter_load_path, adapter_unload_path), each checked by
  // serving::ValidateTemplate; one named like a built-in replaces it.
  std::vector<serving::ServingTemplate> serving_templates;
  // [gateway]
  std::string gateway_listen = "127.0.0.1:8081";
  int gateway_threads = 2;
  std::string gateway_journal_dir;     // usage journal (required with the gateway role)
  std::string gateway_queue = "fair";  // fair (VTC) | fifo (a baseline for benchmarks)
  int64_t gateway_max_body_bytes = int64_t{4} * 1024 * 1024;
  int64_t gateway_default_deadline_ms = 60'000;
  int64_t gateway_policy_poll_ms = 250;  // how soon control-plane changes reach the gateway
  // How often a gateway publishes its budget holds and reads every
  // budget's spend and the other gateways' holds.
  int64_t gateway_budget_sync_ms = 250;
  // How often the gateway reports what it sees of each managed deployment
  // (queued, waiting, running: the autoscaler's signals).
  int64_t gateway_load_report_ms = 1'000;
  int64_t gateway_max_connections = 20'000;
  int64_t gateway_first_byte_timeout_ms = 120'000;
  int64_t gateway_upstream_body_timeout_ms = 300'000;  // a whole non-streamed answer
  int64_t gateway_body_memory_bytes =
      int64_t{256} * 1024 * 1024;  // request bodies in memory, in all
  int64_t gateway_queued_body_bytes_per_tenant = int64_t{64} * 1024 * 1024;  // one tenant's, queued
  std::string gateway_upstream_ca_file;  // extra CAs (PEM) trusted for https endpoints
  // [audit] Signed checkpoints of the audit trail (runtime/audit_checkpointer.h),
  // kept outside the database. Both files or neither; "" = no checkpoints
  // (a warning at start: a rewound trail would not show).
  std::string audit_checkpoint_file;
  std::string audit_signing_key_file;
  int64_t audit_checkpoint_interval_s = 60;
  // A tenant's dedicated deployment must be of a model the tenant is
  // entitled to (as shared deployments are): an operator that licenses
  // models per tenant turns this on. Off: a dedicated deployment is the
  // tenant's own server, serving whatever it names.
  bool gateway_dedicated_requires_entitlement = false;
  // Set each tenant's own `cache_salt` on chat, completions and Responses requests
  // (gateway/cache_salt.h); off only for engines that refuse the field.
  bool gateway_cache_salt = true;
  // [egress] Where a tenant's dedicated deployment may send requests (see
  // gateway/egress_policy.h). Networks in CIDR form ("10.0.0.0/8").
  // Opened beyond public addresses, e.g. the cluster network of the
  // operator's model servers; loopback, link-local, private, CGNAT and
  // unique-local addresses are closed unless opened here.
  std::vector<std::string> egress_allowed_networks;
  std::vector<std::string> egress_denied_networks;  // closed even if public or opened
  // Host patterns a tenant's endpoint host must match: "*", "*.domain", or
  // one name or address.
  std::vector<std::string> egress_allowed_hosts = {"*"};
};

Result<Config> LoadConfigFile(const std::string& path);
Result<Config> ParseConfig(const std::string& toml_text, const std::string& source_name);

// The [egress] keys as the policy's rules; kInvalidArgument naming the key
// for a network or host pattern that does not parse.
Result<gateway::EgressRules> EgressRulesOf(const Config& config);

// The [fleet] keys: discover is auto, nvml or off; the library path is not
// empty; a node name, when given, passes ValidateNodeName.
Status ValidateFleetDiscovery(const Config& config);
// [jobs] and [slurm]: a known backend, absolute paths, what slurm needs.
Status ValidateJobs(const Config& config);
// A host name fit to be a fleet node's: 1..253 of letters, digits, '-',
// '.', '_' (what hostnames hold; nothing that escapes a path or a log line).
Status ValidateNodeName(const std::string& name);

// "host:port" → parts; port 0 allowed (any free port).
Result<std::pair<std::string, int>> ParseListenAddress(const std::string& text);

// The folder of a SQLite store's database file ("sqlite:///data/atrium.db"
// → "/data"; its query string, if any, ignored); nullopt for any other
// store (PostgreSQL), which names no folder of this host.
std::optional<std::filesystem::path> SqliteDirOf(std::string_view store_url);

}  // namespace atrium
