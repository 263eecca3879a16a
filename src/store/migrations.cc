#include "store/migrations.h"

#include <string>

namespace atrium {
namespace {

struct Migration {
  int version;
  const char* name;
  // The DDL is written once in the SQL both SQLite and PostgreSQL accept
  // (TEXT, BIGINT, no serial types); a migration that needs dialect-specific
  // text sets postgres_sql.
  const char* sql;
  const char* postgres_sql = nullptr;
};

const Migration kMigrations[] = {
    {1, "identity, tenants, audit",
     R"sql(
CREATE TABLE tenants (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  display_name TEXT NOT NULL,
  tier TEXT NOT NULL,
  regions TEXT NOT NULL,
  weight BIGINT NOT NULL,
  labels TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX tenants_state ON tenants (state, id);
CREATE TABLE tenant_labels (
  tenant_id TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (tenant_id, key)
);
CREATE INDEX tenant_labels_kv ON tenant_labels (key, value, tenant_id);
CREATE TABLE users (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  username TEXT NOT NULL,
  display_name TEXT NOT NULL,
  email TEXT NOT NULL,
  role TEXT NOT NULL,
  kind TEXT NOT NULL,
  password_hash TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (tenant_id, username)
);
CREATE INDEX users_tenant ON users (tenant_id, id);
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  owner_user_id TEXT NOT NULL,
  name TEXT NOT NULL,
  role TEXT NOT NULL,
  scopes TEXT NOT NULL,
  secret_hash TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  revoked_at BIGINT NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);
CREATE INDEX api_keys_owner ON api_keys (tenant_id, owner_user_id, id);
CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  user_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (tenant_id, user_id);
CREATE TABLE signing_keys (
  id TEXT PRIMARY KEY,
  secret TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE TABLE audit_log (
  seq BIGINT PRIMARY KEY,
  chain TEXT NOT NULL,
  chain_seq BIGINT NOT NULL,
  time BIGINT NOT NULL,
  actor TEXT NOT NULL,
  actor_role TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  outcome TEXT NOT NULL,
  status BIGINT NOT NULL,
  request_id TEXT NOT NULL,
  source TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL,
  UNIQUE (chain, chain_seq)
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, seq);
CREATE TABLE audit_heads (
  chain TEXT PRIMARY KEY,
  chain_seq BIGINT NOT NULL,
  hash TEXT NOT NULL
);
CREATE TABLE audit_counter (
  id BIGINT PRIMARY KEY,
  last_seq BIGINT NOT NULL
);
INSERT INTO audit_counter (id, last_seq) VALUES (1, 0);
)sql"},
    {2, "GPU fleet, quotas, projects, allocations",
     R"sql(
CREATE TABLE fleet (
  id BIGINT PRIMARY KEY,
  spec TEXT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE TABLE fleet_sites (
  name TEXT PRIMARY KEY,
  ord BIGINT NOT NULL,
  region TEXT NOT NULL,
  power_budget_watts BIGINT NOT NULL
);
CREATE TABLE fleet_racks (
  name TEXT PRIMARY KEY,
  ord BIGINT NOT NULL,
  site TEXT NOT NULL,
  power_budget_watts BIGINT NOT NULL
);
CREATE TABLE fleet_pools (
  name TEXT PRIMARY KEY,
  ord BIGINT NOT NULL,
  region TEXT NOT NULL,
  site TEXT NOT NULL,
  labels TEXT NOT NULL,
  dedicated_tenant TEXT NOT NULL,
  allowed_tenants TEXT NOT NULL
);
CREATE TABLE fleet_nodes (
  name TEXT PRIMARY KEY,
  ord BIGINT NOT NULL,
  pool TEXT NOT NULL,
  rack TEXT NOT NULL,
  cpu_milli BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  gpu_model TEXT NOT NULL,
  gpu_count BIGINT NOT NULL,
  nvlink_groups TEXT NOT NULL,
  idle_power_watts BIGINT NOT NULL,
  cordoned BIGINT NOT NULL,
  draining BIGINT NOT NULL
);
CREATE TABLE fleet_gpus (
  node TEXT NOT NULL,
  idx BIGINT NOT NULL,
  model TEXT NOT NULL,
  memory_mib BIGINT NOT NULL,
  mig_enabled BIGINT NOT NULL,
  healthy BIGINT NOT NULL,
  cordoned BIGINT NOT NULL,
  PRIMARY KEY (node, idx)
);
CREATE TABLE quotas (
  tenant_id TEXT NOT NULL,
  project TEXT NOT NULL,
  model TEXT NOT NULL,
  kind TEXT NOT NULL,
  guarantee_milli BIGINT NOT NULL,
  limit_milli BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, project, model, kind)
);
CREATE TABLE projects (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, name)
);
CREATE TABLE allocations (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  project TEXT NOT NULL,
  kind TEXT NOT NULL,
  priority TEXT NOT NULL,
  model TEXT NOT NULL,
  gpus BIGINT NOT NULL,
  nodes BIGINT NOT NULL,
  mig_profile TEXT NOT NULL,
  milli BIGINT NOT NULL,
  gpu_memory_mib BIGINT NOT NULL,
  cpu_milli BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  pool TEXT NOT NULL,
  region TEXT NOT NULL,
  state TEXT NOT NULL,
  seq BIGINT NOT NULL,
  submitted_ms BIGINT NOT NULL,
  placed_ms BIGINT NOT NULL,
  placement TEXT NOT NULL,
  mig_start BIGINT NOT NULL,
  charge_milli BIGINT NOT NULL,
  preempt_at_ms BIGINT NOT NULL,
  preempted_for TEXT NOT NULL,
  reason TEXT NOT NULL,
  ended_ms BIGINT NOT NULL,
  created_by TEXT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX allocations_tenant ON allocations (tenant_id, id);
CREATE INDEX allocations_state ON allocations (state, seq);
)sql"},
    {3, "inference gateway: deployments, entitlements, limits, usage",
     R"sql(
CREATE TABLE deployments (
  id TEXT PRIMARY KEY,
  model TEXT NOT NULL,
  version TEXT NOT NULL,
  endpoints TEXT NOT NULL,
  region TEXT NOT NULL,
  latency_tier TEXT NOT NULL,
  visibility TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX deployments_model ON deployments (model, id);
CREATE INDEX deployments_tenant ON deployments (tenant_id, id);
CREATE TABLE entitlements (
  tenant_id TEXT NOT NULL,
  model TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, model)
);
CREATE TABLE gateway_limits (
  tenant_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  requests_per_minute BIGINT NOT NULL,
  tokens_per_minute BIGINT NOT NULL,
  max_concurrent BIGINT NOT NULL,
  max_queued BIGINT NOT NULL,
  priority TEXT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, key_id)
);
CREATE TABLE usage_records (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  endpoint TEXT NOT NULL,
  api TEXT NOT NULL,
  stream BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  cached_tokens BIGINT NOT NULL,
  queue_ms BIGINT NOT NULL,
  ttft_ms BIGINT NOT NULL,
  total_ms BIGINT NOT NULL,
  status TEXT NOT NULL,
  http_status BIGINT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX usage_records_tenant ON usage_records (tenant_id, created_at, id);
CREATE TABLE gateway_policy_version (
  id BIGINT PRIMARY KEY,
  version BIGINT NOT NULL
);
INSERT INTO gateway_policy_version (id, version) VALUES (1, 0);
)sql"},
    // Usage records flag implausible upstream reports, and hold token counts
    // of at most 2^32 - 1 each (kMaxRecordTokens), so that SUMs cannot
    // overflow: rows written before are brought under the bound (and
    // flagged). Refusals are counted per tenant, key, reason and minute.
    {4, "gateway: bounded usage, refusal counts",
     R"sql(
ALTER TABLE usage_records ADD COLUMN flag TEXT NOT NULL DEFAULT '';
UPDATE usage_records SET flag = 'usage_over_bound',
  input_tokens = CASE WHEN input_tokens > 4294967295 THEN 4294967295
                      WHEN input_tokens < 0 THEN 0 ELSE input_tokens END,
  output_tokens = CASE WHEN output_tokens > 4294967295 THEN 4294967295
                       WHEN output_tokens < 0 THEN 0 ELSE output_tokens END,
  cached_tokens = CASE WHEN cached_tokens > 4294967295 THEN 4294967295
                       WHEN cached_tokens < 0 THEN 0 ELSE cached_tokens END
  WHERE input_tokens > 4294967295 OR output_tokens > 4294967295 OR cached_tokens > 4294967295
     OR input_tokens < 0 OR output_tokens < 0 OR cached_tokens < 0;
CREATE TABLE gateway_refusals (
  tenant_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  reason TEXT NOT NULL,
  minute_at BIGINT NOT NULL,
  requests BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, minute_at, key_id, reason)
);
)sql"},
    {5, "evicted tenants: what staff read of a tenant whose history is kept",
     R"sql(
CREATE TABLE evicted_tenants (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  display_name TEXT NOT NULL,
  tier TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  evicted_at BIGINT NOT NULL
);
)sql"},
    // Expired login sessions are purged by expires_at (identity service,
    // at most once a minute by a login); the index keeps that a range delete.
    {6, "sessions: index on expiry for the purge", R"sql(
CREATE INDEX sessions_expiry ON sessions (expires_at);
)sql"},
    // An allocation on a draining node or an unhealthy GPU is asked to move;
    // the request is kept with it so a restart asks only for moves nobody
    // asked for yet (and the API and `why` can show it).
    {7, "allocations: the move request of work on a draining node or unhealthy GPU", R"sql(
ALTER TABLE allocations ADD COLUMN move_requested TEXT NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN move_requested_ms BIGINT NOT NULL DEFAULT -1;
)sql"},
    // A tenant row is written only over the version it was read at, so a
    // concurrent update never undoes a suspension (tenant service).
    {8, "tenants: a version for compare-and-set updates", R"sql(
ALTER TABLE tenants ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
)sql"},
    // Jobs (src/jobs): a tenant's workloads, one row each, and their
    // transitions, appended and never changed. The idempotency key is
    // unique per tenant where set, so a retried submission finds its job.
    {9, "jobs and their events", R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  project TEXT NOT NULL,
  name TEXT NOT NULL,
  created_by TEXT NOT NULL,
  state TEXT NOT NULL,
  attempt BIGINT NOT NULL,
  restarts BIGINT NOT NULL,
  allocation_id TEXT NOT NULL,
  spec TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  exit_code BIGINT NOT NULL,
  signal BIGINT NOT NULL,
  reason TEXT NOT NULL,
  stop_cause TEXT NOT NULL,
  stop_by TEXT NOT NULL,
  stop_deadline_ms BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  started_ms BIGINT NOT NULL,
  ended_ms BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX jobs_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_allocation ON jobs (allocation_id);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant_id, idempotency_key)
  WHERE idempotency_key <> '';
CREATE TABLE job_events (
  job_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  tenant_id TEXT NOT NULL,
  time BIGINT NOT NULL,
  attempt BIGINT NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL,
  actor TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
);
)sql"},
    // A GPU an ended allocation held is kept from new work until its scrub
    // finished; the hold is stored so that a restart mid-scrub never hands
    // out a GPU that may still hold the last tenant's data.
    {10, "gpu_scrubs: GPUs held for their scrub after an allocation ended", R"sql(
CREATE TABLE gpu_scrubs (
  node TEXT NOT NULL,
  gpu BIGINT NOT NULL,
  allocation_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  model TEXT NOT NULL,
  mig_profile TEXT NOT NULL,
  mig_start BIGINT NOT NULL,
  milli BIGINT NOT NULL,
  gpu_memory_mib BIGINT NOT NULL,
  since_ms BIGINT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  PRIMARY KEY (node, gpu, allocation_id)
);
)sql"},
    // Environment templates require minimum driver and CUDA versions: nodes
    // carry theirs, and an allocation keeps the requirements it was asked
    // with so a restart places it on the same terms. A fleet built from a
    // spec before this migration is simulated: it gets the versions a
    // simulated node reports (capacity::kSimulatedDriverVersion / CUDA).
    {11, "environment templates; node GPU software; allocations' node requirements", R"sql(
ALTER TABLE fleet_nodes ADD COLUMN driver_version TEXT NOT NULL DEFAULT '';
ALTER TABLE fleet_nodes ADD COLUMN cuda_version TEXT NOT NULL DEFAULT '';
UPDATE fleet_nodes SET driver_version = '550.54.15', cuda_version = '12.4'
  WHERE EXISTS (SELECT 1 FROM fleet WHERE id = 1 AND spec <> '');
ALTER TABLE allocations ADD COLUMN min_driver_version TEXT NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN min_cuda_version TEXT NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN required_gpu_models TEXT NOT NULL DEFAULT '[]';
CREATE TABLE environment_templates (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version BIGINT NOT NULL,
  description TEXT NOT NULL,
  rootfs_digest TEXT NOT NULL,
  env TEXT NOT NULL,
  min_driver_version TEXT NOT NULL,
  min_cuda_version TEXT NOT NULL,
  gpu_models TEXT NOT NULL,
  state TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, name, version)
);
CREATE INDEX environment_templates_name ON environment_templates (name);
)sql"},
    // GPU time held, per subject (allocation or job) and hour, written by
    // the meter (src/metering) exactly once: the id is derived from the
    // subject and the record's start, so a record written twice is stored
    // once. Kept when the tenant is evicted (billing records).
    {12, "gpu_usage_records: GPU time held per allocation or job and hour", R"sql(
CREATE TABLE gpu_usage_records (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  project TEXT NOT NULL,
  subject_kind TEXT NOT NULL,
  subject_id TEXT NOT NULL,
  model TEXT NOT NULL,
  kind TEXT NOT NULL,
  mig_profile TEXT NOT NULL,
  milli BIGINT NOT NULL,
  from_ms BIGINT NOT NULL,
  to_ms BIGINT NOT NULL,
  gpu_milli_ms BIGINT NOT NULL,
  closes_subject INTEGER NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX gpu_usage_tenant_time ON gpu_usage_records (tenant_id, from_ms);
CREATE INDEX gpu_usage_subject ON gpu_usage_records (subject_kind, subject_id, to_ms);
)sql"},
    // Archives tenants upload for their jobs (src/jobs/archive_service.h):
    // the bytes are files of the control plane; a row per archive says
    // whose it is. Deleted with the tenant.
    {13, "job_archives: tenants' uploaded working files", R"sql(
CREATE TABLE job_archives (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  size_bytes BIGINT NOT NULL,
  unpacked_bytes BIGINT NOT NULL,
  entries BIGINT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX job_archives_tenant ON job_archives (tenant_id, id);
)sql"},
    // A job's runs, one per attempt (the job row shows only its current
    // one): what the GPU meter records per job, a requeued attempt
    // included. Kept when the tenant is evicted, like the allocations whose
    // records may still be due. Jobs that started before this migration
    // keep their current attempt's run; earlier attempts' times were never
    // stored (their allocations were billed all the same).
    {14, "job_runs: when each attempt of a job ran, on which allocation", R"sql(
CREATE TABLE job_runs (
  job_id TEXT NOT NULL,
  attempt BIGINT NOT NULL,
  tenant_id TEXT NOT NULL,
  project TEXT NOT NULL,
  allocation_id TEXT NOT NULL,
  started_ms BIGINT NOT NULL,
  ended_ms BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (job_id, attempt)
);
CREATE INDEX job_runs_tenant ON job_runs (tenant_id, job_id);
CREATE INDEX job_runs_ended ON job_runs (ended_ms, updated_at);
INSERT INTO job_runs (job_id, attempt, tenant_id, project, allocation_id, started_ms, ended_ms,
                      updated_at)
  SELECT id, attempt, tenant_id, project, allocation_id, started_ms, ended_ms, updated_at
  FROM jobs WHERE started_ms >= 0;
)sql"},
    // Managed deployments (src/serving): a deployment's serving spec
    // ("" = external) and its replicas, each a job of the tenant that runs
    // it. A replica row outlives its deployment until the controller has
    // stopped its job; rows of a deleted tenant go with it.
    {15, "managed deployments: serving specs and replicas", R"sql(
ALTER TABLE deployments ADD COLUMN serving TEXT NOT NULL DEFAULT '';
CREATE TABLE deployment_replicas (
  id TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  job_id TEXT NOT NULL,
  port BIGINT NOT NULL,
  url TEXT NOT NULL,
  state TEXT NOT NULL,
  generation BIGINT NOT NULL,
  health_failures BIGINT NOT NULL,
  reason TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  ready_at BIGINT NOT NULL,
  drain_started_at BIGINT NOT NULL,
  ended_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX deployment_replicas_deployment ON deployment_replicas (deployment_id, id);
CREATE INDEX deployment_replicas_state ON deployment_replicas (state, id);
)sql"},
    // The spec each replica was started with: a version that never becomes
    // ready is rolled back to what the ready replicas run.
    // GPU usage records name the managed deployment whose replica held the
    // time ("" for any other allocation or job), found through the
    // replica's job when the meter writes them.
    {16, "managed deployments: each replica's spec; GPU usage by deployment", R"sql(
ALTER TABLE deployment_replicas ADD COLUMN spec TEXT NOT NULL DEFAULT '';
CREATE INDEX deployment_replicas_job ON deployment_replicas (job_id);
ALTER TABLE gpu_usage_records ADD COLUMN deployment_id TEXT NOT NULL DEFAULT '';
)sql"},
    // What drove a decision the platform took by itself, kept in its audit
    // record (hashed only when present: older records verify unchanged).
    // What each gateway saw of each deployment, newest only: the
    // autoscaler's signals, summed over the gateways that reported lately.
    {17, "audit detail; deployment load per gateway", R"sql(
ALTER TABLE audit_log ADD COLUMN detail TEXT NOT NULL DEFAULT '';
CREATE TABLE deployment_load (
  deployment_id TEXT NOT NULL,
  gateway_id TEXT NOT NULL,
  queued BIGINT NOT NULL,
  oldest_wait_ms BIGINT NOT NULL,
  in_flight BIGINT NOT NULL,
  reported_at BIGINT NOT NULL,
  PRIMARY KEY (deployment_id, gateway_id)
);
CREATE INDEX deployment_load_reported ON deployment_load (reported_at);
)sql"},
    // Tenants' LoRA adapters on managed deployments (src/serving/adapters.h):
    // deleted with their deployment and with their tenant.
    {18, "adapters: tenants' LoRA adapters on managed deployments", R"sql(
CREATE TABLE adapters (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  name TEXT NOT NULL,
  artifact TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  status TEXT NOT NULL,
  detail TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX adapters_name ON adapters (deployment_id, tenant_id, name);
CREATE INDEX adapters_tenant ON adapters (tenant_id, id);
)sql"},
    // Billing (src/billing, docs/billing.md): price books and their
    // versions, tenants' billing plans, usage rated once per record and
    // meter, finalised invoices numbered without gaps. Usage records say
    // whether they were rated, in the transaction that rates them. Kept
    // when a tenant is evicted (billing records).
    {19, "billing: price books, plans, rated usage, invoices", R"sql(
CREATE TABLE price_books (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  currency TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE TABLE price_book_versions (
  book_id TEXT NOT NULL,
  version BIGINT NOT NULL,
  effective_from BIGINT NOT NULL,
  minimum_charge_minor BIGINT NOT NULL,
  entries TEXT NOT NULL,
  note TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (book_id, version)
);
CREATE TABLE billing_plans (
  tenant_id TEXT NOT NULL,
  version BIGINT NOT NULL,
  effective_from BIGINT NOT NULL,
  price_book_id TEXT NOT NULL,
  anchor_day BIGINT NOT NULL,
  discount_bp BIGINT NOT NULL,
  commitment_minor BIGINT NOT NULL,
  entries TEXT NOT NULL,
  note TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, version)
);
CREATE TABLE rated_usage (
  tenant_id TEXT NOT NULL,
  source TEXT NOT NULL,
  record_id TEXT NOT NULL,
  meter TEXT NOT NULL,
  item TEXT NOT NULL,
  price_ref TEXT NOT NULL,
  quantity BIGINT NOT NULL,
  usage_at BIGINT NOT NULL,
  usage_period BIGINT NOT NULL,
  invoice_period BIGINT NOT NULL,
  project TEXT NOT NULL,
  key_id TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  rated_at BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, source, record_id, meter)
);
CREATE INDEX rated_usage_invoice ON rated_usage (tenant_id, invoice_period);
CREATE TABLE billing_accounts (
  tenant_id TEXT PRIMARY KEY,
  finalized_through BIGINT NOT NULL
);
CREATE TABLE invoices (
  id TEXT PRIMARY KEY,
  number BIGINT NOT NULL UNIQUE,
  tenant_id TEXT NOT NULL,
  period_start BIGINT NOT NULL,
  period_end BIGINT NOT NULL,
  currency TEXT NOT NULL,
  total_minor BIGINT NOT NULL,
  document TEXT NOT NULL,
  finalized_at BIGINT NOT NULL,
  UNIQUE (tenant_id, period_start)
);
CREATE TABLE invoice_sequence (
  id BIGINT PRIMARY KEY,
  last_number BIGINT NOT NULL
);
INSERT INTO invoice_sequence (id, last_number) VALUES (1, 0);
ALTER TABLE usage_records ADD COLUMN rated BIGINT NOT NULL DEFAULT 0;
CREATE INDEX usage_records_unrated ON usage_records (created_at) WHERE rated = 0;
ALTER TABLE gpu_usage_records ADD COLUMN rated BIGINT NOT NULL DEFAULT 0;
CREATE INDEX gpu_usage_unrated ON gpu_usage_records (created_at) WHERE rated = 0;
)sql"},
    // Budgets (src/billing/budget.h, docs/billing.md): caps per tenant,
    // project or API key and period; where each stands, as the billing
    // service computes it; and what each gateway holds against them in
    // flight. Deleted with the tenant.
    {20, "billing: budgets, their status and gateways' holds", R"sql(
CREATE TABLE budgets (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  subject TEXT NOT NULL,
  currency TEXT NOT NULL,
  amount_minor BIGINT NOT NULL,
  thresholds TEXT NOT NULL,
  hard BIGINT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (tenant_id, scope, subject)
);
CREATE TABLE budget_status (
  budget_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  period_start BIGINT NOT NULL,
  period_end BIGINT NOT NULL,
  spent_minor BIGINT NOT NULL,
  notified_percent BIGINT NOT NULL,
  computed_at BIGINT NOT NULL
);
CREATE TABLE budget_holds (
  holder TEXT NOT NULL,
  budget_id TEXT NOT NULL,
  amount_minor BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (holder, budget_id)
);
)sql"},
    // Credits (src/billing/credit.h): prepaid money and grants a tenant's
    // final invoices use up, what each paid of which invoice, and prepaid
    // plans. Kept when a tenant is evicted (billing records).
    {21, "billing: credit grants, their applications, prepaid plans", R"sql(
CREATE TABLE credit_grants (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  currency TEXT NOT NULL,
  amount_minor BIGINT NOT NULL,
  remaining_minor BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  note TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX credit_grants_tenant ON credit_grants (tenant_id);
CREATE TABLE credit_applications (
  invoice_id TEXT NOT NULL,
  grant_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  amount_minor BIGINT NOT NULL,
  applied_at BIGINT NOT NULL,
  PRIMARY KEY (invoice_id, grant_id)
);
ALTER TABLE billing_plans ADD COLUMN prepaid BIGINT NOT NULL DEFAULT 0;
)sql"},
};

}  // namespace

int LatestSchemaVersion() { return kMigrations[std::size(kMigrations) - 1].version; }

Status ApplyMigrations(sql::Database& db) {
  auto created = db.Exec(
      "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT "
      "NULL, applied_at BIGINT NOT NULL)");
  if (!created.has_value()) return std::move(created).error();
  for (const auto& m : kMigrations) {
    auto applied = db.Transact<bool>([&](sql::Connection& c) -> Result<bool> {
      if (c.dialect() == sql::Dialect::kPostgres) {
        // Serialize concurrent starts of several servers on one database.
        ATRIUM_RETURN_IF_ERROR(c.Exec("LOCK TABLE schema_migrations IN EXCLUSIVE MODE", {}));
      }
      ATRIUM_ASSIGN_OR_RETURN(
          auto rows,
          c.Exec("SELECT 1 FROM schema_migrations WHERE version = $1", {int64_t{m.version}}));
      if (!rows.rows.empty()) return false;
      const char* text =
          (c.dialect() == sql::Dialect::kPostgres && m.postgres_sql) ? m.postgres_sql : m.sql;
      ATRIUM_RETURN_IF_ERROR(c.ExecScript(text));
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, 0)",
                 {int64_t{m.version}, std::string(m.name)}));
      return true;
    });
    if (!applied.has_value()) {
      Error e = std::move(applied).error();
      e.message = "migration " + std::to_string(m.version) + " (" + m.name + "): " + e.message;
      return e;
    }
  }
  return OkStatus();
}

}  // namespace atrium
