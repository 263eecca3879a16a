// The store: every durable row of the control plane goes through here.
//
// Tenant-owned rows (users, API keys, sessions) are read and written only
// through methods that take a TenantScope; the scope's tenant id is part of
// every WHERE clause, so a handler cannot reach another tenant's row by
// passing its id. The few unscoped lookups (by API-key id, by session id)
// exist for authentication, which is how a request learns its tenant; the
// others are named for their only caller (...ForScheduler, ...ForPlatform,
// ...ForGateway).
//
// Errors: kNotFound for a missing row (or one in another scope),
// kAlreadyExists for a taken unique name, kUnavailable when the database is
// unreachable. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/billing_records.h"
#include "model/gateway_records.h"
#include "model/job_records.h"
#include "model/metering_records.h"
#include "model/records.h"
#include "store/queries.h"
#include "store/sql.h"

namespace atrium {

// Versions one owner (a tenant, or the platform) may hold, retired ones
// included: a tenant cannot grow the store without bound.
inline constexpr int64_t kMaxEnvironmentTemplateVersions = 1000;

struct TenantFilter {
  std::string state;      // "" = any
  std::string label_key;  // "" = no label filter
  std::string label_value;
};

// Counts of what an eviction removed, and of the records it kept.
struct EvictionSummary {
  int64_t users = 0;
  int64_t api_keys = 0;
  int64_t sessions = 0;
  int64_t deployments = 0;  // the tenant's dedicated deployments
  int64_t entitlements = 0;
  int64_t gateway_limits = 0;  // the tenant's row and its keys' rows
  // Kept, under the evicted tenant's id, for platform staff: allocation
  // history (rows, held or ended; held ones are ended as released) and
  // usage records.
  int64_t allocations_kept = 0;
  int64_t usage_records_kept = 0;
  // Jobs and their events: deleted (commands and env may hold secrets; the
  // usage records keep what they cost). Their runs (job_runs: times and
  // allocation ids only) are kept, so the meter can still close them.
  int64_t jobs = 0;
  int64_t job_archives = 0;  // their rows; the files go with the job service's
  int64_t adapters = 0;      // their rows; the files go with their deployments'
};

struct DeploymentFilter {
  std::string model;  // "" = any
};

class Store {
 public:
  // Opens the database at `url` (sqlite:///path or postgresql://...) and
  // applies migrations.
  static Result<std::unique_ptr<Store>> Open(const std::string& url, int pool_size = 4);

  explicit Store(std::unique_ptr<sql::Database> db);
  sql::Dialect dialect() const { return db_->dialect(); }

  // --- Tenants (rows owned by the platform) ---
  Status CreateTenant(const Tenant& t);
  Result<Tenant> GetTenant(const std::string& id);
  Result<Tenant> GetTenantByName(const std::string& name);
  Result<Page<Tenant>> ListTenants(const TenantFilter& filter, const ListOptions& opts);
  // Replaces every mutable field of the tenant with id t.id if its stored
  // version is still t.version (compare-and-set), and bumps the version:
  // true when written; false when the row changed since t was read (nothing
  // is written; read it again and redo the change). kNotFound for an
  // unknown tenant.
  [[nodiscard]] Result<bool> UpdateTenant(const Tenant& t);
  Result<int64_t> CountTenants();
  // Removes the tenant row and every row it owns in one transaction, except
  // the records an operator must keep for accounting: audit records, usage
  // records and allocation history stay under the tenant's id (held
  // allocations are ended as released at `evicted_at`), and an
  // evicted_tenants row lets platform staff still find the tenant
  // (GetEvictedTenantForPlatform). The name is free for a new tenant, which
  // gets a new id and inherits nothing. kNotFound for an unknown tenant.
  Result<EvictionSummary> DeleteTenantAndData(const std::string& tenant_id, int64_t evicted_at = 0);
  // An evicted tenant as staff see it: id, name, display name, tier,
  // created_at, state "evicted", updated_at = when it was evicted.
  // kNotFound when no tenant of that id was evicted.
  Result<Tenant> GetEvictedTenantForPlatform(const std::string& id);

  // --- Users (tenant-owned) ---
  Status CreateUser(const User& u);  // u.tenant_id must equal the scope used later
  Result<User> GetUser(const TenantScope& scope, const std::string& id);
  Result<User> GetUserByName(const TenantScope& scope, const std::string& username);
  Result<Page<User>> ListUsers(const TenantScope& scope, const ListOptions& opts);
  Status UpdateUser(const TenantScope& scope, const User& u);
  Status DeleteUser(const TenantScope& scope, const std::string& id);  // and its keys, sessions

  // --- API keys (tenant-owned) ---
  Status CreateApiKey(const ApiKey& k);
  Result<ApiKey> GetApiKey(const TenantScope& scope, const std::string& id);
  // Authentication only: the key id is globally unique.
  Result<ApiKey> FindApiKeyForAuth(const std::string& id);
  // owner_user_id "" = all keys of the tenant.
  Result<Page<ApiKey>> ListApiKeys(const TenantScope& scope, const std::string& owner_user_id,
                                   const ListOptions& opts);
  Status RevokeApiKey(const TenantScope& scope, const std::string& id, int64_t at);

  // --- Sessions (tenant-owned) ---
  Status CreateSession(const Session& s);
  Result<Session> FindSessionForAuth(const std::string& id);
  Status DeleteSession(const TenantScope& scope, const std::string& id);
  Result<int64_t> DeleteSessionsOfUser(const TenantScope& scope, const std::string& user_id);
  // Housekeeping across tenants: removes sessions whose expires_at is at or
  // before `now_ms`; returns how many.
  Result<int64_t> DeleteExpiredSessionsForHousekeeping(int64_t now_ms);

  // --- Token signing keys (platform) ---
  Status AddSigningKey(const SigningKey& k);
  Result<std::vector<SigningKey>> ListSigningKeys();  // newest first
  // Rewrites a key's stored secret (sealing a plaintext one in place).
  Status ReplaceSigningKeySecret(const std::string& id, const std::string& secret);
  Status DeleteSigningKey(const std::string& id);

  // --- GPU fleet (platform) ---
  // The stored fleet, or nullopt when none was stored yet.
  Result<std::optional<FleetRecord>> LoadFleet();
  // Replaces the whole stored fleet (sites, racks, pools, nodes, GPUs) in one
  // transaction.
  Status ReplaceFleet(const FleetRecord& fleet);

  // --- Quotas and projects (tenant-owned) ---
  // The tenant's quota rows, its own and its projects', ordered by project,
  // model, kind.
  Result<std::vector<QuotaRecord>> ListQuotas(const TenantScope& scope);
  Result<std::vector<ProjectRecord>> ListProjects(const TenantScope& scope);
  Result<ProjectRecord> GetProject(const TenantScope& scope, const std::string& name);
  // Every tenant's rows, for the scheduler's start-up and the execution
  // backend's tenant sync (platform only).
  Result<std::vector<QuotaRecord>> ListAllQuotasForScheduler();
  Result<std::vector<ProjectRecord>> ListAllProjectsForScheduler();

  // --- Allocations (tenant-owned) ---
  Result<AllocationRecord> GetAllocation(const TenantScope& scope, const std::string& id);
  // Platform callers, who may act on any tenant's allocation: finds it by
  // its globally unique id. Never used with a tenant principal.
  Result<AllocationRecord> GetAllocationForPlatform(const std::string& id);
  // filter.tenant_id is ignored: the scope decides. Keyset-paginated by id.
  Result<Page<AllocationRecord>> ListAllocations(const TenantScope& scope,
                                                 const AllocationFilter& filter,
                                                 const ListOptions& opts);
  // Platform listing across tenants (filter.tenant_id "" = every tenant).
  Result<Page<AllocationRecord>> ListAllocationsForPlatform(const AllocationFilter& filter,
                                                            const ListOptions& opts);
  // Every held allocation (pending, running, preempting) in submission
  // order, for the scheduler's Restore at start-up.
  Result<std::vector<AllocationRecord>> ListHeldAllocationsForScheduler();
  // The newest `limit` allocations of every tenant, held or ended, oldest
  // first: the request mix the scheduler's placement policy targets.
  Result<std::vector<AllocationRecord>> ListRecentAllocationsForScheduler(int64_t limit);

  // Every GPU scrub hold (scrubbing or failed) by node, GPU and allocation,
  // for the scheduler's Restore at start-up and the scrub runner.
  Result<std::vector<GpuScrubRecord>> ListGpuScrubsForScheduler();

  // Applies one scheduling call's changes and audit records atomically.
  Status CommitScheduling(const SchedulingCommit& commit);
  // The GPU meter's reads (src/metering): every allocation that was placed
  // and whose closing GPU usage record is not stored yet, and that is still
  // held, or has some records (a catch-up under way), or whose row changed
  // at or after `changed_since_ms` (0: every one), ordered by id. Never-placed (pending, rejected)
  // allocations are not billed and never listed.
  Result<std::vector<AllocationToMeter>> ListAllocationsToMeterForMetering(
      int64_t changed_since_ms);

  // --- Model deployments (shared: the platform's; dedicated: tenant-owned) ---
  // A shared deployment has tenant_id "" and belongs to the platform scope;
  // a dedicated one belongs to its tenant. Errors: kAlreadyExists for a
  // taken id.
  Status CreateDeployment(const DeploymentRecord& d);
  // What `scope` may use: for a tenant, its own dedicated deployments and the
  // shared deployments of models it is entitled to; for the platform scope,
  // the shared deployments. Anything else is kNotFound.
  Result<DeploymentRecord> GetDeployment(const TenantScope& scope, const std::string& id);
  // Platform staff, who may act on any deployment: by its globally unique
  // id. Never used with a tenant principal.
  Result<DeploymentRecord> GetDeploymentForPlatform(const std::string& id);
  // The deployments GetDeployment(scope, ...) finds, keyset-paginated by id.
  Result<Page<DeploymentRecord>> ListDeployments(const TenantScope& scope,
                                                 const DeploymentFilter& filter,
                                                 const ListOptions& opts);
  // Platform staff: every deployment, shared and dedicated.
  Result<Page<DeploymentRecord>> ListDeploymentsForPlatform(const DeploymentFilter& filter,
                                                            const ListOptions& opts);
  // Replaces model, version, endpoints, region, latency tier and updated_at
  // of the deployment d.id that `scope` owns (platform scope: a shared one;
  // a tenant: its dedicated one). Visibility and tenant never change.
  // A managed deployment's endpoints stay as the serving controller set
  // them; its serving spec is replaced.
  Status UpdateDeployment(const TenantScope& scope, const DeploymentRecord& d);
  Status DeleteDeployment(const TenantScope& scope, const std::string& id);

  // --- Managed deployments' replicas (src/serving; the serving controller
  // is their one writer, the API reads them through a deployment it found).
  // Every managed deployment, shared and dedicated (the controller's
  // unscoped read).
  Result<std::vector<DeploymentRecord>> ListManagedDeploymentsForServing();
  // Replaces the endpoints of managed deployment `id`; NotFound when there
  // is none (deleted, or external).
  Status SetManagedEndpoints(const std::string& id,
                             const std::vector<DeploymentEndpoint>& endpoints, int64_t at);
  // Sets managed deployment `id`'s serving spec to `next` if it is still
  // `expected` (the serving controller's roll back, which a PATCH between
  // its read and its write must win), with `audit`, in one transaction.
  // FailedPrecondition when it changed or is gone.
  Status ReplaceServing(const std::string& id, const std::string& expected, const std::string& next,
                        int64_t at, const AuditRecord& audit);
  Status CreateReplica(const DeploymentReplicaRecord& r);
  Status UpdateReplica(const DeploymentReplicaRecord& r);  // NotFound when gone
  // Every replica not ended, of every deployment (the controller's round).
  Result<std::vector<DeploymentReplicaRecord>> ListLiveReplicasForServing();
  // A deployment's replicas, live first, newest first, at most `limit`.
  Result<std::vector<DeploymentReplicaRecord>> ListReplicas(const std::string& deployment_id,
                                                            int limit = 200);
  Status DeleteEndedReplicas(int64_t ended_before_ms);

  // --- Deployment load: what each gateway saw of each deployment, its
  // newest report only (the autoscaler's signals). Reports older than
  // `forget_before_ms` are forgotten (gateways gone) in the same
  // transaction. InvalidArgument, storing nothing, for more than
  // kMaxLoadReports reports, an empty id, or a count outside
  // 0..kMaxLoadCount.
  static constexpr size_t kMaxLoadReports = 10'000;
  static constexpr int64_t kMaxLoadCount = 1'000'000'000;
  Status ReportDeploymentLoad(const std::vector<DeploymentLoadReport>& reports,
                              int64_t forget_before_ms);
  // The reports on `deployment_id` made at or after `since_ms`, summed.
  Result<DeploymentLoadTotals> DeploymentLoadForServing(const std::string& deployment_id,
                                                        int64_t since_ms);

  // --- Environment templates (tenant_id "": the platform's, which every
  // tenant sees; otherwise visible only to its tenant). Rules in templates/.
  // Publishes the next version of `scope`'s template t.name: one more than
  // any version that name ever had in the scope (retired ones count), so a
  // version is never reused; the stored record is returned. Refused with
  // kAlreadyExists when the name is the other side's (a tenant's name the
  // platform holds, or a platform name some tenant holds): a name means one
  // template family in every tenant's view. kFailedPrecondition when the
  // scope already holds kMaxEnvironmentTemplateVersions versions.
  // t.tenant_id and t.version are ignored: the scope and the store decide.
  Result<EnvironmentTemplateRecord> PublishEnvironmentTemplate(const TenantScope& scope,
                                                               EnvironmentTemplateRecord t);
  // Every version named `name` that `scope` may use: the platform's, then,
  // for a tenant, its own; version ascending within each.
  Result<std::vector<EnvironmentTemplateRecord>> EnvironmentTemplateVersions(
      const TenantScope& scope, const std::string& name);
  // Every version `scope` may use, ordered as above by name: the platform's
  // (when include_platform or the scope is the platform) and its own. At
  // most kMaxEnvironmentTemplateVersions per owner, so unpaged.
  Result<std::vector<EnvironmentTemplateRecord>> ListEnvironmentTemplates(const TenantScope& scope,
                                                                          bool include_platform);
  // Marks `scope`'s version retired (kept as history; no longer resolved).
  // kNotFound when the scope has no such version.
  Status RetireEnvironmentTemplate(const TenantScope& scope, const std::string& name,
                                   int64_t version, int64_t at);

  // --- Entitlements (tenant-owned): the models a tenant may call on shared
  // deployments ---
  // Idempotent: an existing grant is returned unchanged (its created_at kept).
  Result<EntitlementRecord> GrantEntitlement(const TenantScope& scope, const std::string& model,
                                             int64_t at);
  // kNotFound when the tenant holds no such grant.
  Status RevokeEntitlement(const TenantScope& scope, const std::string& model);
  // Ordered by model.
  Result<std::vector<EntitlementRecord>> ListEntitlements(const TenantScope& scope);

  // --- Gateway limits (tenant-owned): the tenant's row (key_id "") and per key ---
  // Upserts the row (scope, r.key_id); every limit 0 and no priority removes
  // it. A key row needs a key of the scope's tenant (kNotFound otherwise).
  // r.tenant_id is ignored: the scope decides.
  Status SetGatewayLimit(const TenantScope& scope, const GatewayLimitRecord& r);
  // kNotFound when no row is stored (which means: no limits).
  Result<GatewayLimitRecord> GetGatewayLimit(const TenantScope& scope, const std::string& key_id);
  // The tenant's row first (when stored), then its keys' rows by key id.
  Result<std::vector<GatewayLimitRecord>> ListGatewayLimits(const TenantScope& scope);

  // --- Usage records (tenant-owned, written by the gateway) ---
  // How far from now a usage record's time may be for billing to take it
  // (a gateway's clock far off, or a journal shipped long after): 35 days
  // back, 5 minutes ahead.
  struct UsageWindow {
    int64_t now_ms = 0;
    int64_t back_ms = 35LL * 86'400'000;
    int64_t ahead_ms = int64_t{5} * 60'000;
  };
  // Appends the records in ONE transaction. Idempotent by id: a record whose
  // id is already stored is skipped, so a gateway that re-ships a batch after
  // a crash stores each request exactly once. Records of a tenant id that
  // is unknown are dropped; records of an evicted tenant are kept (usage
  // that arrives after the eviction is still billable). Errors:
  // kInvalidArgument when a record can never be stored — no id or tenant,
  // or a text field that is not UTF-8 or holds a NUL byte (nothing of the
  // batch is stored); kUnavailable (or kInternal) when the store itself
  // failed.
  //
  // A record whose id is stored already with another payload (any field
  // different) is refused, never merged: kAlreadyExists naming it, nothing
  // of the batch stored. With `window`, a record timed outside it is
  // refused as kInvalidArgument naming the window.
  Status InsertUsageRecords(const std::vector<UsageRecord>& records,
                            const std::optional<UsageWindow>& window = std::nullopt);
  // The tenant's records matching `filter`, newest first (created_at, then
  // id, descending); the cursor is opaque.
  Result<Page<UsageRecord>> ListUsage(const TenantScope& scope, const UsageFilter& filter,
                                      const ListOptions& opts);
  // Totals of the records matching `filter`: one row per model or key
  // (group_by "model" | "key", ordered by group), or one grand-total row
  // with group "" (group_by ""). Errors: kInvalidArgument for another group_by.
  Result<std::vector<UsageTotals>> SummarizeUsage(const TenantScope& scope,
                                                  const UsageFilter& filter,
                                                  const std::string& group_by);

  // --- GPU usage records (tenant-owned, written by the GPU meter) ---
  // Stores the records in ONE transaction, in order. Idempotent by id: a
  // record whose id is stored is skipped (its stored values win), so a
  // meter that recomputes after a crash stores each stretch of time once.
  // A record that does not continue its subject's stored chain (the
  // subject's closing record is stored, or its records end elsewhere than
  // where this one starts) is skipped too: a meter with a stale view
  // cannot bill past an end or twice over a stretch.
  // Unlike token usage, records of an unknown tenant are stored too: they
  // come from the store's own allocation and job rows, which outlive an
  // eviction. Errors: kInvalidArgument for a record without id, tenant or
  // subject, with to < from, a negative amount, or text that is not UTF-8
  // or holds a NUL byte (nothing is stored).
  Status InsertGpuUsageRecords(const std::vector<GpuUsageRecord>& records);
  // The tenant's records matching `filter` (its from/to bound the records'
  // from_ms; subject_kind and job_id pick subjects), newest first (from_ms,
  // then id, descending).
  Result<Page<GpuUsageRecord>> ListGpuUsage(const TenantScope& scope, const GpuUsageFilter& filter,
                                            const ListOptions& opts);
  // Sums of the records matching `filter`: per GPU model and kind
  // (group_by "model"), per project ("project"), or one grand-total row
  // (""). Errors: kInvalidArgument for another group_by.
  Result<std::vector<GpuUsageTotals>> SummarizeGpuUsage(const TenantScope& scope,
                                                        const GpuUsageFilter& filter,
                                                        const std::string& group_by);
  // The GPU meter's reads for jobs (src/metering): every job run that
  // started and whose closing GPU usage record (subject kind job, subject
  // id "<job_id>.<attempt>") is not stored yet, and that still runs, or has
  // some records, or whose row changed at or after `changed_since_ms` (0:
  // every one), with its allocation's GPU model, kind and charge; ordered
  // by job id and attempt. A run whose allocation row is not the same
  // tenant's is not listed.
  Result<std::vector<JobRunToMeter>> ListJobRunsToMeterForMetering(int64_t changed_since_ms);
  // How far each of `subject_ids` (of one subject kind) is metered, read
  // from its records; an id without records is absent from the map. The
  // meter's only memory (src/metering): nothing else is kept.
  Result<std::map<std::string, GpuMeteredPoint>> GpuMeteredPointsForMetering(
      const std::string& subject_kind, const std::vector<std::string>& subject_ids);

  // --- Billing (store_billing.cc; the rules in src/billing) ---
  // Price books are the platform's. A book is made with its first version;
  // versions are numbered 1, 2, … and a version's effective_from is at or
  // after `now` and the version before it's (a change never rewrites a
  // past period). AlreadyExists for a taken name; NotFound for a book.
  Result<PriceBookRecord> CreatePriceBookForPlatform(PriceBookRecord book, PriceBookVersion first,
                                                     int64_t now);
  Result<std::vector<PriceBookRecord>> ListPriceBooksForPlatform();
  Result<PriceBookRecord> GetPriceBookForPlatform(const std::string& id);
  Result<std::vector<PriceBookVersion>> ListPriceBookVersionsForPlatform(
      const std::string& book_id);
  // Assigns the version number; FailedPrecondition for an effective time
  // before `now` or before the latest version's (at the same time, the
  // later version wins).
  Result<PriceBookVersion> AddPriceBookVersionForPlatform(PriceBookVersion v, int64_t now);
  // A tenant's next plan version (or, for tenant kDefaultPlanTenantId, the
  // platform's default plan's), effective as AddPriceBookVersion's. The
  // book must exist, with the currency of the tenant's earlier plans; the
  // anchor day stays what the first plan said, and a first plan may move it
  // from the 1st only while the tenant has no usage records at all
  // (FailedPrecondition).
  Result<BillingPlan> AddBillingPlanForPlatform(BillingPlan plan, int64_t now);
  Result<std::vector<BillingPlan>> ListBillingPlans(const TenantScope& scope);
  // Every book, version and plan: what rating and invoices price with.
  Result<PricingRows> PricingRowsForBilling();

  // Usage records not rated yet (rated = 0), oldest first, at most `limit`
  // of each source: token records and GPU records (of any subject kind).
  struct UnratedUsage {
    std::vector<UsageRecord> tokens;
    std::vector<GpuUsageRecord> gpu;
  };
  // tokens false: GPU records only.
  Result<UnratedUsage> UnratedUsageForBilling(size_t limit, bool tokens = true);
  // Token records not rated yet, summed per (tenant, key, model,
  // deployment) in the database: one record per group, its id the group's
  // key, its created_at the group's latest, its token counts the sums
  // (which may exceed kMaxRecordTokens). For counting budgets, where one
  // read per round must stay cheap however many records wait.
  Result<std::vector<UsageRecord>> UnratedTokenTotalsForBilling();
  // In ONE transaction: stores `rows` (each with its usage_period set; a
  // row whose key is stored already is skipped), counting each in its
  // usage period's invoice unless that period is finalised, then in the
  // tenant's first open period (an adjustment); and marks the token and
  // GPU records named rated. After a crash either all of it is stored or
  // none, and the records are rated again, to the same rows.
  // `anchors` holds the anchor day each row's tenant's usage_period was
  // computed with; when a tenant's plans say another (a first plan stored
  // since the caller read them), nothing is stored: FailedPrecondition,
  // and the caller rates again with fresh plans.
  Status StoreRatedUsageForBilling(const std::vector<std::string>& token_record_ids,
                                   const std::vector<std::string>& gpu_record_ids,
                                   const std::vector<RatedUsage>& rows,
                                   const std::map<std::string, int64_t>& anchors, int64_t now);
  // The tenant's rated usage counted in the invoice of the period starting
  // at `invoice_period`, summed per price, item, usage period, project and
  // key.
  Result<std::vector<RatedGroup>> RatedGroups(const TenantScope& scope, int64_t invoice_period);
  // Quantities of periods before `invoice_period` already counted in
  // earlier invoices, per usage period and price (project and key empty).
  Result<std::vector<RatedGroup>> InvoicedBefore(const TenantScope& scope, int64_t invoice_period);
  // The end of the tenant's last finalised period; 0 when none.
  Result<int64_t> FinalizedThrough(const TenantScope& scope);
  // Finalises the tenant's invoice for [period_start, period_end) under
  // the lock rating writes take, so no usage is rated into it meanwhile:
  // `compute` is given the period's groups and prior quantities (as
  // RatedGroups and InvoicedBefore) and the tenant's credit grants with
  // something left, and returns the document, total and what each grant
  // paid, which is taken off the grants in the same transaction
  // (InvalidArgument if a grant has less left); the invoice takes the
  // platform's next number. FailedPrecondition when
  // the period is finalised already or an earlier period with usage is
  // still open (invoices are final in order).
  struct InvoiceDocument {
    std::string currency;
    int64_t total_minor = 0;
    std::string document;                    // JSON text, the number filled in by `compute`
    std::vector<CreditApplication> credits;  // invoice_id filled in by the store
  };
  using InvoiceCompute = std::function<Result<InvoiceDocument>(
      int64_t number, const std::vector<RatedGroup>& groups,
      const std::vector<RatedGroup>& invoiced_before, const std::vector<CreditGrant>& credits)>;
  Result<InvoiceRecord> FinalizeInvoiceForBilling(const std::string& tenant_id,
                                                  int64_t period_start, int64_t period_end,
                                                  const std::string& invoice_id,
                                                  const InvoiceCompute& compute, int64_t now);
  // Every tenant billing may owe an invoice: those with rated usage or a
  // plan, with where their billing stands.
  struct BillingTenant {
    std::string tenant_id;
    int64_t finalized_through = 0;  // end of the last finalised period; 0 none
    int64_t first_open_usage = -1;  // earliest invoice_period of rated usage not finalised; -1 none
    int64_t first_plan_from = -1;   // effective_from of the first plan; -1 none
    bool live = true;               // false once the tenant is evicted (or unknown)
  };
  Result<std::vector<BillingTenant>> BillingTenantsForBilling();
  // Tenants with usage records or rated usage timed in [from, to).
  Result<std::vector<std::string>> TenantsWithUsageForBilling(int64_t from, int64_t to);
  Result<std::vector<InvoiceRecord>> ListInvoices(const TenantScope& scope);
  Result<InvoiceRecord> GetInvoice(const TenantScope& scope, const std::string& id);
  // For `atrium billing verify`: the tenant's token records and GPU
  // allocation records in [from, to) (by their time), rated or not, and
  // every rated row whose usage is in that range.
  struct UsageForVerify {
    std::vector<UsageRecord> tokens;
    std::vector<GpuUsageRecord> gpu;
    std::vector<std::string> unrated;  // ids of records not rated yet
    std::vector<RatedUsage> rated;
  };
  Result<UsageForVerify> UsageForVerifyForBilling(const TenantScope& scope, int64_t from,
                                                  int64_t to);

  // --- Credits (store_budgets.cc; the rules in src/billing/credit.h) ---
  Result<CreditGrant> CreateCreditGrant(const TenantScope& scope, const CreditGrant& grant);
  // The tenant's grants, oldest first.
  Result<std::vector<CreditGrant>> ListCreditGrants(const TenantScope& scope);
  // What grants paid of one invoice, by grant id.
  Result<std::vector<CreditApplication>> CreditApplicationsOf(const TenantScope& scope,
                                                              const std::string& invoice_id);
  // The billing service's budget for a prepaid tenant (scope "prepaid",
  // id "bud_prepaid_<tenant>"): made or its amount set; with `amount`
  // nullopt, deleted (the plan is no longer prepaid).
  Status SetPrepaidBudgetForBilling(const std::string& tenant_id, std::optional<int64_t> amount,
                                    const std::string& currency, int64_t now);

  // --- Budgets (store_budgets.cc; the rules in src/billing/budget.h) ---
  // One budget per (tenant, scope, subject): AlreadyExists for a second.
  Result<BudgetRecord> CreateBudget(const TenantScope& scope, const BudgetRecord& budget);
  // Changes amount, thresholds and hard of the budget `budget.id`.
  Result<BudgetRecord> UpdateBudget(const TenantScope& scope, const BudgetRecord& budget);
  Status DeleteBudget(const TenantScope& scope, const std::string& id);
  Result<BudgetRecord> GetBudget(const TenantScope& scope, const std::string& id);
  Result<std::vector<BudgetRecord>> ListBudgets(const TenantScope& scope);
  Result<std::vector<BudgetStatus>> ListBudgetStatuses(const TenantScope& scope);
  // Every budget of every tenant, and every status row.
  Result<std::vector<BudgetRecord>> BudgetsForBilling();
  Result<std::vector<BudgetStatus>> BudgetStatusesForBilling();
  // In ONE transaction: replaces each budget's status row (a budget
  // deleted meanwhile gets none) and appends the audit records of
  // thresholds crossed, so a crossing is notified once.
  Status StoreBudgetStatusesForBilling(const std::vector<BudgetStatus>& statuses,
                                       std::vector<AuditRecord> crossings);
  // What a gateway sees of budgets, after replacing its own holds with
  // `holds` (a budget absent from them: none) in ONE transaction: every
  // budget with its status, and per budget the sum and count of other
  // holders' positive holds updated at `now - fresh_ms` or later (older
  // ones are a gateway gone). Holds older than an hour are deleted.
  struct BudgetSnapshot {
    std::vector<BudgetRecord> budgets;
    std::vector<BudgetStatus> statuses;
    struct Others {
      int64_t amount_minor = 0;
      int64_t holders = 0;
    };
    std::map<std::string, Others> others;  // by budget id
  };
  Result<BudgetSnapshot> SyncBudgetHoldsForGateway(const std::string& holder,
                                                   const std::vector<BudgetHold>& holds,
                                                   int64_t now, int64_t fresh_ms);

  // --- Refusal counts (tenant-owned, written by the gateway) ---
  // Adds each count to its (tenant, key, reason, minute) row, creating it,
  // in ONE transaction; a row's count stops at kMaxRecordTokens. Counts of
  // a tenant that no longer exists are dropped. Not idempotent (a count
  // shipped twice counts twice): these are statistics, not bills. Errors:
  // kInvalidArgument for a count without tenant or reason, or not positive
  // (nothing is stored).
  Status AddGatewayRefusals(const std::vector<RefusalCount>& counts);
  // The tenant's refusals matching `filter` (its times bound the minute a
  // refusal was counted in; refusals have no model, so `model` must be
  // empty: kInvalidArgument otherwise), per key and reason (ordered so).
  Result<std::vector<RefusalTotals>> SummarizeGatewayRefusals(const TenantScope& scope,
                                                              const UsageFilter& filter);

  // --- The gateway's view (unscoped; the gateway serves every tenant) ---
  // Everything the gateway's policy snapshot is built from, read in one
  // read-only transaction (one consistent snapshot, one query per table):
  // every tenant row (the gateway serves only active ones), every tenant
  // key not revoked joined with its owner's state and role (platform keys
  // never call models), every deployment, entitlement and limit row.
  // rows.marker is GatewayPolicyMarkerForGateway() in the same snapshot.
  Result<GatewayPolicyRows> LoadGatewayPolicyForGateway();
  // A number that changes whenever a row LoadGatewayPolicyForGateway reads
  // may have changed: every store method that writes tenants, users, API
  // keys, deployments, entitlements or gateway limits bumps it in the same
  // transaction, whether called through the API or not (atrium dev, the
  // bootstrap key, tests). Not covered: time passing (a key expiring — the
  // rows carry expires_at), and rows edited behind the store. Compare it for
  // inequality, not order (a restored backup may go back). One row read.
  Result<int64_t> GatewayPolicyMarkerForGateway();

  // --- Jobs (tenant-owned; src/jobs) ---
  // Inserts `job` with its first event and audit record in one transaction.
  // AlreadyExists when the tenant has a job with the same idempotency key
  // (GetJobByIdempotencyKey then finds it) or the id is taken.
  Result<JobRecord> CreateJob(const JobRecord& job, const JobEventRecord& event, AuditRecord audit);
  // Writes `job` over the row of the same tenant and id, and appends
  // `events` (their seq assigned here) and `audit`, in one transaction.
  // The run of the row's attempt, once started (started_ms >= 0), is
  // written to job_runs in the same transaction (upserted by job and
  // attempt), and so are `ended_runs`: runs of attempts the row moved past
  // (a requeue resets the row's times). NotFound when the row is gone (the
  // tenant was evicted).
  Status CommitJob(const JobRecord& job, const std::vector<JobEventRecord>& events,
                   std::vector<AuditRecord> audit,
                   const std::vector<JobRunRecord>& ended_runs = {});
  // The runs of one of the tenant's jobs, by attempt; empty for a job that
  // never ran or is not the tenant's.
  Result<std::vector<JobRunRecord>> ListJobRuns(const TenantScope& scope,
                                                const std::string& job_id);
  Result<JobRecord> GetJob(const TenantScope& scope, const std::string& id);
  Result<JobRecord> GetJobByIdempotencyKey(const TenantScope& scope, const std::string& key);
  // Keyset by id; filter.tenant_id is ignored (the scope is the tenant).
  Result<Page<JobRecord>> ListJobs(const TenantScope& scope, const JobFilter& filter,
                                   const ListOptions& opts);
  // Events of one job in order; cursor: events after this seq.
  Result<Page<JobEventRecord>> ListJobEvents(const TenantScope& scope, const std::string& job_id,
                                             const ListOptions& opts);
  // Platform staff: any tenant's (filter.tenant_id "" = every tenant).
  Result<JobRecord> GetJobForPlatform(const std::string& id);
  Result<Page<JobRecord>> ListJobsForPlatform(const JobFilter& filter, const ListOptions& opts);
  // The job service's reconcile: every live job (pending, starting,
  // running) of every tenant, a job by id or by its current allocation.
  Result<std::vector<JobRecord>> ListLiveJobsForJobs();
  Result<JobRecord> GetJobForJobs(const std::string& id);
  Result<JobRecord> FindJobByAllocationForJobs(const std::string& allocation_id);
  // Every job of one tenant, any state (eviction stops and forgets them).
  Result<std::vector<JobRecord>> ListTenantJobsForJobs(const std::string& tenant_id);
  // How many live jobs (pending, starting, running: a requeue passes
  // through pending) pin the environment template version `pinned`
  // ("name@version", as the job's spec records it) — of tenant
  // `owner_tenant_id`, or of any tenant for "" (a platform template).
  // Retiring a version they pin would fail their next start or requeue.
  Result<int64_t> CountLiveJobsPinningForTemplates(const std::string& owner_tenant_id,
                                                   const std::string& pinned);

  // --- Job archives (tenant-owned; src/jobs/archive_service.h) ---
  // Inserts `a` for scope's tenant (a.tenant_id is ignored). FailedPrecondition
  // when the tenant already holds `max_per_tenant` archives; AlreadyExists
  // when the id is taken.
  Result<JobArchiveRecord> CreateJobArchive(const TenantScope& scope, JobArchiveRecord a,
                                            int64_t max_per_tenant);
  // NotFound for an id the scope's tenant does not hold (another tenant's too).
  Result<JobArchiveRecord> GetJobArchive(const TenantScope& scope, const std::string& id);
  // By id; at most max_per_tenant of them, so unpaged.
  Result<std::vector<JobArchiveRecord>> ListJobArchives(const TenantScope& scope);
  // NotFound as for GetJobArchive.
  Status DeleteJobArchive(const TenantScope& scope, const std::string& id);

  // --- Tenants' LoRA adapters on managed deployments (src/serving/adapters.h).
  // Inserts `a` for scope's tenant (a.tenant_id is ignored) when
  // a.deployment_id is still a managed deployment holding fewer than
  // `max_per_deployment` adapters (of every tenant) and the tenant fewer
  // than `max_per_tenant` (of every deployment): FailedPrecondition over a
  // bound, NotFound when the deployment is gone or external, AlreadyExists
  // for a name the tenant has on that deployment or a taken id.
  Result<AdapterRecord> CreateAdapter(const TenantScope& scope, AdapterRecord a,
                                      int64_t max_per_deployment, int64_t max_per_tenant);
  // NotFound for an id the scope's tenant does not hold (another tenant's too).
  Result<AdapterRecord> GetAdapter(const TenantScope& scope, const std::string& id);
  // The tenant's adapters by id, on `deployment_id` only unless "";
  // at most max_per_tenant of them, so unpaged.
  Result<std::vector<AdapterRecord>> ListAdapters(const TenantScope& scope,
                                                  const std::string& deployment_id);
  // NotFound as for GetAdapter. The gateway stops routing it at once.
  Status DeleteAdapter(const TenantScope& scope, const std::string& id);
  // Every tenant's adapters on `deployment_id`, by id (the serving
  // controller's unscoped read).
  Result<std::vector<AdapterRecord>> ListAdaptersForServing(const std::string& deployment_id);
  // Sets status and detail (the serving controller): the gateway routes an
  // adapter once it is ready. NotFound when it is gone.
  Status SetAdapterStatusForServing(const std::string& id, const std::string& status,
                                    const std::string& detail, int64_t at);

  // --- Audit ---
  // Assigns seq, chain_seq, prev_hash and hash atomically and appends.
  Result<AuditRecord> AppendAudit(AuditRecord record);
  // tenant_id nullopt = every record (operators); otherwise that tenant's.
  // Cursor: records after this seq, ascending.
  Result<Page<AuditRecord>> ListAudit(const std::optional<std::string>& tenant_id,
                                      const ListOptions& opts);
  // The recorded head of every chain, to detect a truncated tail.
  Result<std::vector<std::pair<std::string, std::pair<int64_t, std::string>>>> AuditHeads();

  // Raw access for tests that must tamper with rows (the audit tamper test).
  sql::Database& database() { return *db_; }

 private:
  std::unique_ptr<sql::Database> db_;
};

}  // namespace atrium
