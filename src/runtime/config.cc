#include "runtime/config.h"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "capacity/fleet_spec.h"
#include "common/strings.h"
#include "gateway/egress_policy.h"
#include "tenancy/tenant_service.h"

namespace atrium {
namespace {

// Reads declared keys from one table and rejects the rest.
class TableReader {
 public:
  TableReader(const toml::table* table, std::string name) : table_(table), name_(std::move(name)) {}

  void String(const char* key, std::string& out) {
    known_.insert(key);
    if (!table_ || error_) return;
    if (const toml::node* n = table_->get(key)) {
      if (auto v = n->value<std::string>(); v && n->is_string()) {
        out = *v;
      } else {
        Fail("'" + name_ + "." + key + "' must be a string");
      }
    }
  }
  template <typename T>
  void Int(const char* key, T& out, int64_t min, int64_t max) {
    known_.insert(key);
    if (!table_ || error_) return;
    if (const toml::node* n = table_->get(key)) {
      auto v = n->value<int64_t>();
      if (!n->is_integer() || !v) {
        Fail("'" + name_ + "." + key + "' must be an integer");
      } else if (*v < min || *v > max) {
        Fail("'" + name_ + "." + key + "' must be between " + std::to_string(min) + " and " +
             std::to_string(max));
      } else {
        out = static_cast<T>(*v);
      }
    }
  }
  void Bool(const char* key, bool& out) {
    known_.insert(key);
    if (!table_ || error_) return;
    if (const toml::node* n = table_->get(key)) {
      if (auto v = n->value<bool>(); v && n->is_boolean()) {
        out = *v;
      } else {
        Fail("'" + name_ + "." + key + "' must be true or false");
      }
    }
  }
  void StringArray(const char* key, std::vector<std::string>& out) {
    known_.insert(key);
    if (!table_ || error_) return;
    if (const toml::node* n = table_->get(key)) {
      const toml::array* array = n->as_array();
      std::vector<std::string> values;
      if (array) {
        for (const toml::node& item : *array) {
          if (!item.is_string()) {
            array = nullptr;
            break;
          }
          values.push_back(*item.value<std::string>());
        }
      }
      if (!array) {
        Fail("'" + name_ + "." + key + "' must be an array of strings");
      } else {
        out = std::move(values);
      }
    }
  }
  // A table of strings, e.g. { node-a = "10.0.0.5" }.
  void StringMap(const char* key, std::map<std::string, std::string>& out) {
    const toml::table* table = Table(key);
    if (table == nullptr || error_) return;
    std::map<std::string, std::string> values;
    for (const auto& [k, v] : *table) {
      if (!v.is_string()) {
        Fail("'" + name_ + "." + key + "' must be a table of strings");
        return;
      }
      values[std::string(k.str())] = *v.value<std::string>();
    }
    out = std::move(values);
  }
  // A sub-table; marks the key known. nullptr when absent (or not a table:
  // then an error).
  const toml::table* Table(const char* key) {
    known_.insert(key);
    if (!table_ || error_) return nullptr;
    const toml::node* n = table_->get(key);
    if (n == nullptr) return nullptr;
    if (!n->is_table()) Fail("'" + name_ + "." + key + "' must be a table");
    return n->as_table();
  }
  Status Finish() {
    if (error_) return *error_;
    if (!table_) return OkStatus();
    for (const auto& [k, v] : *table_) {
      if (!known_.contains(std::string(k.str()))) {
        return Error::InvalidArgument("unknown configuration key '" + name_ + "." +
                                      std::string(k.str()) + "'");
      }
    }
    return OkStatus();
  }

 private:
  void Fail(std::string m) {
    if (!error_) error_ = Error::InvalidArgument(std::move(m));
  }
  const toml::table* table_;
  std::string name_;
  std::set<std::string> known_;
  std::optional<Error> error_;
};

// One [serving.templates.NAME] table: an operator's serving template.
Result<serving::ServingTemplate> ReadServingTemplate(const std::string& name,
                                                     const toml::node& node) {
  const std::string where = "serving.templates." + name;
  if (!node.is_table()) return Error::InvalidArgument("'" + where + "' must be a table");
  TableReader r(node.as_table(), where);
  serving::ServingTemplate t;
  t.name = name;
  std::map<std::string, std::string> env, binds, adapter_env;
  r.String("engine", t.engine);
  r.StringArray("command", t.command);
  r.StringMap("env", env);
  r.StringMap("read_only_binds", binds);
  r.String("health_path", t.health_path);
  r.Int("readiness_timeout_s", t.readiness_timeout_s, 1, 86'400);
  r.String("metrics_path", t.metrics_path);
  r.String("running_metric", t.running_metric);
  r.Int("max_batch", t.max_batch, 1, serving::kMaxReplicaCapacity);
  r.StringArray("adapter_args", t.adapter_args);
  r.StringMap("adapter_env", adapter_env);
  r.String("adapter_load_path", t.adapter_load_path);
  r.String("adapter_unload_path", t.adapter_unload_path);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  t.env.assign(env.begin(), env.end());
  t.read_only_binds.assign(binds.begin(), binds.end());
  t.adapter_env.assign(adapter_env.begin(), adapter_env.end());
  if (Status valid = serving::ValidateTemplate(t); !valid.has_value()) {
    return Error::InvalidArgument("'" + where + "': " + valid.error().message);
  }
  return t;
}

}  // namespace

std::optional<std::filesystem::path> SqliteDirOf(std::string_view store_url) {
  constexpr std::string_view kSqlite = "sqlite://";
  if (!StartsWith(store_url, kSqlite)) return std::nullopt;
  std::string_view db_path = store_url.substr(kSqlite.size());
  db_path = db_path.substr(0, db_path.find('?'));
  return std::filesystem::path(db_path).parent_path();
}

Result<std::pair<std::string, int>> ParseListenAddress(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Error::InvalidArgument("listen address must be HOST:PORT, got '" + text + "'");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos) {
    return Error::InvalidArgument("bad port in listen address '" + text + "'");
  }
  int port = std::stoi(port_text);
  if (port > 65535) return Error::InvalidArgument("bad port in listen address '" + text + "'");
  return std::make_pair(host, port);
}

Result<Config> ParseConfig(const std::string& text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source_name << ":" << e.source().begin.line << ": " << e.description();
    return Error::InvalidArgument(msg.str());
  }
  Config c;
  static const std::set<std::string> kTables = {
      "server", "store", "api",   "auth",  "log",       "scheduler", "gateway", "audit",  "egress",
      "fleet",  "jobs",  "slurm", "scrub", "templates", "metering",  "billing", "serving"};
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (!kTables.contains(key)) {
      return Error::InvalidArgument("unknown configuration key '" + key + "'");
    }
    if (!v.is_table()) return Error::InvalidArgument("'" + key + "' must be a table");
  }
  TableReader server(root["server"].as_table(), "server");
  std::string roles = "control-plane";
  server.String("roles", roles);
  ATRIUM_RETURN_IF_ERROR(server.Finish());
  c.run_control_plane = false;
  for (std::string_view role : SplitString(roles, ',')) {
    while (!role.empty() && role.front() == ' ') role.remove_prefix(1);
    while (!role.empty() && role.back() == ' ') role.remove_suffix(1);
    if (role == "control-plane") {
      c.run_control_plane = true;
    } else if (role == "gateway") {
      c.run_gateway = true;
    } else {
      return Error::InvalidArgument("'server.roles': unknown role '" + std::string(role) +
                                    "' (control-plane, gateway)");
    }
  }
  if (!c.run_control_plane && !c.run_gateway) {
    return Error::InvalidArgument("'server.roles' names no role");
  }
  TableReader store(root["store"].as_table(), "store");
  store.String("url", c.store_url);
  store.Int("pool_size", c.store_pool_size, 1, 256);
  ATRIUM_RETURN_IF_ERROR(store.Finish());
  TableReader api(root["api"].as_table(), "api");
  api.String("listen", c.api_listen);
  api.Int("threads", c.api_threads, 1, 256);
  api.Int("max_body_bytes", c.api_max_body_bytes, 1024, int64_t{64} * 1024 * 1024);
  api.Int("read_timeout_ms", c.api_read_timeout_ms, 100, 3'600'000);
  api.Int("idle_timeout_ms", c.api_idle_timeout_ms, 100, 3'600'000);
  api.Int("max_connections", c.api_max_connections, 1, 1'000'000);
  ATRIUM_RETURN_IF_ERROR(api.Finish());
  TableReader auth(root["auth"].as_table(), "auth");
  auth.Int("access_token_ttl_s", c.access_token_ttl_s, 60, 3600);
  auth.String("signing_key_file", c.signing_key_file);
  ATRIUM_RETURN_IF_ERROR(auth.Finish());
  TableReader log(root["log"].as_table(), "log");
  log.String("level", c.log_level);
  ATRIUM_RETURN_IF_ERROR(log.Finish());
  TableReader scheduler(root["scheduler"].as_table(), "scheduler");
  scheduler.String("fleet", c.scheduler_fleet);
  scheduler.Int("grace_seconds", c.scheduler_grace_s, 0, 86'400);
  scheduler.String("policy", c.scheduler_policy);
  scheduler.Int("tick_ms", c.scheduler_tick_ms, 10, 60'000);
  scheduler.Int("max_pending_per_tenant", c.scheduler_max_pending_per_tenant, 1, 1'000'000);
  scheduler.Int("max_pending_per_project", c.scheduler_max_pending_per_project, 1, 1'000'000);
  ATRIUM_RETURN_IF_ERROR(scheduler.Finish());
  TableReader fleet(root["fleet"].as_table(), "fleet");
  fleet.String("discover", c.fleet_discover);
  fleet.String("nvml_library", c.fleet_nvml_library);
  fleet.String("node_name", c.fleet_node_name);
  fleet.Int("health_check_seconds", c.fleet_health_check_s, 0, 86'400);
  ATRIUM_RETURN_IF_ERROR(fleet.Finish());
  ATRIUM_RETURN_IF_ERROR(ValidateFleetDiscovery(c));
  TableReader jobs(root["jobs"].as_table(), "jobs");
  jobs.String("backend", c.jobs_backend);
  jobs.String("state_dir", c.jobs_state_dir);
  jobs.String("device_dir", c.jobs_device_dir);
  jobs.Bool("require_full_confinement", c.jobs_require_full_confinement);
  jobs.StringArray("full_confinement_tiers", c.jobs_full_confinement_tiers);
  jobs.Int("default_memory_mib", c.jobs_default_memory_mib, 1, int64_t{1} << 30);
  jobs.Int("tmpfs_mib", c.jobs_tmpfs_mib, 1, int64_t{1} << 30);
  jobs.Int("max_file_mib", c.jobs_max_file_mib, 0, int64_t{1} << 30);
  jobs.Int("log_retention_days", c.jobs_log_retention_days, 0, 36'500);
  jobs.Int("cancel_grace_seconds", c.jobs_cancel_grace_s, 0, 3600);
  jobs.Int("tick_ms", c.jobs_tick_ms, 10, 60'000);
  jobs.Int("max_archive_bytes", c.jobs_max_archive_bytes, 1024, int64_t{1} << 30);
  jobs.Int("max_archive_unpacked_bytes", c.jobs_max_archive_unpacked_bytes, 1024,
           int64_t{64} << 30);
  jobs.Int("max_archive_entries", c.jobs_max_archive_entries, 1, 10'000'000);
  jobs.Int("max_archives_per_tenant", c.jobs_max_archives_per_tenant, 1, 100'000);
  ATRIUM_RETURN_IF_ERROR(jobs.Finish());
  for (const auto& tier : c.jobs_full_confinement_tiers) {
    if (!IsValidTier(tier)) {
      return Error::InvalidArgument("'jobs.full_confinement_tiers' names an unknown tier '" + tier +
                                    "'");
    }
  }
  TableReader slurm(root["slurm"].as_table(), "slurm");
  slurm.String("conf", c.slurm_conf);
  slurm.String("workload_root", c.slurm_workload_root);
  slurm.String("partition", c.slurm_partition);
  slurm.String("unix_user_prefix", c.slurm_unix_user_prefix);
  slurm.Bool("create_unix_users", c.slurm_create_unix_users);
  slurm.Int("log_max_bytes", c.slurm_log_max_bytes, 0, int64_t{1} << 40);
  slurm.Int("command_timeout_ms", c.slurm_command_timeout_ms, 1000, 600'000);
  slurm.Int("tenant_sync_ms", c.slurm_tenant_sync_ms, 100, 3'600'000);
  slurm.String("ended_dir", c.slurm_ended_dir);
  ATRIUM_RETURN_IF_ERROR(slurm.Finish());
  ATRIUM_RETURN_IF_ERROR(ValidateJobs(c));
  TableReader scrub(root["scrub"].as_table(), "scrub");
  scrub.StringArray("command", c.scrub.default_command);
  scrub.Int("timeout_ms", c.scrub.timeout_ms, 100, 3'600'000);
  scrub.Int("workload_timeout_ms", c.scrub.workload_timeout_ms, 100, 86'400'000);
  scrub.Int("workers", c.scrub.workers, 1, 64);
  if (const toml::table* commands = scrub.Table("commands")) {
    TableReader per_model(commands, "scrub.commands");
    for (const auto& [model, value] : *commands) {
      const std::string name(model.str());
      per_model.StringArray(name.c_str(), c.scrub.commands[name]);
    }
    ATRIUM_RETURN_IF_ERROR(per_model.Finish());
  }
  ATRIUM_RETURN_IF_ERROR(scrub.Finish());
  if (auto valid = scheduling::ValidateScrubOptions(c.scrub); !valid.has_value()) {
    return Error::InvalidArgument("[scrub]: " + valid.error().message);
  }
  TableReader metering(root["metering"].as_table(), "metering");
  metering.Int("interval_ms", c.metering_interval_ms, 100, 3'600'000);
  metering.Int("open_lag_ms", c.metering_open_lag_ms, 0, 3'600'000);
  ATRIUM_RETURN_IF_ERROR(metering.Finish());
  TableReader billing(root["billing"].as_table(), "billing");
  billing.Int("interval_ms", c.billing_interval_ms, 100, 3'600'000);
  billing.Int("rating_lag_ms", c.billing_rating_lag_ms, 1'000, 3'600'000);
  billing.Int("finalize_after_ms", c.billing_finalize_after_ms, 0, 30LL * 86'400'000);
  ATRIUM_RETURN_IF_ERROR(billing.Finish());
  TableReader serving(root["serving"].as_table(), "serving");
  serving.Bool("enabled", c.serving_enabled);
  serving.String("platform_tenant", c.serving_platform_tenant);
  serving.Int("port_min", c.serving_port_min, 1024, 65'535);
  serving.Int("port_max", c.serving_port_max, 1024, 65'535);
  serving.String("bind_host", c.serving_bind_host);
  serving.String("node_address", c.serving_node_address);
  serving.StringMap("node_addresses", c.serving_node_addresses);
  serving.Int("tick_ms", c.serving_tick_ms, 50, 60'000);
  serving.Bool("allow_scale_to_zero", c.serving_allow_scale_to_zero);
  serving.Int("scale_up_wait_ms", c.serving_scale_up_wait_ms, 0, 600'000);
  serving.Int("scale_up_cooldown_ms", c.serving_scale_up_cooldown_ms, 0, 3'600'000);
  serving.Int("scale_down_cooldown_ms", c.serving_scale_down_cooldown_ms, 0, 86'400'000);
  serving.Int("idle_to_zero_ms", c.serving_idle_to_zero_ms, 0, 86'400'000);
  serving.Int("load_fresh_ms", c.serving_load_fresh_ms, 100, 600'000);
  serving.String("adapter_dir", c.serving_adapter_dir);
  serving.Int("max_adapters_per_tenant", c.serving_max_adapters_per_tenant, 0, 10'000);
  const toml::table* templates_table = serving.Table("templates");
  ATRIUM_RETURN_IF_ERROR(serving.Finish());
  if (templates_table != nullptr) {
    for (const auto& [key, node] : *templates_table) {
      const std::string name(key.str());
      ATRIUM_ASSIGN_OR_RETURN(serving::ServingTemplate t, ReadServingTemplate(name, node));
      c.serving_templates.push_back(std::move(t));
    }
  }
  if (!c.serving_adapter_dir.empty() && c.serving_adapter_dir.front() != '/') {
    return Error::InvalidArgument("'serving.adapter_dir' must be an absolute path");
  }
  if (c.serving_port_min > c.serving_port_max) {
    return Error::InvalidArgument("'serving.port_min' is above 'serving.port_max'");
  }
  TableReader templates(root["templates"].as_table(), "templates");
  templates.String("images_dir", c.templates_images_dir);
  ATRIUM_RETURN_IF_ERROR(templates.Finish());
  if (!c.templates_images_dir.empty() && c.templates_images_dir.front() != '/') {
    return Error::InvalidArgument("'templates.images_dir' must be an absolute directory");
  }
  TableReader gateway(root["gateway"].as_table(), "gateway");
  gateway.String("listen", c.gateway_listen);
  gateway.Int("threads", c.gateway_threads, 1, 256);
  gateway.String("journal_dir", c.gateway_journal_dir);
  gateway.String("queue", c.gateway_queue);
  gateway.Int("max_body_bytes", c.gateway_max_body_bytes, 1024, int64_t{64} * 1024 * 1024);
  gateway.Int("default_deadline_ms", c.gateway_default_deadline_ms, 1, 600'000);
  gateway.Int("policy_poll_ms", c.gateway_policy_poll_ms, 10, 10'000);
  gateway.Int("budget_sync_ms", c.gateway_budget_sync_ms, 10, 10'000);
  gateway.Int("load_report_ms", c.gateway_load_report_ms, 100, 60'000);
  gateway.Int("max_connections", c.gateway_max_connections, 1, 1'000'000);
  gateway.Int("first_byte_timeout_ms", c.gateway_first_byte_timeout_ms, 100, 3'600'000);
  gateway.Int("upstream_body_timeout_ms", c.gateway_upstream_body_timeout_ms, 100, 3'600'000);
  gateway.Int("body_memory_bytes", c.gateway_body_memory_bytes, 1024, int64_t{1} << 40);
  gateway.Int("queued_body_bytes_per_tenant", c.gateway_queued_body_bytes_per_tenant, 1024,
              int64_t{1} << 40);
  gateway.String("upstream_ca_file", c.gateway_upstream_ca_file);
  gateway.Bool("dedicated_requires_entitlement", c.gateway_dedicated_requires_entitlement);
  gateway.Bool("cache_salt", c.gateway_cache_salt);
  ATRIUM_RETURN_IF_ERROR(gateway.Finish());
  TableReader audit(root["audit"].as_table(), "audit");
  audit.String("checkpoint_file", c.audit_checkpoint_file);
  audit.String("signing_key_file", c.audit_signing_key_file);
  audit.Int("checkpoint_interval_s", c.audit_checkpoint_interval_s, 1, 86'400);
  ATRIUM_RETURN_IF_ERROR(audit.Finish());
  if (c.audit_checkpoint_file.empty() != c.audit_signing_key_file.empty()) {
    return Error::InvalidArgument(
        "'audit.checkpoint_file' and 'audit.signing_key_file' go together");
  }
  TableReader egress(root["egress"].as_table(), "egress");
  egress.StringArray("allowed_networks", c.egress_allowed_networks);
  egress.StringArray("denied_networks", c.egress_denied_networks);
  egress.StringArray("allowed_hosts", c.egress_allowed_hosts);
  ATRIUM_RETURN_IF_ERROR(egress.Finish());
  ATRIUM_RETURN_IF_ERROR(EgressRulesOf(c));
  if (c.gateway_queue != "fair" && c.gateway_queue != "fifo") {
    return Error::InvalidArgument("'gateway.queue' must be fair or fifo");
  }
  if (c.run_gateway) {
    ATRIUM_RETURN_IF_ERROR(ParseListenAddress(c.gateway_listen));
    if (c.gateway_journal_dir.empty()) {
      return Error::InvalidArgument("'gateway.journal_dir' is required with the gateway role");
    }
  }

  if (c.store_url.empty()) return Error::InvalidArgument("'store.url' is required");
  if (!StartsWith(c.store_url, "sqlite:///") && !StartsWith(c.store_url, "postgresql://") &&
      !StartsWith(c.store_url, "postgres://")) {
    return Error::InvalidArgument("'store.url' must start with sqlite:/// or postgresql://");
  }
  if (c.signing_key_file.empty()) {
    if (!StartsWith(c.store_url, "sqlite:///")) {
      return Error::InvalidArgument(
          "'auth.signing_key_file' is required with a PostgreSQL store (the same file on every "
          "server sharing it)");
    }
    c.signing_key_file = (*SqliteDirOf(c.store_url) / "signing.key").string();
  }
  ATRIUM_RETURN_IF_ERROR(ParseListenAddress(c.api_listen));
  if (!c.scheduler_fleet.empty()) {
    if (auto fleet = capacity::ParseFleetSpec(c.scheduler_fleet); !fleet.has_value()) {
      return Error::InvalidArgument("'scheduler.fleet': " + fleet.error().message);
    }
  }
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};
  if (!kLevels.contains(c.log_level)) {
    return Error::InvalidArgument(
        "'log.level' must be one of trace, debug, info, warn, error, off");
  }
  return c;
}

Status ValidateJobs(const Config& c) {
  if (c.jobs_backend != "local" && c.jobs_backend != "slurm") {
    return Error::InvalidArgument("'jobs.backend' must be local or slurm");
  }
  for (const auto& [key, path] :
       {std::pair{"jobs.state_dir", &c.jobs_state_dir},
        std::pair{"jobs.device_dir", &c.jobs_device_dir}, std::pair{"slurm.conf", &c.slurm_conf},
        std::pair{"slurm.workload_root", &c.slurm_workload_root},
        std::pair{"slurm.ended_dir", &c.slurm_ended_dir}}) {
    if (!path->empty() && path->front() != '/') {
      return Error::InvalidArgument(std::string("'") + key + "' must be an absolute path");
    }
  }
  if (c.jobs_backend == "slurm" && (c.slurm_conf.empty() || c.slurm_workload_root.empty())) {
    return Error::InvalidArgument(
        "'jobs.backend' = slurm needs 'slurm.conf' and 'slurm.workload_root'");
  }
  return OkStatus();
}

Status ValidateFleetDiscovery(const Config& c) {
  if (c.fleet_discover != "auto" && c.fleet_discover != "nvml" && c.fleet_discover != "off") {
    return Error::InvalidArgument("'fleet.discover' must be auto, nvml or off");
  }
  if (c.fleet_nvml_library.empty()) {
    return Error::InvalidArgument("'fleet.nvml_library' must not be empty");
  }
  if (!c.fleet_node_name.empty()) {
    if (auto valid = ValidateNodeName(c.fleet_node_name); !valid) {
      return Error::InvalidArgument("'fleet.node_name': " + valid.error().message);
    }
  }
  return OkStatus();
}

Status ValidateNodeName(const std::string& name) {
  if (name.empty() || name.size() > 253) {
    return Error::InvalidArgument("a node name has 1 to 253 characters");
  }
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_';
    if (!ok) {
      return Error::InvalidArgument("node name '" + name +
                                    "' may hold only letters, digits, '-', '.' and '_'");
    }
  }
  return OkStatus();
}

Result<gateway::EgressRules> EgressRulesOf(const Config& c) {
  gateway::EgressRules rules;
  for (const auto& [key, texts, out] :
       {std::tuple{"allowed_networks", &c.egress_allowed_networks, &rules.allowed_networks},
        std::tuple{"denied_networks", &c.egress_denied_networks, &rules.denied_networks}}) {
    for (const std::string& text : *texts) {
      auto network = gateway::ParseIpNetwork(text);
      if (!network.has_value()) {
        return Error::InvalidArgument(std::string("'egress.") + key +
                                      "': " + network.error().message);
      }
      out->push_back(std::move(*network));
    }
  }
  for (const std::string& pattern : c.egress_allowed_hosts) {
    if (auto valid = gateway::ValidateHostPattern(pattern); !valid.has_value()) {
      return Error::InvalidArgument("'egress.allowed_hosts': " + valid.error().message);
    }
  }
  rules.allowed_hosts = c.egress_allowed_hosts;
  return rules;
}

Result<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error::InvalidArgument("cannot read configuration file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

}  // namespace atrium
